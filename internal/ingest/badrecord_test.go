package ingest_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/bookrecon/bookrecon/internal/harness/kafkatest"
	"github.com/bookrecon/bookrecon/internal/harness/pipelinetest"
	"github.com/bookrecon/bookrecon/internal/ingest"
	"github.com/bookrecon/bookrecon/internal/outbox"
	"github.com/bookrecon/bookrecon/internal/telemetry"
)

// TestEveryRecordKindMovesOn delivers, on one partition, every kind of record a broker can
// deliver — a tombstone (null value), an empty value, a null key, odd headers (empty name, null
// value, repeated names, binary bytes), a record whose dead letter the database refuses as built —
// each followed by valid events, and a tombstone on the decisions topic. Every record is applied
// or dead-lettered and the partition moves on: exact dead letters (null stays null, empty stays
// empty, original key), exact applied events, and the ingester never paused.
func TestEveryRecordKindMovesOn(t *testing.T) {
	t.Parallel()
	h := pipelinetest.New(t, 1)
	ctx := context.Background()
	// The database refuses the dead letter of the non-object record as first built (as a CHECK
	// would): the ingester must write it again, not pause as if PostgreSQL were down. The headers
	// are in outbox.EncodeHeaders's encoding: the detail is its key's code, then a literal.
	detail := outbox.EncodeHeaders([]outbox.Header{{Key: "bookrecon.dlq.detail", Value: "record is not a JSON object"}}, "", nil)
	for _, q := range []string{
		`CREATE FUNCTION refuse_dead_letter() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION 'refused by the test' USING ERRCODE = '23514'; END $$`,
		`CREATE TRIGGER refuse_dead_letter BEFORE INSERT ON outbox FOR EACH ROW
		WHEN (position('\x` + hex.EncodeToString(detail) + `'::bytea IN NEW.headers) > 0)
		EXECUTE FUNCTION refuse_dead_letter()`,
	} {
		if _, err := h.Pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	reg := telemetry.NewRegistry()
	startIngester(t, h.IngestConfig(), ingest.Deps{Logger: discardLogger(), Registry: reg})

	now := time.Now().UTC()
	started := func(n int) []byte {
		return fmt.Appendf(nil, `{"specVersion":1,"eventId":"evt_%d","eventType":"attempt.started","occurredAt":%q,`+
			`"tenantId":"t_1","bookingIntentId":"bi_%d","operation":"BOOK","operationVersion":1,"idempotencyKey":"book:bi_%d:v1",`+
			`"provider":"sim-hotels","request":{"offerVersion":"off_1:1","travellerRef":"tr_1","stay":{"propertyId":"h_1",`+
			`"checkIn":"2027-02-03","checkOut":"2027-02-06"},"amount":{"value":"249.90","currency":"EUR"}},`+
			`"recovery":{"clientReference":"cr_%d"}}`, n, now.Format(time.RFC3339Nano), n, n, n)
	}
	odd := []kgo.RecordHeader{{Key: "", Value: []byte("x")}, {Key: "traceparent", Value: nil},
		{Key: "dup", Value: []byte("1")}, {Key: "dup", Value: []byte("2")}, {Key: "bin\x00\xff", Value: []byte{0, 0xff, 0xfe}}}
	in := []*kgo.Record{
		{Key: []byte("bi_1"), Value: nil},                      // 0: tombstone → invalid_json, value stays null
		{Key: []byte("bi_1"), Value: started(1)},               // 1: applied
		{Key: []byte("bi_2"), Value: []byte{}},                 // 2: empty → invalid_json, value stays empty
		{Key: nil, Value: started(2)},                          // 3: null key, applied
		{Key: []byte("bi_3"), Value: started(3), Headers: odd}, // 4: odd headers, applied
		{Key: nil, Value: nil, Headers: odd},                   // 5: tombstone with null key and odd headers
		{Key: []byte("bi_4"), Value: []byte(`[1,2]`)},          // 6: not an object; its dead letter is refused once
		{Key: []byte("bi_4"), Value: started(4)},               // 7: applied
	}
	for _, r := range in {
		r.Topic = h.Topics.Attempts
	}
	in = append(in, &kgo.Record{Topic: h.Topics.Decisions, Key: []byte("bi_1"), Value: nil}) // decision tombstone
	if err := h.Producer.ProduceSync(ctx, in...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	h.WaitFor("4 applied, 5 dead letters, outbox drained", 60*time.Second, func() bool {
		return h.Scalar(`SELECT count(*) FROM processed_event`) == 4 &&
			h.Scalar(`SELECT count(*) FROM outbox_fact WHERE topic IN ($1, $2)`, h.Topics.AttemptsDLQ, h.Topics.DecisionsDLQ) == 5 &&
			h.OutboxDrained()
	})
	if n := h.Scalar(`SELECT count(*) FROM booking_attempt WHERE status = 'IN_PROGRESS'`); n != 4 {
		t.Errorf("IN_PROGRESS attempts = %d, want 4", n)
	}
	if p := metric(t, reg, "bookrecon_ingest_pauses_total"); p != 0 {
		t.Errorf("paused = %v, want 0: a bad record was taken for an outage", p)
	}
	if n := metric(t, reg, "bookrecon_dead_letters_total", "topic", "booking.attempts.v1", "reason", "invalid_json"); n != 4 {
		t.Errorf("attempts dead letters (invalid_json) = %v, want 4", n)
	}
	if n := metric(t, reg, "bookrecon_dead_letters_total", "topic", "booking.manual-decisions.v1", "reason", "invalid_json"); n != 1 {
		t.Errorf("decision dead letters (invalid_json) = %v, want 1", n)
	}

	type dl struct {
		key, value       []byte
		nullKey, nullVal bool
		detail, offset   string
	}
	want := []dl{
		{key: []byte("bi_1"), nullVal: true, detail: "record value is null (a Kafka tombstone)", offset: "0"},
		{key: []byte("bi_2"), value: []byte{}, detail: "record value is empty", offset: "2"},
		{nullKey: true, nullVal: true, detail: "record value is null (a Kafka tombstone)", offset: "5"},
		{key: []byte("bi_4"), value: []byte(`[1,2]`), detail: ingest.DetailDeadLetterRewritten + "23514", offset: "6"},
	}
	got := kafkatest.ReadAll(t, h.Topics.AttemptsDLQ, len(want), time.Second, 30*time.Second)
	if len(got) != len(want) {
		t.Fatalf("attempt dead letters on the topic = %d, want %d", len(got), len(want))
	}
	for i, w := range want {
		r := got[i]
		if (r.Key == nil) != w.nullKey || !bytes.Equal(r.Key, w.key) {
			t.Errorf("dead letter %d key = %q (nil %v), want %q (nil %v)", i, r.Key, r.Key == nil, w.key, w.nullKey)
		}
		if (r.Value == nil) != w.nullVal || !bytes.Equal(r.Value, w.value) {
			t.Errorf("dead letter %d value = %q (nil %v), want %q (nil %v)", i, r.Value, r.Value == nil, w.value, w.nullVal)
		}
		if d := kafkatest.Header(r, "bookrecon.dlq.detail"); d != w.detail {
			t.Errorf("dead letter %d detail = %q, want %q", i, d, w.detail)
		}
		if g := kafkatest.Header(r, "bookrecon.dlq.reason"); g != "invalid_json" {
			t.Errorf("dead letter %d reason = %q, want invalid_json", i, g)
		}
		if o := kafkatest.Header(r, "bookrecon.source.offset"); o != w.offset {
			t.Errorf("dead letter %d source offset = %q, want %s", i, o, w.offset)
		}
	}
	dec := kafkatest.ReadAll(t, h.Topics.DecisionsDLQ, 1, time.Second, 30*time.Second)
	if len(dec) != 1 || dec[0].Value != nil || string(dec[0].Key) != "bi_1" {
		t.Fatalf("decision dead letters = %d (want 1 with key bi_1 and a null value)", len(dec))
	}
}

// decisionFixture runs an ingester on a fresh pipeline whose intent bi_1 (tenant t_1) is
// started and IN_PROGRESS, and returns its harness, the ingester's registry, and send, which
// publishes a record of bi_1 (the fields every record of it shares, then v) and waits until
// processed_event holds processed rows.
func decisionFixture(t *testing.T) (h *pipelinetest.Harness, reg *prometheus.Registry, send func(topic, v string, processed int)) {
	t.Helper()
	h = pipelinetest.New(t, 1)
	reg = telemetry.NewRegistry()
	startIngester(t, h.IngestConfig(), ingest.Deps{Logger: discardLogger(), Registry: reg})
	at := time.Now().UTC().Format(time.RFC3339Nano)
	head := `{"specVersion":1,"occurredAt":"` + at + `","tenantId":"t_1","bookingIntentId":"bi_1","idempotencyKey":"book:bi_1:v1",`
	send = func(topic string, v string, processed int) {
		t.Helper()
		if err := h.Producer.ProduceSync(context.Background(), &kgo.Record{Topic: topic, Key: []byte("bi_1"), Value: []byte(head + v)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
		h.WaitFor(fmt.Sprintf("%d processed events", processed), 60*time.Second, func() bool {
			return h.Scalar(`SELECT count(*) FROM processed_event`) == processed
		})
	}
	send(h.Topics.Attempts, `"eventId":"e1","eventType":"attempt.started","operation":"BOOK","operationVersion":1,"provider":"sim-hotels",`+
		`"request":{"offerVersion":"o:1","travellerRef":"tr_1","stay":{"propertyId":"h_1","checkIn":"2027-02-03","checkOut":"2027-02-06"},`+
		`"amount":{"value":"1.00","currency":"EUR"}},"recovery":{"clientReference":"cr_1"}}`, 1)
	return h, reg, send
}

// poisonAudit makes PostgreSQL refuse (23514) the audit row of the event eventID.
func poisonAudit(t *testing.T, h *pipelinetest.Harness, eventID string) {
	t.Helper()
	for _, q := range []string{
		`CREATE FUNCTION poison() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION 'poisoned decision' USING ERRCODE = '23514'; END $$`,
		`CREATE TRIGGER poison BEFORE INSERT ON attempt_transition FOR EACH ROW WHEN (NEW.event_id = '` + eventID + `') EXECUTE FUNCTION poison()`,
	} {
		if _, err := h.Pool.Exec(context.Background(), q); err != nil {
			t.Fatal(err)
		}
	}
}

// unknownAfterRead is bi_1's attempt.outcome_unknown (a read timeout after the request was sent).
const unknownAfterRead = `"eventId":"e2","eventType":"attempt.outcome_unknown","operation":"BOOK","operationVersion":1,"provider":"sim-hotels",` +
	`"outcome":{"timeoutClass":"read_timeout","requestSent":true}}`

// TestKeptDecisionFailureCounted: a manual decision kept for an IN_PROGRESS attempt fails to apply
// (its audit row refused, 23514) in the ingester's transaction that turns the attempt UNKNOWN:
// the attempt's own transition commits, the decision is marked failed, counted in
// bookrecon_item_failures_total{stage="decision"} and the ingester never pauses; the batch is rerun
// record by record once (bookrecon_ingest_batches_rerun_total).
func TestKeptDecisionFailureCounted(t *testing.T) {
	t.Parallel()
	h, reg, send := decisionFixture(t)
	send(h.Topics.Decisions, `"eventId":"d1","eventType":"decision.recorded","decision":"FAILED","actor":"ops.1","reason":"provider says no"}`, 2)
	if n := h.Scalar(`SELECT count(*) FROM pending_decision WHERE applied_at IS NULL AND failed_at IS NULL`); n != 1 {
		t.Fatalf("kept decisions = %d, want 1", n)
	}
	poisonAudit(t, h, "d1")
	send(h.Topics.Attempts, unknownAfterRead, 3)
	if n := h.Scalar(`SELECT count(*) FROM booking_attempt WHERE status = 'UNKNOWN'`); n != 1 {
		t.Errorf("UNKNOWN attempts = %d, want 1 (the attempt's own transition commits)", n)
	}
	if n := h.Scalar(`SELECT count(*) FROM pending_decision WHERE failed_at IS NOT NULL AND applied_at IS NULL AND failure_reason LIKE '%poisoned decision%'`); n != 1 {
		t.Errorf("decisions marked failed with the reason = %d, want 1", n)
	}
	if n := metric(t, reg, "bookrecon_item_failures_total", "stage", "decision", "error_class", "integrity_constraint_violation"); n != 1 {
		t.Errorf("item failures {decision, integrity_constraint_violation} = %v, want 1", n)
	}
	if p := metric(t, reg, "bookrecon_ingest_pauses_total"); p != 0 {
		t.Errorf("pauses = %v, want 0", p)
	}
	// The set-based write applies the kept decision in memory; the database refuses it, so that
	// batch is rerun record by record, where the decision fails under its own savepoint.
	if n := metric(t, reg, "bookrecon_ingest_batches_rerun_total"); n != 1 {
		t.Errorf("batches rerun = %v, want 1", n)
	}
}

// TestRefusedKeptDecisionLeavesNoClaim: two kept decisions CONFIRM one attempt with the same
// provider reference, and the database refuses the first. Its claim is rolled back with it, so
// the second, applied, writes the provider_reference_claim (before, the refused decision's claim
// stayed in memory, the second took the reference as already its own, and no claim row was
// written: a later attempt confirming with that reference would not be escalated as a
// duplicate).
func TestRefusedKeptDecisionLeavesNoClaim(t *testing.T) {
	t.Parallel()
	h, _, send := decisionFixture(t)
	for i, id := range []string{"d1", "d2"} {
		send(h.Topics.Decisions, `"eventId":"`+id+`","eventType":"decision.recorded","decision":"CONFIRMED","providerReference":"HTL-R",`+
			`"actor":"ops.1","reason":"provider confirms"}`, 2+i)
	}
	poisonAudit(t, h, "d1")
	send(h.Topics.Attempts, unknownAfterRead, 4)
	if n := h.Scalar(`SELECT count(*) FROM pending_decision WHERE event_id = 'd1' AND failed_at IS NOT NULL`); n != 1 {
		t.Errorf("d1 marked failed = %d, want 1", n)
	}
	if n := h.Scalar(`SELECT count(*) FROM pending_decision WHERE event_id = 'd2' AND applied_at IS NOT NULL`); n != 1 {
		t.Errorf("d2 applied = %d, want 1", n)
	}
	if n := h.Scalar(`SELECT count(*) FROM booking_attempt WHERE status = 'CONFIRMED' AND provider_reference = 'HTL-R'`); n != 1 {
		t.Errorf("attempts CONFIRMED with HTL-R = %d, want 1", n)
	}
	if n := h.Scalar(`SELECT count(*) FROM provider_reference_claim WHERE reference = 'HTL-R'`); n != 1 {
		t.Errorf("claims of HTL-R = %d, want 1 (the applied decision's)", n)
	}
}
