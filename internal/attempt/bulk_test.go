package attempt_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bookrecon/bookrecon/events"
	"github.com/bookrecon/bookrecon/internal/attempt"
	"github.com/bookrecon/bookrecon/internal/harness/pgtest"
)

// TestBulkEqualsPerEvent: the batch write path (Bulk: buffered in memory and flushed set-based,
// or handed to the per-event path mid-batch) stores exactly what ApplyEvent stores event by
// event: the same attempts, audit trail and outbox records, in the same order per intent.
func TestBulkEqualsPerEvent(t *testing.T) {
	if testing.Short() {
		t.Skip("needs PostgreSQL")
	}
	t.Parallel()
	ctx := context.Background()
	start := `,"request":{"offerVersion":"o","travellerRef":"tr","stay":{"propertyId":"h","checkIn":"2027-01-01","checkOut":"2027-01-02"},"amount":{"value":"1","currency":"EUR"}},"recovery":{"clientReference":"cr","correlationId":"c1"}`
	ok := `,"outcome":{"providerReference":"HTL-%s"}`
	unknown := `,"outcome":{"timeoutClass":"read_timeout"}`
	failed := `,"outcome":{"failureCode":"SOLD_OUT","retryable":true}`
	other := `,"request":{"offerVersion":"o2","travellerRef":"tr","stay":{"propertyId":"h","checkIn":"2027-01-01","checkOut":"2027-01-02"},"amount":{"value":"1","currency":"EUR"}}`
	noIdentity := `,"request":{"offerVersion":"o","travellerRef":"tr","stay":{"propertyId":"h","checkIn":"2027-01-01","checkOut":"2027-01-02"},"amount":{"value":"1","currency":"EUR"}}`
	// A type ending in "/v2" is version 2's event (key book:<intent>:v2), a retry the safe
	// retry gate judges; "/v2early" one that occurred an hour before the batch.
	type ev struct{ typ, extra string }
	// Batches of events per intent (each intent's events keep their order).
	scripts := map[string][][]ev{
		"bi_pair":      {{{"attempt.started", start}, {"attempt.succeeded", ok}}},
		"bi_fail":      {{{"attempt.started", start}, {"attempt.failed", failed}}},
		"bi_unknown":   {{{"attempt.started", start}, {"attempt.outcome_unknown", unknown}}},
		"bi_late":      {{{"attempt.succeeded", ok}, {"attempt.started", start}}},
		"bi_late2":     {{{"attempt.succeeded", ok}}, {{"attempt.started", start}}},
		"bi_switch":    {{{"attempt.outcome_unknown", unknown}, {"attempt.started", start}, {"attempt.succeeded", ok}}},
		"bi_repeat":    {{{"attempt.started", start}, {"attempt.started", start}}},
		"bi_contra":    {{{"attempt.started", start}, {"attempt.succeeded", ok}, {"attempt.failed", failed}}, {{"attempt.failed", failed}}},
		"bi_nolookup":  {{{"attempt.started", noIdentity}, {"attempt.outcome_unknown", unknown}, {"attempt.succeeded", ok}}},
		"bi_nolookup2": {{{"attempt.started", noIdentity}, {"attempt.outcome_unknown", unknown}}, {{"attempt.failed", failed}}},
		"bi_settle":    {{{"attempt.started", start}, {"attempt.outcome_unknown", unknown}}, {{"attempt.succeeded", ok}}},
		"bi_conflict2": {{{"attempt.started", start}}, {{"attempt.started", other}, {"attempt.started", other}}},
		"bi_conflict":  {{{"attempt.started", start}, {"attempt.started", other}}},
		// An escalated attempt (key_conflict open) that settles, in the batch and in the next one.
		"bi_conflict3": {{{"attempt.started", start}, {"attempt.started", other}, {"attempt.succeeded", ok}}},
		"bi_conflict4": {{{"attempt.started", start}, {"attempt.started", other}}, {{"attempt.failed", failed}}},
		// Another reason (contradiction) on an attempt escalated in an earlier batch.
		"bi_conflict5": {{{"attempt.started", start}, {"attempt.started", other}, {"attempt.succeeded", ok}}, {{"attempt.failed", failed}}},
		// Retries: safe (v1 FAILED), blind (v1 UNKNOWN: blind_retry on v2, which then settles
		// escalated), a duplicate booking (v1 and v2 CONFIRMED), within a batch and across two.
		"bi_retry":  {{{"attempt.started", start}, {"attempt.failed", failed}, {"attempt.started/v2", start}, {"attempt.succeeded/v2", ok}}},
		"bi_retry2": {{{"attempt.started", start}, {"attempt.failed", failed}}, {{"attempt.started/v2", start}, {"attempt.succeeded/v2", ok}}},
		"bi_blind":  {{{"attempt.started", start}, {"attempt.outcome_unknown", unknown}, {"attempt.started/v2", start}, {"attempt.succeeded/v2", ok}}},
		"bi_blind2": {{{"attempt.started", start}, {"attempt.outcome_unknown", unknown}, {"attempt.started/v2", start}}, {{"attempt.failed", failed}, {"attempt.succeeded/v2", ok}}},
		"bi_blind3": {{{"attempt.started", start}, {"attempt.outcome_unknown", unknown}}, {{"attempt.started/v2", start}, {"attempt.failed/v2", failed}}},
		"bi_dup":    {{{"attempt.started", start}, {"attempt.succeeded", ok}, {"attempt.started/v2", start}, {"attempt.succeeded/v2", ok}}},
		"bi_dup2":   {{{"attempt.started", start}, {"attempt.succeeded", ok}}, {{"attempt.started/v2", start}, {"attempt.succeeded/v2", ok}}},
		// A late v2 start after its outcome: the gate judges v2 again when the start fills it
		// in; safe on its outcome, a blind retry on a start before v1 failed.
		"bi_late3": {{{"attempt.started", start}, {"attempt.failed", failed}, {"attempt.succeeded/v2", ok}}, {{"attempt.started/v2", start}}},
		"bi_late4": {{{"attempt.started", start}, {"attempt.failed", failed}, {"attempt.succeeded/v2", ok}}, {{"attempt.started/v2early", start}}},
	}
	intents := slices.Sorted(func(yield func(string) bool) {
		for k := range scripts {
			if !yield(k) {
				return
			}
		}
	})
	batches := [][]events.Attempt{}
	for b := 0; b < 2; b++ {
		var batch []events.Attempt
		for _, intent := range intents {
			if b >= len(scripts[intent]) {
				continue
			}
			for i, e := range scripts[intent][b] {
				extra, version := e.extra, 1
				typ, early := strings.CutSuffix(e.typ, "/v2early")
				typ, v2 := strings.CutSuffix(typ, "/v2")
				if v2 || early {
					version = 2
				}
				if typ == "attempt.succeeded" {
					extra = fmt.Sprintf(ok, fmt.Sprintf("%s-v%d", intent, version))
				}
				a := event(t, typ, fmt.Sprintf("%s-%d-%d", intent, b, i), intent, "book:"+intent+":v1", "BOOK", extra)
				a.OperationVersion, a.IdempotencyKey = version, fmt.Sprintf("book:%s:v%d", intent, version)
				if early {
					a.OccurredAt = a.OccurredAt.Add(-time.Hour)
				}
				batch = append(batch, a)
			}
		}
		batches = append(batches, batch)
	}
	run := func(bulk bool) *pgxpool.Pool {
		pool := pgtest.NewPool(t)
		for _, batch := range batches {
			inTx(t, pool, func(at *attempt.Tx) error {
				if !bulk {
					for _, e := range batch {
						if _, err := at.ApplyEvent(ctx, e, nil); err != nil {
							return err
						}
					}
					return nil
				}
				b, err := at.NewBulk(ctx, batch, nil, nil)
				if err != nil {
					return err
				}
				for _, e := range batch {
					d, err := e.Digests()
					if err != nil {
						return err
					}
					if err := b.Apply(ctx, e, d); err != nil {
						return err
					}
				}
				return b.Flush(ctx)
			})
		}
		return pool
	}
	dump := func(pool *pgxpool.Pool) []string {
		var out []string
		for _, q := range []string{
			`SELECT concat_ws('|', idempotency_key, status, resolution_source, request::text, request_hash, fingerprint, client_reference,
				correlation_id, provider_reference, failure_code, retryable, timeout_class, request_sent, started_at, first_event_at,
				unknown_since IS NULL, terminal_at IS NULL, next_check_at IS NULL, failed_fact_at, gate_judged, blind_retry)
				FROM booking_attempt ORDER BY idempotency_key`,
			`SELECT concat_ws('|', a.idempotency_key, t.from_status, t.to_status, t.cause, t.event_id, t.note)
				FROM attempt_transition t JOIN booking_attempt a ON a.id = t.attempt_id ORDER BY a.idempotency_key, t.id`,
			`SELECT concat_ws('|', convert_from(record_key, 'UTF8'), topic, event_id) FROM outbox ORDER BY convert_from(record_key, 'UTF8'), id`,
			`SELECT concat_ws('|', a.idempotency_key, e.reason, e.state) FROM escalation e JOIN booking_attempt a ON a.id = e.attempt_id ORDER BY 1`,
			`SELECT concat_ws('|', a.idempotency_key, n.kind, n.event_id) FROM anomaly n JOIN booking_attempt a ON a.id = n.attempt_id ORDER BY n.id`,
			`SELECT concat_ws('|', c.provider, c.operation, c.reference, a.idempotency_key) FROM provider_reference_claim c JOIN booking_attempt a ON a.id = c.attempt_id ORDER BY 1`,
		} {
			rows, err := pool.Query(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			for rows.Next() {
				var s string
				if err := rows.Scan(&s); err != nil {
					t.Fatal(err)
				}
				out = append(out, s)
			}
			rows.Close()
			out = append(out, "--")
		}
		return out
	}
	perEvent, bulk := dump(run(false)), dump(run(true))
	if len(perEvent) < 40 {
		t.Fatalf("only %d rows dumped: %v", len(perEvent), perEvent)
	}
	for i := range max(len(perEvent), len(bulk)) {
		var p, b string
		if i < len(perEvent) {
			p = perEvent[i]
		}
		if i < len(bulk) {
			b = bulk[i]
		}
		if p != b {
			t.Errorf("row %d\nper-event %s\n     bulk %s", i, p, b)
		}
	}
}

// TestBulkClaimConflictEvent: a provider reference claim the bulk path loses to another
// attempt records its duplicate_provider_reference anomaly with the event that brought the
// reference, as the per-event path does (Step.ClaimEventID).
func TestBulkClaimConflictEvent(t *testing.T) {
	if testing.Short() {
		t.Skip("needs PostgreSQL")
	}
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	shared := `,"outcome":{"providerReference":"HTL-shared"}`
	batch := []events.Attempt{
		event(t, "attempt.succeeded", "e1", "bi_r1", "book:bi_r1:v1", "BOOK", shared),
		event(t, "attempt.succeeded", "e2", "bi_r2", "book:bi_r2:v1", "BOOK", shared),
	}
	inTx(t, pool, func(at *attempt.Tx) error {
		b, err := at.NewBulk(ctx, batch, nil, nil)
		if err != nil {
			return err
		}
		for _, e := range batch {
			if err := b.Apply(ctx, e, events.Digests{}); err != nil {
				return err
			}
		}
		return b.Flush(ctx)
	})
	var got []string
	rows, err := pool.Query(ctx, `SELECT concat_ws('|', a.idempotency_key, n.kind, coalesce(n.event_id, 'NULL'))
		FROM anomaly n JOIN booking_attempt a ON a.id = n.attempt_id ORDER BY n.id`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		got = append(got, s)
	}
	rows.Close()
	want := []string{"book:bi_r2:v1|duplicate_provider_reference|e2"}
	if !slices.Equal(got, want) {
		t.Fatalf("anomalies %q, want %q", got, want)
	}
}
