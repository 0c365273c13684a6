package attempt

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/bookrecon/bookrecon/events"
	"github.com/bookrecon/bookrecon/internal/postgres"
)

// AnomalyReasons are the escalations that close when ops record a decision on the attempt.
var AnomalyReasons = []Reason{ReasonKeyConflict, ReasonBlindRetry, ReasonDuplicateBooking,
	ReasonDuplicateProviderReference, ReasonContradiction}

// Decision outcomes, for bookrecon_manual_decisions_total.
const (
	DecisionApplied   = "applied"
	DecisionKept      = "kept"
	DecisionUnchanged = "unchanged"
	// DecisionRejected: the decision names another intent than the attempt's; it is audited and
	// recorded as an anomaly, never applied (a mistyped key must not settle someone else's attempt).
	DecisionRejected = "rejected"
)

// rejectDecision audits a decision that names another intent than attempt a's.
func (t *Tx) rejectDecision(ctx context.Context, a *Row, d events.Decision) error {
	if err := t.audit(ctx, a.ID, Audit{From: a.Status, To: a.Status, Cause: "manual", EventID: d.EventID, Actor: d.Actor,
		Reason: d.Reason, Note: "decision rejected: it names another bookingIntentId than the attempt's"}); err != nil {
		return err
	}
	return t.Anomaly(ctx, a.TenantID, &a.ID, "decision_intent_mismatch", d.EventID, map[string]any{"decisionIntent": d.BookingIntentID})
}

// ApplyDecision applies one deduplicated manual decision (DESIGN.md "Contract v1", manual
// decisions) and returns what happened:
//   - kept: the attempt does not exist yet or is IN_PROGRESS; the decision waits in
//     pending_decision for the transaction that next makes it UNKNOWN or terminal;
//   - unchanged: it equals the current state; the attempt's open anomaly escalations close
//     (only the decision's escalationId, when given);
//   - applied: UNKNOWN → the decision, or a terminal state changed (audited; it publishes a
//     further resolution with source manual).
func (t *Tx) ApplyDecision(ctx context.Context, d events.Decision) (string, error) {
	if err := t.LockIntent(ctx, d.TenantID, d.BookingIntentID); err != nil {
		return "", err
	}
	a, err := t.ByKey(ctx, d.TenantID, d.IdempotencyKey)
	if err != nil {
		return "", err
	}
	if a != nil && a.BookingIntentID != d.BookingIntentID {
		return DecisionRejected, t.rejectDecision(ctx, a, d)
	}
	if a == nil || a.Status == StatusInProgress {
		b, err := json.Marshal(d)
		if err != nil {
			return "", err
		}
		_, err = t.tx.Exec(ctx, `INSERT INTO pending_decision (tenant_id, idempotency_key, event_id, decision)
			VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING`, d.TenantID, d.IdempotencyKey, d.EventID, b)
		if err != nil {
			return "", fmt.Errorf("attempt: keep decision %s: %w", d.EventID, err)
		}
		t.DecisionsKept++
		return DecisionKept, nil
	}
	return t.decide(ctx, a, d)
}

func (t *Tx) decide(ctx context.Context, a *Row, d events.Decision) (string, error) {
	status := Status(d.Decision)
	same := a.Status == status && (status != StatusConfirmed || d.ProviderReference == "" || d.ProviderReference == a.ProviderReference)
	if same {
		if err := t.audit(ctx, a.ID, Audit{From: a.Status, To: a.Status, Cause: "manual", EventID: d.EventID,
			Actor: d.Actor, Reason: d.Reason, Note: "decision equals the current state"}); err != nil {
			return "", err
		}
		return DecisionUnchanged, t.CloseEscalations(ctx, a, AnomalyReasons, "manual", d.Actor, d.EscalationID)
	}
	note := "manual decision"
	if a.Status.Terminal() {
		note = "manual decision changes a terminal state"
	}
	a, err := t.Settle(ctx, a, Settlement{Status: status, Source: SourceManual, Reference: d.ProviderReference,
		FailureCode: "MANUAL", Retryable: d.Retryable, CauseID: d.EventID, Cause: "manual",
		Actor: d.Actor, Reason: d.Reason, Note: note})
	if err != nil {
		return "", err
	}
	t.DecisionsApplied++
	return DecisionApplied, t.CloseEscalations(ctx, a, AnomalyReasons, "manual", d.Actor, d.EscalationID)
}

