package relay_test

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/bookrecon/bookrecon/internal/harness/kafkatest"
	"github.com/bookrecon/bookrecon/internal/outbox"
)

// TestRelayPublishesExactRecordsAndRowsLeave publishes a resolution, an escalation and a dead
// letter as the pipeline writes them (outbox.CloudEvent; the ingester's dead-letter headers)
// and checks each record on the broker: its key, value and every header, byte for byte and in
// order, then the relay's token. Then the published rows have left the outbox while their
// facts stay in outbox_fact, and writing the same facts again writes no row: a re-derived fact
// is not published twice, after its row is gone as before.
func TestRelayPublishesExactRecordsAndRowsLeave(t *testing.T) {
	t.Parallel()
	sfx := kafkatest.Suffix()
	res, esc, dlq := "res."+sfx, "esc."+sfx, "dlq."+sfx
	e := newRelayEnv(t, res, esc, dlq)
	kafkatest.CreateTopics(t, 1, res, esc, dlq)
	waitTopics(t, e.adm, res, esc, dlq)

	at := time.Date(2026, 12, 1, 15, 46, 46, 123456789, time.UTC)
	resID, escID := "0b8e0f5c-8f0e-5d55-a2a4-3a4a1c3b7d01", "7d3f6a2e-1c4b-5e8f-9a0d-2b6c4e8f1a02"
	dlqID := "booking.attempts.v1/3/1234"
	msgs := []outbox.Message{
		{Topic: res, Key: []byte("bi_1"), Value: []byte(`{"eventType":"attempt.resolved","status":"CONFIRMED"}`), EventID: resID,
			Headers: outbox.CloudEvent(resID, "/bookrecon", "attempt.resolved", "tenant-a/book:bi_1:v1", "bi_1", at)},
		{Topic: esc, Key: []byte("bi_2"), Value: []byte(`{"eventType":"escalation.opened","reason":"deadline_exceeded"}`), EventID: escID,
			Headers: outbox.CloudEvent(escID, "/bookrecon", "escalation.opened", "tenant-a/refund:pay_7:v2", "bi_2", at)},
		{Topic: dlq, Key: []byte{0xff, 0x00, 'k'}, Value: []byte("{not json"), EventID: dlqID, Headers: []outbox.Header{
			{Key: "bookrecon.dlq.reason", Value: "invalid_json"}, {Key: "bookrecon.dlq.detail", Value: "invalid character 'n' looking for beginning of object key string"},
			{Key: "bookrecon.source.topic", Value: "booking.attempts.v1"}, {Key: "bookrecon.source.partition", Value: "3"},
			{Key: "bookrecon.source.offset", Value: "1234"},
		}},
	}
	e.insert(t, msgs...)
	e.rounds(t, 1)

	want := map[string]string{
		res: "key bi_1 value {\"eventType\":\"attempt.resolved\",\"status\":\"CONFIRMED\"} headers [ce_specversion=1.0 ce_id=" + resID +
			" ce_source=/bookrecon ce_type=attempt.resolved ce_time=2026-12-01T15:46:46.123456789Z ce_subject=tenant-a/book:bi_1:v1" +
			" ce_partitionkey=bi_1 content-type=application/json bookrecon.relay.token=1]",
		esc: "key bi_2 value {\"eventType\":\"escalation.opened\",\"reason\":\"deadline_exceeded\"} headers [ce_specversion=1.0 ce_id=" + escID +
			" ce_source=/bookrecon ce_type=escalation.opened ce_time=2026-12-01T15:46:46.123456789Z ce_subject=tenant-a/refund:pay_7:v2" +
			" ce_partitionkey=bi_2 content-type=application/json bookrecon.relay.token=1]",
		dlq: "key \xff\x00k value {not json headers [bookrecon.dlq.reason=invalid_json" +
			" bookrecon.dlq.detail=invalid character 'n' looking for beginning of object key string" +
			" bookrecon.source.topic=booking.attempts.v1 bookrecon.source.partition=3 bookrecon.source.offset=1234 bookrecon.relay.token=1]",
	}
	for _, topic := range []string{res, esc, dlq} {
		recs := kafkatest.ReadAll(t, topic, 1, time.Second, 30*time.Second)
		if len(recs) != 1 {
			t.Fatalf("%s: %d records, want 1", topic, len(recs))
		}
		if got := describeRecord(recs[0]); got != want[topic] {
			t.Errorf("%s record:\n got %q\nwant %q", topic, got, want[topic])
		}
	}

	if n := e.scalar(t, `SELECT count(*) FROM outbox`); n != 0 {
		t.Errorf("outbox rows after publishing = %d, want 0: published rows leave the table", n)
	}
	if n := e.scalar(t, `SELECT count(*) FROM outbox_fact WHERE (topic, event_id) IN (($1, $2), ($3, $4), ($5, $6))`, res, resID, esc, escID, dlq, dlqID); n != 3 {
		t.Errorf("facts kept = %d, want 3", n)
	}
	e.insert(t, msgs...)
	if n := e.scalar(t, `SELECT count(*) FROM outbox`); n != 0 {
		t.Errorf("outbox rows after writing the published facts again = %d, want 0", n)
	}
	if got, err := e.relay.RunOnce(context.Background(), 100); err != nil || got != 0 {
		t.Errorf("RunOnce after the re-derived facts = %d, %v; want 0, nil", got, err)
	}
}

