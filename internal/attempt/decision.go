package attempt

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/bookrecon/bookrecon/events"
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
// it UNKNOWN or terminal, after that transaction's own effects (DESIGN.md "Contract v1").
func (t *Tx) ApplyPendingDecisions(ctx context.Context, a *Row) error {
	rows, err := t.tx.Query(ctx, `SELECT decision FROM pending_decision
		WHERE tenant_id = $1 AND idempotency_key = $2 AND applied_at IS NULL ORDER BY seq FOR UPDATE`,
		a.TenantID, a.IdempotencyKey)
	if err != nil {
		return fmt.Errorf("attempt: pending decisions: %w", err)
	}
	ds, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (events.Decision, error) {
		var b []byte
		var d events.Decision
		if err := r.Scan(&b); err != nil {
			return d, err
		}
		return d, json.Unmarshal(b, &d)
	})
	if err != nil {
		return fmt.Errorf("attempt: pending decisions: %w", err)
	}
	for _, d := range ds {
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
			d.TenantID, d.IdempotencyKey, d.EventID); err != nil {
			return err
		}
	}
	return nil
}
