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

// ApplyDecision applies one deduplicated manual decision (docs/design.md#cause-manual-decision)
// through OnDecision and returns what happened: kept (waiting in pending_decision for the
// transaction that next makes the attempt UNKNOWN or terminal), rejected, unchanged or applied (see
// OnDecision).
func (t *Tx) ApplyDecision(ctx context.Context, d events.Decision) (string, error) {
	if err := t.LockIntent(ctx, d.TenantID, d.BookingIntentID); err != nil {
		return "", err
	}
	a, err := t.ByKey(ctx, d.TenantID, d.IdempotencyKey)
	if err != nil {
		return "", err
	}
	return t.decide(ctx, a, d, true)
}

// decide writes OnDecision's Step for a (nil: no attempt yet); keep says whether a decision
// that must wait is kept (a kept decision being applied is never kept again).
func (t *Tx) decide(ctx context.Context, a *Row, d events.Decision, keep bool) (string, error) {
	provider := ""
	if a != nil {
		provider = a.Provider
	}
	env, err := t.env(ctx, provider)
	if err != nil {
		return "", err
	}
	s := OnDecision(a, d, env)
	if s.Keep {
		if !keep {
			return DecisionKept, nil
		}
		b, err := json.Marshal(d)
		if err != nil {
			return "", err
		}
		if _, err := t.tx.Exec(ctx, q("pending_decision_insert"), d.TenantID, d.IdempotencyKey, d.EventID, b); err != nil {
			return "", fmt.Errorf("attempt: keep decision %s: %w", d.EventID, err)
		}
		t.DecisionsKept++
		return DecisionKept, nil
	}
	if _, err := t.run(ctx, s); err != nil {
		return "", err
	}
	if s.Decision == DecisionApplied {
		t.DecisionsApplied++
	}
	return s.Decision, nil
}

// ApplyPendingDecisions applies the manual decisions kept for a, in the transaction that made
// it UNKNOWN or terminal, after that transaction's own effects
// (docs/design.md#cause-manual-decision), each under a savepoint. One that fails for its own data
// (FailureClass) rolls back to its savepoint, is marked failed with its reason (never applied
// later: ops re-send it once the cause is fixed) and reported in DecisionsFailed; the transaction
// goes on and commits a's own transition. Any other error is returned: the whole transaction fails,
// to be retried.
func (t *Tx) ApplyPendingDecisions(ctx context.Context, a *Row) error {
	rows, err := t.tx.Query(ctx, q("pending_decision_of_attempt"), a.TenantID, a.IdempotencyKey)
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
		inner := &Tx{cfg: t.cfg, now: t.now, Effects: t.Effects.clone()}
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
		if _, err := t.tx.Exec(ctx, q("pending_decision_mark_failed"), a.TenantID, a.IdempotencyKey, k.eventID, FailureText(err)); err != nil {
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
	if _, err := t.decide(ctx, cur, d, false); err != nil {
		return err
	}
	if _, err := t.tx.Exec(ctx, q("pending_decision_mark_applied"), a.TenantID, a.IdempotencyKey, eventID); err != nil {
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