// describeRecord renders a record's key, value and headers (key=value, in order) exactly.
func describeRecord(r *kgo.Record) string {
	var b bytes.Buffer
	fmt.Fprintf(&b, "key %s value %s headers [", r.Key, r.Value)
	for i, h := range r.Headers {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s=%s", h.Key, h.Value)
	}
	b.WriteByte(']')
	return b.String()
}

// TestRelaySetsAsideMalformedHeaders: a row whose headers column does not decode is set aside
// as invalid_record without being sent, and parks its key (the key's later row waits) while
// another key's row is published; once its headers are mended and it is retried, both rows of
// its key follow in order.
func TestRelaySetsAsideMalformedHeaders(t *testing.T) {
	t.Parallel()
	out := "out." + kafkatest.Suffix()
	e := newRelayEnv(t, out)
	kafkatest.CreateTopics(t, 1, out)
	waitTopics(t, e.adm, out)
	e.insert(t, msg(out, "A", "a1", 10), msg(out, "A", "a2", 10), msg(out, "B", "b1", 10))
	if _, err := e.pool.Exec(context.Background(), `UPDATE outbox SET headers = '\x02ee' WHERE event_id = 'a1'`); err != nil {
		t.Fatal(err)
	}
	e.rounds(t, 3)
	aside, err := outbox.SetAside(context.Background(), e.pool, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(aside) != 1 || aside[0].EventID != "a1" || aside[0].ErrorClass != outbox.ClassInvalidRecord || aside[0].Failures != 1 ||
		aside[0].LastError != fmt.Sprintf("row %d headers: header 0 value: outbox: malformed headers: code 238", aside[0].ID) {
		t.Fatalf("set aside = %+v, want a1 once as invalid_record with the decoding error", aside)
	}
	if n := e.scalar(t, `SELECT count(*) FROM outbox WHERE event_id = 'a2' AND publish_failures = 0 AND set_aside_at IS NULL`); n != 1 {
		t.Errorf("a2 waiting untried: %d rows, want 1", n)
	}
	if n := testutil.ToFloat64(e.metrics.PublishFailures.WithLabelValues(out, "invalid_record")); n != 1 {
		t.Errorf("publish failures {invalid_record} = %v, want 1", n)
	}

	if _, err := e.pool.Exec(context.Background(), `UPDATE outbox SET headers = '\x0201' WHERE event_id = 'a1'`); err != nil {
		t.Fatal(err)
	}
	if err := outbox.Retry(context.Background(), e.pool, aside[0].ID); err != nil {
		t.Fatal(err)
	}
	e.rounds(t, 3)
	if got := names(t, out, 3); !slices.Equal(got, []string{"b1", "a1", "a2"}) {
		t.Errorf("records on %s = %v, want b1, then a1 and a2 in order", out, got)
	}
	if n := e.scalar(t, `SELECT count(*) FROM outbox`); n != 0 {
		t.Errorf("outbox rows left = %d, want 0", n)
	}
}
