package attempt_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bookrecon/bookrecon/events"
	"github.com/bookrecon/bookrecon/internal/attempt"
	"github.com/bookrecon/bookrecon/internal/harness/pgtest"
	"github.com/bookrecon/bookrecon/internal/postgres"
	"github.com/bookrecon/bookrecon/internal/query"
)

var cfg = &attempt.Config{Policies: map[string]attempt.Policy{"sim-hotels": {Lookups: []string{"client_reference"}, MaxVersions: 3}}}

func event(t *testing.T, typ, id, intent, key, op, extra string) events.Attempt {
	t.Helper()
	raw := fmt.Sprintf(`{"specVersion":1,"eventId":%q,"eventType":%q,"occurredAt":%q,"tenantId":"t","bookingIntentId":%q,
		"operation":%q,"operationVersion":1,"idempotencyKey":%q,"provider":"sim-hotels"%s}`,
		id, typ, time.Now().UTC().Format(time.RFC3339Nano), intent, op, key, extra)
	ev, err := events.DecodeAttempt([]byte(raw), events.DecodeOptions{})
	if err != nil {
		t.Fatalf("%s: %v", id, err)
	}
	return ev
}

func decision(t *testing.T, id, intent, key, verdict, ref string) events.Decision {
	t.Helper()
	raw := fmt.Sprintf(`{"specVersion":1,"eventId":%q,"eventType":"decision.recorded","occurredAt":%q,"tenantId":"t",
		"bookingIntentId":%q,"idempotencyKey":%q,"decision":%q,"providerReference":%q,"actor":"ops.1","reason":"checked"}`,
		id, time.Now().UTC().Format(time.RFC3339Nano), intent, key, verdict, ref)
	d, err := events.DecodeDecision([]byte(raw), events.DecodeOptions{})
	if err != nil {
		t.Fatalf("%s: %v", id, err)
	}
	return d
}

func inTx(t *testing.T, pool *pgxpool.Pool, fn func(at *attempt.Tx) error) {
	t.Helper()
	if err := postgres.WithTx(context.Background(), pool, func(tx pgx.Tx) error { return fn(attempt.NewTx(tx, cfg)) }); err != nil {
		t.Fatal(err)
	}
}

const cancelStart = `,"request":{"offerVersion":"o","travellerRef":"tr","amount":{"value":"0","currency":"EUR"}},"recovery":{"clientReference":"cr"}`

// TestDecisionForAnotherIntentIsRejected: a decision naming intent B for an attempt of intent A
// (possible for cancel keys, whose subject is not the intent) is audited and recorded, never
// applied.
func TestDecisionForAnotherIntentIsRejected(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	inTx(t, pool, func(at *attempt.Tx) error {
		_, err := at.ApplyEvent(ctx, event(t, "attempt.started", "e1", "bi_a", "cancel:bk_1:v1", "CANCEL", cancelStart), nil)
		return err
	})
	inTx(t, pool, func(at *attempt.Tx) error {
		_, err := at.ApplyEvent(ctx, event(t, "attempt.outcome_unknown", "e2", "bi_a", "cancel:bk_1:v1", "CANCEL", `,"outcome":{"timeoutClass":"read_timeout"}`), nil)
		return err
	})
	var outcome string
	inTx(t, pool, func(at *attempt.Tx) error {
		var err error
		outcome, err = at.ApplyDecision(ctx, decision(t, "d1", "bi_b", "cancel:bk_1:v1", "CONFIRMED", "X-1"))
		return err
	})
	var status string
	var anomalies int
	if err := pool.QueryRow(ctx, `SELECT status, (SELECT count(*) FROM anomaly WHERE kind = 'decision_intent_mismatch') FROM booking_attempt`).Scan(&status, &anomalies); err != nil {
		t.Fatal(err)
	}
	if outcome != attempt.DecisionRejected || status != "UNKNOWN" || anomalies != 1 {
		t.Fatalf("outcome %s, status %s, anomalies %d; want rejected, UNKNOWN, 1", outcome, status, anomalies)
	}
}

