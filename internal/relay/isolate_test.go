package relay_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/bookrecon/bookrecon/internal/harness/kafkatest"
	"github.com/bookrecon/bookrecon/internal/harness/pgtest"
	"github.com/bookrecon/bookrecon/internal/outbox"
	"github.com/bookrecon/bookrecon/internal/postgres"
	"github.com/bookrecon/bookrecon/internal/relay"
)

// relayEnv is one relay test's database, broker client and relay.
type relayEnv struct {
	pool    *pgxpool.Pool
	adm     *kadm.Client
	relay   *relay.Relay
	reg     *prometheus.Registry
	metrics *relay.Metrics
}

func newRelayEnv(t *testing.T, topics ...string) *relayEnv {
	t.Helper()
	e := &relayEnv{pool: pgtest.NewPool(t), adm: kafkatest.Admin(t), reg: prometheus.NewRegistry()}
	cl, err := kgo.NewClient(kgo.SeedBrokers(kafkatest.Brokers()...), kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordDeliveryTimeout(10*time.Second), kgo.UnknownTopicRetries(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	e.metrics = relay.NewMetrics(e.reg, topics)
	e.relay = &relay.Relay{Pool: e.pool, Client: cl, Metrics: e.metrics, Logger: slog.New(slog.DiscardHandler),
		Config: relay.Config{RetryInitial: 50 * time.Millisecond, TopicPause: 200 * time.Millisecond}}
	return e
}

// insert writes rows into the outbox in one transaction, in order; each value's first bytes name
// the row ("r1", "r2", …) and its eventId is that name.
func (e *relayEnv) insert(t *testing.T, ms ...outbox.Message) {
	t.Helper()
	ctx := context.Background()
	err := postgres.WithTx(ctx, e.pool, func(tx pgx.Tx) error {
		for _, m := range ms {
			if err := outbox.Insert(ctx, tx, m); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// rounds runs RunOnce n times.
func (e *relayEnv) rounds(t *testing.T, n int) {
	t.Helper()
	for range n {
		if _, err := e.relay.RunOnce(context.Background(), 100); err != nil {
			t.Fatalf("RunOnce: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (e *relayEnv) scalar(t *testing.T, q string, args ...any) int {
	t.Helper()
	var n int
	if err := e.pool.QueryRow(context.Background(), q, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

// names returns the ce_id header of every record on topic, in offset order per partition
// (every topic here has one partition).
func names(t *testing.T, topic string, min int) []string {
	t.Helper()
	var out []string
	for _, r := range kafkatest.ReadAll(t, topic, min, time.Second, 30*time.Second) {
		out = append(out, kafkatest.Header(r, "ce_id"))
	}
	return out
}

func msg(topic, key, id string, size int) outbox.Message {
	var k []byte
	if key != "" {
		k = []byte(key)
	}
	// Incompressible filler: the broker's limit applies to the compressed batch.
	rng := rand.New(rand.NewPCG(uint64(size), uint64(len(id))))
	v := []byte(id + ":")
	for len(v) < size {
		v = append(v, byte('a'+rng.IntN(26)))
	}
	return outbox.Message{Topic: topic, Key: k, Value: v, EventID: id, Headers: []outbox.Header{{Key: "ce_id", Value: id}}}
}

// TestRelaySetsAsideRecordErrors: a row the broker refuses for its size (MESSAGE_TOO_LARGE on a
// topic whose max.message.bytes is 4 KiB) is set aside with its error, counted and listed; it
// parks its (topic, key): the key's later row waits while every other key, the same key on
// another topic and null-key rows flow, each published exactly once however many rounds run.
// After the fix (the topic's limit raised) Retry releases it and its key, in order; Discard
// gives up another one for good with its reason.
func TestRelaySetsAsideRecordErrors(t *testing.T) {
	t.Parallel()
	sfx := kafkatest.Suffix()
	small, out := "small."+sfx, "out."+sfx
	e := newRelayEnv(t, small, out)
	ctx := context.Background()
	four := "4096"
	if _, err := e.adm.CreateTopic(ctx, 1, 1, map[string]*string{"max.message.bytes": &four}, small); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = e.adm.DeleteTopics(context.Background(), small) })
	kafkatest.CreateTopics(t, 1, out)
	waitTopics(t, e.adm, small, out)

	e.insert(t,
		msg(small, "A", "r1", 100),
		msg(small, "A", "r2", 8000), // too large: set aside, parks (small, A)
		msg(small, "A", "r3", 100),  // waits behind r2
		msg(small, "B", "r4", 100),
		msg(out, "A", "r5", 100),   // the same key on another topic flows
		msg(small, "", "r6", 8000), // null key, too large: set aside, parks nothing
		msg(small, "", "r7", 100),
		msg(small, "B", "r8", 100),
	)
	e.rounds(t, 10)

	if got, want := names(t, small, 4), []string{"r1", "r4", "r7", "r8"}; !slices.Equal(got, want) {
		t.Fatalf("records on %s = %v, want %v (each once, r3 held back by r2)", small, got, want)
	}
	if got := names(t, out, 1); !slices.Equal(got, []string{"r5"}) {
		t.Fatalf("records on %s = %v, want [r5]", out, got)
	}
	aside, err := outbox.SetAside(ctx, e.pool, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(aside) != 2 || aside[0].EventID != "r2" || aside[1].EventID != "r6" {
		t.Fatalf("set aside = %+v, want r2 and r6", aside)
	}
	for _, a := range aside {
		if a.ErrorClass != outbox.ClassRecordTooLarge || a.Failures != 1 || !strings.Contains(a.LastError, "MESSAGE_TOO_LARGE") || a.Topic != small {
			t.Errorf("set aside %s = %+v, want record_too_large once, MESSAGE_TOO_LARGE, topic %s", a.EventID, a, small)
		}
	}
	if n := testutil.ToFloat64(e.metrics.PublishFailures.WithLabelValues(small, "record_too_large")); n != 2 {
		t.Errorf("publish failures {%s, record_too_large} = %v, want 2", small, n)
	}
	if n := e.scalar(t, `SELECT count(*) FROM outbox`); n != 3 {
		t.Errorf("unpublished rows = %d, want 3 (r2, r3, r6)", n)
	}
	if err := e.relay.Ready(); err != nil {
		t.Errorf("Ready = %v; a set-aside row pauses no topic", err)
	}

	// The fix, then the release: r2 and then r3 follow r1 in order; r6 is discarded.
	big := "1048588"
	if _, err := e.adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "max.message.bytes", Value: &big}}, small); err != nil {
		t.Fatal(err)
	}
	if err := outbox.Retry(ctx, e.pool, id(t, e, "r2")); err != nil {
		t.Fatal(err)
	}
	if err := outbox.Discard(ctx, e.pool, id(t, e, "r6"), "replaced by r7 (ops ticket 42)"); err != nil {
		t.Fatal(err)
	}
	if err := outbox.Retry(ctx, e.pool, id(t, e, "r6")); !errors.Is(err, outbox.ErrNotSetAside) {
		t.Errorf("Retry of a discarded row = %v, want ErrNotSetAside", err)
	}
	// The broker may take a moment to apply the new limit: rounds until r3 is out.
	deadline := time.Now().Add(20 * time.Second)
	for e.scalar(t, `SELECT count(*) FROM outbox_fact f WHERE NOT EXISTS (SELECT 1 FROM outbox o WHERE o.topic = f.topic AND o.event_id = f.event_id) AND f.event_id = 'r3'`) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("r3 not published 20 s after r2 was retried")
		}
		if aside, _ := outbox.SetAside(ctx, e.pool, 10); len(aside) == 1 { // the old limit still applied
			_ = outbox.Retry(ctx, e.pool, aside[0].ID)
		}
		e.rounds(t, 1)
	}
	got := names(t, small, 6)
	var keyA []string
	for _, n := range got {
		if n == "r1" || n == "r2" || n == "r3" {
			keyA = append(keyA, n)
		}
	}
	if !slices.Equal(keyA, []string{"r1", "r2", "r3"}) || len(got) != 6 {
		t.Fatalf("records on %s = %v, want 6 with key A in order r1 r2 r3", small, got)
	}
	if n := e.scalar(t, `SELECT count(*) FROM outbox WHERE event_id = 'r6' AND discarded_at IS NOT NULL AND discard_reason = 'replaced by r7 (ops ticket 42)'`); n != 1 {
		t.Errorf("r6 discarded with its reason: %d rows, want 1", n)
	}
	if backlog, _, _ := outbox.Backlog(ctx, e.pool); backlog != 0 {
		t.Errorf("backlog = %d, want 0", backlog)
	}
}

// TestRelayPausesMissingTopic: rows of a topic that does not exist pause that topic (Ready
// fails, TopicPaused is 1) without being set aside or marked, while another topic's rows flow;
// once the topic exists its rows are published in order and the pause ends.
func TestRelayPausesMissingTopic(t *testing.T) {
	t.Parallel()
	sfx := kafkatest.Suffix()
	missing, out := "missing."+sfx, "out."+sfx
	e := newRelayEnv(t, missing, out)
	kafkatest.CreateTopics(t, 1, out)
	waitTopics(t, e.adm, out)
	e.insert(t, msg(missing, "A", "m1", 10), msg(out, "A", "o1", 10), msg(missing, "B", "m2", 10), msg(out, "B", "o2", 10))

	deadline := time.Now().Add(30 * time.Second)
	for e.relay.Ready() == nil || e.scalar(t, `SELECT count(*) FROM outbox_fact f WHERE NOT EXISTS (SELECT 1 FROM outbox o WHERE o.topic = f.topic AND o.event_id = f.event_id)`) < 2 {
		if time.Now().After(deadline) {
			t.Fatal("the missing topic never paused, or the other topic's rows were not published")
		}
		if _, err := e.relay.RunOnce(context.Background(), 100); err != nil {
			t.Fatalf("RunOnce: %v", err)
		}
	}
	if err := e.relay.Ready(); err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("Ready = %v, want the paused topic %s", err, missing)
	}
	if v := testutil.ToFloat64(e.metrics.TopicPaused.WithLabelValues(missing)); v != 1 {
		t.Errorf("topic paused gauge = %v, want 1", v)
	}
	if n := e.scalar(t, `SELECT (SELECT count(*) FROM outbox WHERE topic = $1 AND (set_aside_at IS NOT NULL OR publish_failures > 0)) + (SELECT count(*) FROM outbox_fact f WHERE NOT EXISTS (SELECT 1 FROM outbox o WHERE o.topic = f.topic AND o.event_id = f.event_id) AND f.topic = $1)`, missing); n != 0 {
		t.Errorf("rows of the paused topic set aside, failed or marked = %d, want 0", n)
	}
	if got := names(t, out, 2); !slices.Equal(got, []string{"o1", "o2"}) {
		t.Errorf("records on %s = %v, want [o1 o2]", out, got)
	}

	kafkatest.CreateTopics(t, 1, missing)
	deadline = time.Now().Add(30 * time.Second)
	for e.scalar(t, `SELECT count(*) FROM outbox`) > 0 {
		if time.Now().After(deadline) {
			t.Fatal("rows of the created topic not published within 30 s")
		}
		if _, err := e.relay.RunOnce(context.Background(), 100); err != nil {
			t.Logf("RunOnce: %v", err) // metadata may lag the creation
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := e.relay.Ready(); err != nil {
		t.Errorf("Ready after the topic exists = %v, want nil", err)
	}
	if got := names(t, missing, 2); !slices.Equal(got, []string{"m1", "m2"}) {
		t.Errorf("records on %s = %v, want [m1 m2]", missing, got)
	}
}

// TestRelayWavesKeepKeyOrder: the relay's waves send a key's row only after its
// previous row is acknowledged, so concurrent rounds of many keys keep per-key order.
func TestRelayWavesKeepKeyOrder(t *testing.T) {
	t.Parallel()
	out := "waves." + kafkatest.Suffix()
	e := newRelayEnv(t, out)
	kafkatest.CreateTopics(t, 3, out)
	waitTopics(t, e.adm, out)
	var ms []outbox.Message
	for i := range 200 {
		ms = append(ms, msg(out, fmt.Sprintf("k%d", i%7), fmt.Sprintf("w%03d", i), 50))
	}
	e.insert(t, ms...)
	var mu sync.Mutex
	total := 0
	e.relay.Published = func(n int) { mu.Lock(); total += n; mu.Unlock() }
	e.rounds(t, 3)
	if total != 200 {
		t.Fatalf("published %d, want 200", total)
	}
	last := map[string]string{}
	for _, r := range kafkatest.ReadAll(t, out, 200, time.Second, 30*time.Second) {
		k, n := string(r.Key), kafkatest.Header(r, "ce_id")
		if p, ok := last[k]; ok && n <= p {
			t.Errorf("key %s: %s after %s", k, n, p)
		}
		last[k] = n
		if !bytes.HasPrefix(r.Value, []byte(n+":")) {
			t.Errorf("record %s value %q", n, r.Value)
		}
	}
}

func id(t *testing.T, e *relayEnv, eventID string) int64 {
	t.Helper()
	var id int64
	if err := e.pool.QueryRow(context.Background(), `SELECT id FROM outbox WHERE event_id = $1`, eventID).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

// waitTopics waits until every partition of the named topics has a leader, so a test's first
// produce does not meet the broker's metadata catching up with the creation.
func waitTopics(t *testing.T, adm *kadm.Client, names ...string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		md, err := adm.Metadata(context.Background(), names...)
		ready := err == nil
		for _, n := range names {
			td, ok := md.Topics[n]
			if !ok || td.Err != nil || len(td.Partitions) == 0 {
				ready = false
				continue
			}
			for _, p := range td.Partitions {
				if p.Err != nil || p.Leader < 0 {
					ready = false
				}
			}
		}
		if ready {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("topics %v have no leaders after 30 s (%v)", names, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestRelaySetsAsideRowWithLongKey: a dead letter keeps its record's key, of any size; a row
// with a 6 KB key that the broker refuses is set aside like any other (the parking index holds
// the key's md5, not the key, whose btree entry would exceed PostgreSQL's limit: 54000).
func TestRelaySetsAsideRowWithLongKey(t *testing.T) {
	t.Parallel()
	small := "small." + kafkatest.Suffix()
	e := newRelayEnv(t, small)
	ctx := context.Background()
	four := "4096"
	if _, err := e.adm.CreateTopic(ctx, 1, 1, map[string]*string{"max.message.bytes": &four}, small); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = e.adm.DeleteTopics(context.Background(), small) })
	waitTopics(t, e.adm, small)
	long := msg(small, "", "l1", 10)
	long.Key = []byte(msg(small, "", "k", 6000).Value) // incompressible
	e.insert(t, long, msg(small, "A", "l2", 10))
	e.rounds(t, 3)
	aside, err := outbox.SetAside(ctx, e.pool, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(aside) != 1 || aside[0].EventID != "l1" || aside[0].ErrorClass != outbox.ClassRecordTooLarge {
		t.Fatalf("set aside = %+v, want l1 (record_too_large)", aside)
	}
	if got := names(t, small, 1); !slices.Equal(got, []string{"l2"}) {
		t.Errorf("records on %s = %v, want [l2]", small, got)
	}
}
