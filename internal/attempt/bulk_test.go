package attempt_test

import (
	"context"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bookrecon/bookrecon/events"
	"github.com/bookrecon/bookrecon/internal/attempt"
	"github.com/bookrecon/bookrecon/internal/harness/pgtest"
)

// TestBulkEqualsPerEvent: a batch of many steps (Bulk: applied in memory, flushed set-based)
// stores exactly what one-step batches (ApplyEvent, ApplyDecision, one transaction per event)
// store: the same attempts, audit trail, outbox records, escalations, anomalies, claims and kept
// decisions, in the same order per intent. (Before the one write path the one-step side was the
// per-event writer, Tx.run; the comparison is now batch-size invariance, as
// internal/ingest's TestBatchSizeInvariance on the realistic mix.)
func TestBulkEqualsPerEvent(t *testing.T) {
	if testing.Short() {
		t.Skip("needs PostgreSQL")
	}
	t.Parallel()
	ctx := context.Background()
	start := `,"request":{"offerVersion":"o","travellerRef":"tr","stay":{"propertyId":"h","checkIn":"2027-01-01","checkOut":"2027-01-02"},"amount":{"value":"1","currency":"EUR"}},"recovery":{"clientReference":"cr","correlationId":"c1"}`
	ok := `,"outcome":{"providerReference":"HTL-%s"}`
	unknown := `,"outcome":{"timeoutClass":"read_timeout"}`
	unknownRef := `,"outcome":{"timeoutClass":"read_timeout","providerReference":"HTL-ref"}`
	failed := `,"outcome":{"failureCode":"SOLD_OUT","retryable":true}`
	other := `,"request":{"offerVersion":"o2","travellerRef":"tr","stay":{"propertyId":"h","checkIn":"2027-01-01","checkOut":"2027-01-02"},"amount":{"value":"1","currency":"EUR"}}`
	noIdentity := `,"request":{"offerVersion":"o","travellerRef":"tr","stay":{"propertyId":"h","checkIn":"2027-01-01","checkOut":"2027-01-02"},"amount":{"value":"1","currency":"EUR"}}`
	// (failed_fact_at of a manual FAILED is its transaction's clock: only whether it is set.)
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
		// Manual decisions ("decision:" the verdict, extra the provider reference): applied in the
		// batch; kept (IN_PROGRESS, or no attempt yet) and applied by a later event of the batch
		// or of the next; equal to the state (unchanged), closing the anomaly escalations.
		"bi_dec":  {{{"attempt.started", start}, {"attempt.outcome_unknown", unknown}, {"decision:CONFIRMED", "M-1"}}},
		"bi_dec2": {{{"attempt.started", start}, {"decision:FAILED", ""}}, {{"attempt.outcome_unknown", unknown}}},
		"bi_dec3": {{{"decision:CONFIRMED", "M-3"}, {"attempt.started", start}, {"attempt.outcome_unknown", unknown}}},
		"bi_dec4": {{{"decision:FAILED", ""}}, {{"attempt.started", start}, {"attempt.started", other}, {"attempt.succeeded", ok}}},
		"bi_dec5": {{{"attempt.started", start}, {"attempt.started", other}, {"attempt.succeeded", ok}}, {{"decision:CONFIRMED", "HTL-bi_dec5-v1"}}},
		"bi_dec6": {{{"attempt.started", start}, {"attempt.failed", failed}, {"decision:CONFIRMED", "M-6"}}},
		// A repeated outcome_unknown that brings a provider reference records it.
		"bi_ref": {{{"attempt.started", start}, {"attempt.outcome_unknown", unknown}}, {{"attempt.outcome_unknown", unknownRef}}},
		// Two outcome escalations open (no_lookup_capability, and deadline_exceeded raised between
		// the batches) closed by one resolution, in the order of OutcomeReasons.
		"bi_multi": {{{"attempt.started", noIdentity}, {"attempt.outcome_unknown", unknown}}, {{"attempt.succeeded", ok}}},
	}
	intents := slices.Sorted(func(yield func(string) bool) {
		for k := range scripts {
			if !yield(k) {
				return
			}
		}
	})
	// A batch in order: each element an attempt event or a manual decision.
	type item struct {
		ev  *events.Attempt
		dec *events.Decision
	}
	batches := [][]item{}
	for b := 0; b < 2; b++ {
		var batch []item
		for _, intent := range intents {
			if b >= len(scripts[intent]) {
				continue
			}
			for i, e := range scripts[intent][b] {
				if verdict, ok := strings.CutPrefix(e.typ, "decision:"); ok {
					d := decision(t, fmt.Sprintf("%s-%d-%d", intent, b, i), intent, "book:"+intent+":v1", verdict, e.extra)
					batch = append(batch, item{dec: &d})
					continue
				}
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
				batch = append(batch, item{ev: &a})
			}
		}
		batches = append(batches, batch)
	}
	// Between the batches, as the escalator would: deadline_exceeded on bi_multi's attempt.
	between := func(at *attempt.Tx) error {
		a, err := at.ByKey(ctx, "t", "book:bi_multi:v1")
		if err != nil {
			return err
		}
		return at.Escalate(ctx, a, attempt.ReasonDeadlineExceeded, "")
	}
	run := func(bulk bool) *pgxpool.Pool {
		pool := pgtest.NewPool(t)
		for n, batch := range batches {
			if n > 0 {
				inTx(t, pool, between)
			}
			inTx(t, pool, func(at *attempt.Tx) error {
				if !bulk {
					for _, it := range batch {
						var err error
						if it.dec != nil {
							_, err = at.ApplyDecision(ctx, *it.dec)
						} else {
							_, err = at.ApplyEvent(ctx, *it.ev, nil)
						}
						if err != nil {
							return err
						}
					}
					return nil
				}
				var evs []events.Attempt
				var decs []events.Decision
				for _, it := range batch {
					if it.dec != nil {
						decs = append(decs, *it.dec)
					} else {
						evs = append(evs, *it.ev)
					}
				}
				b, err := at.NewBulk(ctx, evs, decs, nil)
				if err != nil {
					return err
				}
				for _, it := range batch {
					if it.dec != nil {
						if _, err := b.ApplyDecision(ctx, *it.dec); err != nil {
							return err
						}
						continue
					}
					d, err := it.ev.Digests()
					if err != nil {
						return err
					}
					if err := b.Apply(ctx, *it.ev, d); err != nil {
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
				unknown_since IS NULL, terminal_at IS NULL, next_check_at IS NULL, failed_fact_at IS NULL,
				CASE WHEN resolution_source IS DISTINCT FROM 'manual' THEN failed_fact_at END, gate_judged, blind_retry)
				FROM booking_attempt ORDER BY idempotency_key`,
			`SELECT concat_ws('|', a.idempotency_key, t.from_status, t.to_status, t.cause, t.event_id, t.note, t.actor, t.reason)
				FROM attempt_transition t JOIN booking_attempt a ON a.id = t.attempt_id ORDER BY a.idempotency_key, t.id`,
			`SELECT concat_ws('|', convert_from(record_key, 'UTF8'), topic, event_id) FROM outbox ORDER BY convert_from(record_key, 'UTF8'), id`,
			`SELECT concat_ws('|', a.idempotency_key, e.reason, e.state, e.closed_by, e.actor) FROM escalation e JOIN booking_attempt a ON a.id = e.attempt_id ORDER BY 1`,
			`SELECT concat_ws('|', idempotency_key, event_id, applied_at IS NULL, failed_at IS NULL) FROM pending_decision ORDER BY seq`,
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

// stmtNames is a pgx.QueryTracer that records, while on, the name (attempt.Statements) of every
// statement a connection runs, "insert outbox" for internal/outbox's insert (its facts
// statement; the rows follow as a COPY, which a QueryTracer does not see), or "other: <its
// text>".
type stmtNames struct {
	mu     sync.Mutex
	on     bool
	byText map[string]string
	got    map[string]int
}

func (s *stmtNames) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.on {
		name, ok := s.byText[d.SQL]
		if !ok && outboxInsert.MatchString(d.SQL) {
			name = "insert outbox" // internal/outbox's statement
		} else if !ok {
			name = "other: " + strings.Join(strings.Fields(d.SQL), " ")
		}
		s.got[name]++
	}
	return ctx
}

var outboxInsert = regexp.MustCompile(`(?i)\binsert into outbox(_fact)?\b`)

func (s *stmtNames) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TestBulkWritesEveryStepSetBased: a batch of the steps the batch writer once handed to the
// per-event path — a manual decision, a kept decision applied by the event that makes its attempt
// UNKNOWN, a resolution closing two outcome escalations, a reference recorded by a repeated
// outcome_unknown, an escalation asked for again on an attempt loaded with no other escalation —
// runs a fixed set of set-based statements, none per event.
func TestBulkWritesEveryStepSetBased(t *testing.T) {
	if testing.Short() {
		t.Skip("needs PostgreSQL")
	}
	t.Parallel()
	ctx := context.Background()
	pc, err := pgxpool.ParseConfig(pgtest.NewURL(t))
	if err != nil {
		t.Fatal(err)
	}
	tr := &stmtNames{byText: map[string]string{}, got: map[string]int{}}
	for _, n := range attempt.Statements.Names() {
		tr.byText[attempt.Statements.SQL(n)] = n
	}
	pc.ConnConfig.Tracer = tr
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	start := `,"request":{"offerVersion":"o","travellerRef":"tr","stay":{"propertyId":"h","checkIn":"2027-01-01","checkOut":"2027-01-02"},"amount":{"value":"1","currency":"EUR"}},"recovery":{"clientReference":"cr"}`
	noIdentity := `,"request":{"offerVersion":"o","travellerRef":"tr","stay":{"propertyId":"h","checkIn":"2027-01-01","checkOut":"2027-01-02"},"amount":{"value":"1","currency":"EUR"}}`
	unknown := `,"outcome":{"timeoutClass":"read_timeout"}`
	apply := func(at *attempt.Tx, evs []events.Attempt, decs []events.Decision) error {
		b, err := at.NewBulk(ctx, evs, decs, nil)
		if err != nil {
			return err
		}
		for _, e := range evs {
			if err := b.Apply(ctx, e, events.Digests{}); err != nil {
				return err
			}
		}
		for _, d := range decs {
			if _, err := b.ApplyDecision(ctx, d); err != nil {
				return err
			}
		}
		return b.Flush(ctx)
	}
	inTx(t, pool, func(at *attempt.Tx) error {
		return apply(at, []events.Attempt{
			event(t, "attempt.started", "m1", "bi_multi", "book:bi_multi:v1", "BOOK", noIdentity),
			event(t, "attempt.outcome_unknown", "m2", "bi_multi", "book:bi_multi:v1", "BOOK", unknown),
			event(t, "attempt.started", "k1", "bi_kept", "book:bi_kept:v1", "BOOK", start),
			event(t, "attempt.started", "r1", "bi_ref", "book:bi_ref:v1", "BOOK", start),
			event(t, "attempt.outcome_unknown", "r2", "bi_ref", "book:bi_ref:v1", "BOOK", unknown),
			event(t, "attempt.started", "d1", "bi_dec", "book:bi_dec:v1", "BOOK", start),
			event(t, "attempt.outcome_unknown", "d2", "bi_dec", "book:bi_dec:v1", "BOOK", unknown),
		}, []events.Decision{decision(t, "k-d", "bi_kept", "book:bi_kept:v1", "FAILED", "")})
	})
	inTx(t, pool, func(at *attempt.Tx) error {
		a, err := at.ByKey(ctx, "t", "book:bi_multi:v1")
		if err != nil {
			return err
		}
		return at.Escalate(ctx, a, attempt.ReasonDeadlineExceeded, "")
	})
	var eff attempt.Effects
	tr.mu.Lock()
	tr.on = true
	tr.mu.Unlock()
	inTx(t, pool, func(at *attempt.Tx) error {
		err := apply(at, []events.Attempt{
			event(t, "attempt.succeeded", "m3", "bi_multi", "book:bi_multi:v1", "BOOK", `,"outcome":{"providerReference":"HTL-m"}`),
			event(t, "attempt.outcome_unknown", "k2", "bi_kept", "book:bi_kept:v1", "BOOK", unknown),
			event(t, "attempt.outcome_unknown", "r3", "bi_ref", "book:bi_ref:v1", "BOOK", `,"outcome":{"timeoutClass":"read_timeout","providerReference":"HTL-r"}`),
			event(t, "attempt.outcome_unknown", "m4", "bi_multi", "book:bi_multi:v1", "BOOK", unknown),
		}, []events.Decision{decision(t, "d-d", "bi_dec", "book:bi_dec:v1", "CONFIRMED", "HTL-d")})
		eff = at.Effects
		return err
	})
	tr.mu.Lock()
	tr.on = false
	got := maps.Clone(tr.got)
	tr.mu.Unlock()
	want := map[string]int{"clock_now": 1, "booking_intent_lock_many": 1, "booking_attempt_of_intents_or_keys": 1,
		"escalation_states_of_attempts": 1, "pending_decision_of_keys": 1, "booking_attempt_update_many": 1,
		"booking_attempt_record_reference_many": 1, "escalation_close_many": 1, "pending_decision_mark_applied": 1,
		"provider_reference_claim_owners": 1, "provider_reference_claim_insert_many": 1, "insert outbox": 1,
		"other: begin isolation level read committed": 1, "other: commit": 1}
	if !maps.Equal(got, want) {
		t.Errorf("statements %v\nwant %v", got, want)
	}
	if eff.EscalationsClosed[attempt.ReasonDeadlineExceeded] != 1 || eff.EscalationsClosed[attempt.ReasonNoLookupCapability] != 1 ||
		eff.DecisionsApplied != 2 || eff.Resolutions[[2]string{"manual", "FAILED"}] != 1 || eff.Resolutions[[2]string{"manual", "CONFIRMED"}] != 1 ||
		eff.Resolutions[[2]string{"event", "CONFIRMED"}] != 1 || len(eff.Resolutions) != 3 {
		t.Errorf("effects closed %v, decisions applied %d, resolutions %v; want deadline_exceeded and no_lookup_capability 1 each, 2, manual FAILED, manual CONFIRMED, event CONFIRMED 1 each",
			eff.EscalationsClosed, eff.DecisionsApplied, eff.Resolutions)
	}
	var rows []string
	r, err := pool.Query(ctx, `SELECT concat_ws('|', a.idempotency_key, a.status, a.resolution_source, a.provider_reference,
		(SELECT string_agg(e.reason || ':' || e.state, ',' ORDER BY e.reason) FROM escalation e WHERE e.attempt_id = a.id),
		(SELECT string_agg(p.event_id || ':' || (p.applied_at IS NOT NULL), ',') FROM pending_decision p
			WHERE p.tenant_id = a.tenant_id AND p.idempotency_key = a.idempotency_key))
		FROM booking_attempt a ORDER BY a.idempotency_key`)
	if err != nil {
		t.Fatal(err)
	}
	for r.Next() {
		var s string
		if err := r.Scan(&s); err != nil {
			t.Fatal(err)
		}
		rows = append(rows, s)
	}
	r.Close()
	wantRows := []string{
		"book:bi_dec:v1|CONFIRMED|manual|HTL-d",
		"book:bi_kept:v1|FAILED|manual|k-d:true",
		"book:bi_multi:v1|CONFIRMED|event|HTL-m|deadline_exceeded:closed,no_lookup_capability:closed",
		"book:bi_ref:v1|UNKNOWN|HTL-r",
	}
	if !slices.Equal(rows, wantRows) {
		t.Errorf("attempts\n%q\nwant\n%q", rows, wantRows)
	}
}