// TestKeptDecisionsApplyInArrivalOrder: two decisions kept in one transaction (FAILED, then its
// correction CONFIRMED, with event ids that sort the other way) apply in arrival order when the
// attempt turns UNKNOWN: it ends CONFIRMED.
func TestKeptDecisionsApplyInArrivalOrder(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	start := `,"request":{"offerVersion":"o","travellerRef":"tr","stay":{"propertyId":"h","checkIn":"2027-01-01","checkOut":"2027-01-02"},"amount":{"value":"1","currency":"EUR"}},"recovery":{"clientReference":"cr"}`
	inTx(t, pool, func(at *attempt.Tx) error {
		_, err := at.ApplyEvent(ctx, event(t, "attempt.started", "e1", "bi_1", "book:bi_1:v1", "BOOK", start), nil)
		return err
	})
	inTx(t, pool, func(at *attempt.Tx) error {
		for _, d := range []events.Decision{
			decision(t, "z-first", "bi_1", "book:bi_1:v1", "FAILED", ""),
			decision(t, "a-second", "bi_1", "book:bi_1:v1", "CONFIRMED", "HTL-1"),
		} {
			if o, err := at.ApplyDecision(ctx, d); err != nil || o != attempt.DecisionKept {
				return fmt.Errorf("decision %s: %s, %w; want kept", d.EventID, o, err)
			}
		}
		return nil
	})
	inTx(t, pool, func(at *attempt.Tx) error {
		_, err := at.ApplyEvent(ctx, event(t, "attempt.outcome_unknown", "e2", "bi_1", "book:bi_1:v1", "BOOK", `,"outcome":{"timeoutClass":"read_timeout"}`), nil)
		return err
	})
	var status, source, ref string
	var resolutions int
	if err := pool.QueryRow(ctx, `SELECT status, resolution_source, provider_reference,
		(SELECT count(*) FROM outbox WHERE convert_from(value, 'UTF8')::jsonb->>'eventType' = 'attempt.resolved') FROM booking_attempt`).Scan(&status, &source, &ref, &resolutions); err != nil {
		t.Fatal(err)
	}
	if status != "CONFIRMED" || source != "manual" || ref != "HTL-1" || resolutions != 2 {
		t.Fatalf("attempt %s/%s/%s with %d resolutions; want CONFIRMED/manual/HTL-1 with 2 (FAILED, then the correction)", status, source, ref, resolutions)
	}
}

// poisonDecision makes the audit row of decision eventID fail with SQLSTATE code (23514: the
// decision's own data refused; 53300: the database's resources, an outage).
func poisonDecision(t *testing.T, pool *pgxpool.Pool, eventID, code string) {
	t.Helper()
	ctx := context.Background()
	if _, err := pool.Exec(ctx, fmt.Sprintf(`CREATE FUNCTION poison() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION 'poisoned decision' USING ERRCODE = '%s'; END $$`, code)); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, fmt.Sprintf(`CREATE TRIGGER poison BEFORE INSERT ON attempt_transition FOR EACH ROW
		WHEN (NEW.event_id = '%s') EXECUTE FUNCTION poison()`, eventID)); err != nil {
		t.Fatal(err)
	}
}

// keepTwo starts bi_1 (IN_PROGRESS) and keeps two decisions for it: FAILED (d-bad), then
// CONFIRMED HTL-1 (d-good).
func keepTwo(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	ctx := context.Background()
	start := `,"request":{"offerVersion":"o","travellerRef":"tr","stay":{"propertyId":"h","checkIn":"2027-01-01","checkOut":"2027-01-02"},"amount":{"value":"1","currency":"EUR"}},"recovery":{"clientReference":"cr"}`
	inTx(t, pool, func(at *attempt.Tx) error {
		_, err := at.ApplyEvent(ctx, event(t, "attempt.started", "e1", "bi_1", "book:bi_1:v1", "BOOK", start), nil)
		return err
	})
	inTx(t, pool, func(at *attempt.Tx) error {
		for _, d := range []events.Decision{
			decision(t, "d-bad", "bi_1", "book:bi_1:v1", "FAILED", ""),
			decision(t, "d-good", "bi_1", "book:bi_1:v1", "CONFIRMED", "HTL-1"),
		} {
			if o, err := at.ApplyDecision(ctx, d); err != nil || o != attempt.DecisionKept {
				return fmt.Errorf("decision %s: %s, %w; want kept", d.EventID, o, err)
			}
		}
		return nil
	})
}

const unknownOutcome = `,"outcome":{"timeoutClass":"read_timeout"}`

