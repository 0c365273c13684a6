package ingest_test

import (
	"bytes"
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/bookrecon/bookrecon/internal/harness/kafkatest"
	"github.com/bookrecon/bookrecon/internal/harness/pipelinetest"
	"github.com/bookrecon/bookrecon/internal/ingest"
	"github.com/bookrecon/bookrecon/internal/outbox"
	"github.com/bookrecon/bookrecon/internal/telemetry"
	"github.com/bookrecon/bookrecon/internal/topics"
)

// noise returns n incompressible bytes (the broker's limits apply to compressed batches).
func noise(n int, seed uint64) []byte {
	rng := rand.New(rand.NewPCG(seed, seed))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte('a' + rng.IntN(26))
	}
	return b
}

// TestLargeRecordDeadLettered: on topics made by topics.Ensure, an input record of ~1 MB (the
// most the input topic accepts; too_large for the contract) is dead-lettered with its original
// bytes: the dead-letter topic and the relay's producer accept it with the dead-letter headers,
// nothing is set aside, and the valid event behind it is applied.
func TestLargeRecordDeadLettered(t *testing.T) {
	t.Parallel()
	h := pipelinetest.New(t, 1)
	// The harness's own topics are plain; these are made as `bookrecon topics` makes them.
	tp := topics.FromSuffix("large." + kafkatest.Suffix())
	adm := kafkatest.Admin(t)
	if err := topics.Ensure(context.Background(), adm, 1, tp); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = adm.DeleteTopics(context.Background(), tp.All()...) })
	cfg := h.IngestConfig()
	cfg.Topics = tp
	reg := telemetry.NewRegistry()
	startIngester(t, cfg, ingest.Deps{Logger: discardLogger(), Registry: reg})

	big := noise(topics.MaxMessageBytes-2000, 1) // the record batch's framing takes the rest
	valid := h.SampleLines("attempts.jsonl")[0]  // evt_0001, attempt.started
	cl, err := kgo.NewClient(kgo.SeedBrokers(kafkatest.Brokers()...), kgo.ProducerBatchMaxBytes(topics.MaxMessageBytes),
		kgo.ProducerBatchCompression(kgo.NoCompression()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	err = cl.ProduceSync(context.Background(),
		&kgo.Record{Topic: tp.Attempts, Key: []byte("bi_big"), Value: big},
		&kgo.Record{Topic: tp.Attempts, Key: []byte("bi_sc01"), Value: valid}).FirstErr()
	if err != nil {
		t.Fatalf("the input topic refused a record of %d bytes: %v", len(big), err)
	}
	h.WaitFor("the dead letter published, evt_0001 applied", 60*time.Second, func() bool {
		return h.Published(tp.AttemptsDLQ) == 1 &&
			h.Scalar(`SELECT count(*) FROM processed_event`) == 1
	})
	if n := h.Scalar(`SELECT count(*) FROM outbox WHERE set_aside_at IS NOT NULL OR publish_failures > 0`); n != 0 {
		t.Errorf("outbox rows set aside or failed = %d, want 0", n)
	}
	got := kafkatest.ReadAll(t, tp.AttemptsDLQ, 1, time.Second, 30*time.Second)
	if len(got) != 1 || !bytes.Equal(got[0].Value, big) || kafkatest.Header(got[0], "bookrecon.dlq.reason") != "too_large" {
		t.Fatalf("dead letters = %d, want 1 with the original %d bytes and reason too_large", len(got), len(big))
	}
}

// TestDeadLetterSetAsideParksItsKey: when the dead-letter topic refuses a dead letter
// (max.message.bytes lowered to 100 KB by an operator), the relay sets that row aside and the
// ingester goes on: the key's later dead letter waits behind it, another key's dead letter and
// the valid events' effects are published, nothing is paused. Raising the limit and retrying the
// row publishes both of the key's dead letters, in order.
func TestDeadLetterSetAsideParksItsKey(t *testing.T) {
	t.Parallel()
	h := pipelinetest.New(t, 1)
	ctx := context.Background()
	adm := kafkatest.Admin(t)
	small := "100000"
	if _, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "max.message.bytes", Value: &small}}, h.Topics.AttemptsDLQ); err != nil {
		t.Fatal(err)
	}
	reg := telemetry.NewRegistry()
	startIngester(t, h.IngestConfig(), ingest.Deps{Logger: discardLogger(), Registry: reg})

	lines := h.SampleLines("attempts.jsonl")
	in := []*kgo.Record{
		{Key: []byte("bi_x"), Value: noise(200_000, 2)}, // too_large; its dead letter is refused
		{Key: []byte("bi_x"), Value: []byte(`{"a":`)},   // invalid_json; its dead letter waits
		{Key: []byte("bi_y"), Value: []byte(`[]`)},      // invalid_json; another key: published
		{Key: []byte("bi_sc01"), Value: lines[0]},       // evt_0001 started
		{Key: []byte("bi_sc01"), Value: lines[1]},       // evt_0002 succeeded: a resolution
	}
	for _, r := range in {
		r.Topic = h.Topics.Attempts
	}
	if err := h.Producer.ProduceSync(ctx, in...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	h.WaitFor("one row set aside, bi_y's dead letter and the resolution published", 60*time.Second, func() bool {
		return h.Scalar(`SELECT count(*) FROM outbox WHERE set_aside_at IS NOT NULL`) == 1 &&
			h.Published("") == 2
	})
	time.Sleep(time.Second) // rounds go by; the parked row must stay parked
	aside, err := outbox.SetAside(ctx, h.Pool, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(aside) != 1 || aside[0].EventID != h.Topics.Attempts+"/0/0" || aside[0].ErrorClass != outbox.ClassRecordTooLarge {
		t.Fatalf("set aside = %+v, want the dead letter of offset 0, record_too_large", aside)
	}
	if n := h.Scalar(`SELECT count(*) FROM outbox WHERE event_id = $1 AND set_aside_at IS NULL AND publish_failures = 0`, h.Topics.Attempts+"/0/1"); n != 1 {
		t.Errorf("the key's later dead letter: %d rows waiting untried, want 1", n)
	}
	if p := metric(t, reg, "bookrecon_ingest_pauses_total"); p != 0 {
		t.Errorf("ingester pauses = %v, want 0", p)
	}
	if n := metric(t, reg, "bookrecon_outbox_publish_failures_total", "topic", h.Topics.AttemptsDLQ, "error_class", "record_too_large"); n != 1 {
		t.Errorf("publish failures {dlq, record_too_large} = %v, want 1", n)
	}
	if n := metric(t, reg, "bookrecon_outbox_set_aside_records"); n != 1 {
		t.Errorf("bookrecon_outbox_set_aside_records = %v, want 1", n)
	}
	if n := len(kafkatest.ReadAll(t, h.Topics.Resolutions, 1, time.Second, 30*time.Second)); n != 1 {
		t.Errorf("resolutions = %d, want 1", n)
	}

	big := "1048588"
	if _, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "max.message.bytes", Value: &big}}, h.Topics.AttemptsDLQ); err != nil {
		t.Fatal(err)
	}
	h.WaitFor("both of bi_x's dead letters published after the retry", 60*time.Second, func() bool {
		if aside, _ := outbox.SetAside(ctx, h.Pool, 10); len(aside) == 1 {
			_ = outbox.Retry(ctx, h.Pool, aside[0].ID) // until the broker applies the new limit
		}
		return h.OutboxDrained()
	})
	var order []string
	for _, r := range kafkatest.ReadAll(t, h.Topics.AttemptsDLQ, 3, time.Second, 30*time.Second) {
		order = append(order, string(r.Key)+"@"+kafkatest.Header(r, "bookrecon.source.offset"))
	}
	if len(order) != 3 || order[0] != "bi_y@2" || order[1] != "bi_x@0" || order[2] != "bi_x@1" {
		t.Errorf("dead letters = %v, want [bi_y@2 bi_x@0 bi_x@1]", order)
	}
}
