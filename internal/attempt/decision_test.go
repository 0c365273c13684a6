package attempt_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bookrecon/bookrecon/events"
	"github.com/bookrecon/bookrecon/internal/attempt"
	"github.com/bookrecon/bookrecon/internal/pgtest"
	"github.com/bookrecon/bookrecon/internal/postgres"
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
				return fmt.Errorf("decision %s: %s, %v; want kept", d.EventID, o, err)
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