// TestKeptDecisionThatFailsIsMarkedFailed: of two decisions kept for an attempt, the first
// fails to apply (its audit row refused, 23514) in the transaction that turns the attempt
// UNKNOWN. That transaction rolls the decision back to its savepoint and commits: the attempt's
// own transition, the second decision (CONFIRMED by manual, one resolution), and the first
// marked failed with its reason, reported in Effects and listed by query.History; its effects
// are not counted. A later settlement does not apply it.
func TestKeptDecisionThatFailsIsMarkedFailed(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	keepTwo(t, pool)
	poisonDecision(t, pool, "d-bad", "23514")
	var eff attempt.Effects
	inTx(t, pool, func(at *attempt.Tx) error {
		_, err := at.ApplyEvent(ctx, event(t, "attempt.outcome_unknown", "e2", "bi_1", "book:bi_1:v1", "BOOK", unknownOutcome), nil)
		eff = at.Effects
		return err
	})
	var status, source, ref string
	var transitions, resolutions int
	if err := pool.QueryRow(ctx, `SELECT status, coalesce(resolution_source, ''), coalesce(provider_reference, ''),
		(SELECT count(*) FROM attempt_transition), (SELECT count(*) FROM outbox WHERE topic = $1) FROM booking_attempt`, events.TopicResolutions).
		Scan(&status, &source, &ref, &transitions, &resolutions); err != nil {
		t.Fatal(err)
	}
	if status != "CONFIRMED" || source != "manual" || ref != "HTL-1" || transitions != 3 || resolutions != 1 {
		t.Fatalf("attempt %s/%s/%s, %d transitions, %d resolutions; want CONFIRMED/manual/HTL-1, 3 (start, UNKNOWN, the good decision), 1",
			status, source, ref, transitions, resolutions)
	}
	type kept struct {
		EventID, Reason string
		Applied, Failed bool
	}
	readKept := func() []kept {
		rows, err := pool.Query(ctx, `SELECT event_id, coalesce(failure_reason, ''), applied_at IS NOT NULL, failed_at IS NOT NULL
			FROM pending_decision ORDER BY seq`)
		if err != nil {
			t.Fatal(err)
		}
		ks, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (kept, error) {
			var k kept
			return k, r.Scan(&k.EventID, &k.Reason, &k.Applied, &k.Failed)
		})
		if err != nil {
			t.Fatal(err)
		}
		return ks
	}
	ks := readKept()
	if len(ks) != 2 || ks[0].EventID != "d-bad" || !ks[0].Failed || ks[0].Applied || !strings.Contains(ks[0].Reason, "poisoned decision (SQLSTATE 23514)") ||
		ks[1].EventID != "d-good" || ks[1].Failed || !ks[1].Applied || ks[1].Reason != "" {
		t.Fatalf("kept decisions %+v; want d-bad failed with the trigger's reason, d-good applied", ks)
	}
	if len(eff.DecisionsFailed) != 1 || eff.DecisionsFailed[0].EventID != "d-bad" || eff.DecisionsFailed[0].TenantID != "t" ||
		eff.DecisionsFailed[0].IdempotencyKey != "book:bi_1:v1" || eff.DecisionsFailed[0].Class != "integrity_constraint_violation" {
		t.Fatalf("Effects.DecisionsFailed = %+v; want d-bad, integrity_constraint_violation", eff.DecisionsFailed)
	}
	if eff.DecisionsApplied != 1 || len(eff.Resolutions) != 1 || eff.Resolutions[[2]string{"manual", "CONFIRMED"}] != 1 {
		t.Fatalf("effects applied %d, resolutions %v; want 1, manual/CONFIRMED 1 (the failed decision's rolled back)", eff.DecisionsApplied, eff.Resolutions)
	}
	h, err := query.History(ctx, pool, "t", "book:bi_1:v1")
	if err != nil {
		t.Fatal(err)
	}
	if len(h.FailedDecisions) != 1 || h.FailedDecisions[0].EventID != "d-bad" || h.FailedDecisions[0].Decision != "FAILED" ||
		h.FailedDecisions[0].Actor != "ops.1" || !strings.Contains(h.FailedDecisions[0].FailureReason, "poisoned decision") {
		t.Fatalf("History.FailedDecisions = %+v; want d-bad", h.FailedDecisions)
	}
}

// TestKeptDecisionOutageFailsTheTransaction: a kept decision whose application meets an outage
// (53300, the database's resources) is not marked failed: the whole transaction fails, and the
// attempt and its decisions stay as they were, to be retried.
func TestKeptDecisionOutageFailsTheTransaction(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	keepTwo(t, pool)
	poisonDecision(t, pool, "d-bad", "53300")
	err := postgres.WithTx(ctx, pool, func(tx pgx.Tx) error {
		_, err := attempt.NewTx(tx, cfg).ApplyEvent(ctx, event(t, "attempt.outcome_unknown", "e2", "bi_1", "book:bi_1:v1", "BOOK", unknownOutcome), nil)
		return err
	})
	if postgres.SQLState(err) != "53300" {
		t.Fatalf("ApplyEvent = %v, want the 53300", err)
	}
	var status string
	var failed, applied int
	if err := pool.QueryRow(ctx, `SELECT status, (SELECT count(*) FROM pending_decision WHERE failed_at IS NOT NULL),
		(SELECT count(*) FROM pending_decision WHERE applied_at IS NOT NULL) FROM booking_attempt`).Scan(&status, &failed, &applied); err != nil {
		t.Fatal(err)
	}
	if status != "IN_PROGRESS" || failed != 0 || applied != 0 {
		t.Fatalf("after the outage: %s, %d failed, %d applied; want IN_PROGRESS, 0, 0", status, failed, applied)
	}
}