// ApplyPendingDecisions applies the manual decisions kept for a, in the transaction that made
// it UNKNOWN or terminal, after that transaction's own effects (DESIGN.md "Contract v1"), each
// under a savepoint. One that fails for its own data (FailureClass) rolls back to its savepoint,
// is marked failed with its reason (never applied later: ops re-send it once the cause is
// fixed) and reported in DecisionsFailed; the transaction goes on and commits a's own
// transition. Any other error is returned: the whole transaction fails, to be retried.
func (t *Tx) ApplyPendingDecisions(ctx context.Context, a *Row) error {
	rows, err := t.tx.Query(ctx, `SELECT event_id, decision FROM pending_decision
		WHERE tenant_id = $1 AND idempotency_key = $2 AND applied_at IS NULL AND failed_at IS NULL ORDER BY seq FOR UPDATE`,
		a.TenantID, a.IdempotencyKey)
	if err != nil {
		return fmt.Errorf("attempt: pending decisions: %w", err)
	}
	type kept struct {
		eventID string
		raw     []byte
	}
	ks, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (kept, error) {
		var k kept
		return k, r.Scan(&k.eventID, &k.raw)
	})
	if err != nil {
		return fmt.Errorf("attempt: pending decisions: %w", err)
	}
	for _, k := range ks {
		inner := &Tx{cfg: t.cfg, Effects: t.Effects.clone()}
		err := postgres.Savepoint(ctx, t.tx, func(sp pgx.Tx) error {
			inner.tx = sp
			return inner.applyKept(ctx, a, k.eventID, k.raw)
		})
		if err == nil {
			t.Effects = inner.Effects
			continue
		}
		class := FailureClass(err)
		if class == "" || ctx.Err() != nil {
			return err
		}
		if _, err := t.tx.Exec(ctx, `UPDATE pending_decision SET failed_at = now(), failure_reason = $4
			WHERE tenant_id = $1 AND idempotency_key = $2 AND event_id = $3`, a.TenantID, a.IdempotencyKey, k.eventID, FailureText(err)); err != nil {
			return fmt.Errorf("attempt: mark decision %s failed: %w", k.eventID, err)
		}
		t.DecisionsFailed = append(t.DecisionsFailed, FailedDecision{AttemptID: a.ID, TenantID: a.TenantID,
			IdempotencyKey: a.IdempotencyKey, EventID: k.eventID, Class: class, Err: err})
	}
	return nil
}

// applyKept applies one kept decision (raw, as stored) to a's current state and marks it applied.
func (t *Tx) applyKept(ctx context.Context, a *Row, eventID string, raw []byte) error {
	var d events.Decision
	if err := json.Unmarshal(raw, &d); err != nil {
		return fmt.Errorf("attempt: kept decision %s: %w: %w", eventID, ErrInvalidData, err)
	}
	cur, err := t.ByID(ctx, a.ID)
	if err != nil {
		return err
	}
	if cur.BookingIntentID != d.BookingIntentID {
		err = t.rejectDecision(ctx, cur, d)
	} else {
		_, err = t.decide(ctx, cur, d)
	}
	if err != nil {
		return err
	}
	if _, err := t.tx.Exec(ctx, `UPDATE pending_decision SET applied_at = now() WHERE tenant_id = $1 AND idempotency_key = $2 AND event_id = $3`,
		a.TenantID, a.IdempotencyKey, eventID); err != nil {
		return fmt.Errorf("attempt: mark decision %s applied: %w", eventID, err)
	}
	return nil
}

// FailedDecision is a kept manual decision that failed to apply for its own data and was marked
// failed (pending_decision.failed_at) by the transaction that settled its attempt.
type FailedDecision struct {
	AttemptID                         uuid.UUID
	TenantID, IdempotencyKey, EventID string
	Class                             string // FailureClass, a metric label
	Err                               error
}

// LogArgs are the slog key-value pairs that name the decision and its failure (no personal
// data), for the error-level line its service logs after the commit.
func (d FailedDecision) LogArgs() []any {
	return []any{"attempt_id", d.AttemptID, "tenant_id", d.TenantID, "idempotency_key", d.IdempotencyKey,
		"decision_event_id", d.EventID, "error_class", d.Class, "err", d.Err}
}
