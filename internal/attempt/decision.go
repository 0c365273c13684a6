package attempt

import (
	"context"

	"github.com/google/uuid"

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

// ApplyDecision applies one deduplicated manual decision (docs/design.md#cause-manual-decision)
// through OnDecision, as a one-decision batch (Bulk.ApplyDecision), and returns what happened:
// kept (waiting in pending_decision for the transaction that next makes the attempt UNKNOWN or
// terminal), rejected, unchanged or applied (see OnDecision).
func (t *Tx) ApplyDecision(ctx context.Context, d events.Decision) (string, error) {
	b, err := t.NewBulk(ctx, nil, []events.Decision{d}, nil)
	if err != nil {
		return "", err
	}
	b.single = true
	o, err := b.ApplyDecision(ctx, d)
	if err != nil {
		return "", err
	}
	return o, b.Flush(ctx)
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
