package attempt

import (
	"context"
	"fmt"
)

// Settlement is a terminal verdict reached outside an attempt event: a provider lookup or a
// manual decision.
type Settlement struct {
	Status      Status // CONFIRMED or FAILED
	Source      Source
	Reference   string // provider reference ("" keeps the known one)
	FailureCode string // REJECTED, CANCELLED, NOT_FOUND, MANUAL ...
	Retryable   bool   // for FAILED
	CauseID     string // lookup id or decision event id: the resolution's deterministic cause
	Cause       string // lookup or manual
	Lookup      any    // the lookup, for the audit trail
	Actor       string
	Reason      string
	Note        string
}

// Settle moves a (read FOR UPDATE under its intent lock) to a terminal state and runs every rule
// that follows: audit row, resolution, closing outcome escalations, provider reference claim,
// duplicate booking, the gate of later versions, kept manual decisions. The caller has checked
// that the verdict applies (fencing, current status).
func (t *Tx) Settle(ctx context.Context, a *Row, s Settlement) (*Row, error) {
	from := a.Status
	_, err := t.tx.Exec(ctx, `UPDATE booking_attempt SET status = $2, resolution_source = $3,
		provider_reference = coalesce(nullif($4, ''), provider_reference),
		failure_code = CASE WHEN $2 = 'FAILED' THEN coalesce(nullif($5, ''), failure_code) END,
		retryable = CASE WHEN $2 = 'FAILED' THEN $6::boolean END,
		failed_fact_at = CASE WHEN $2 = 'FAILED' THEN now() END,
		terminal_at = now(), next_check_at = NULL, lease_owner = NULL, lease_expires_at = NULL, updated_at = now()
		WHERE id = $1`, a.ID, string(s.Status), string(s.Source), s.Reference, s.FailureCode, s.Retryable)
	if err != nil {
		return nil, fmt.Errorf("attempt: settle %s: %w", a.IdempotencyKey, err)
	}
	if a, err = t.ByID(ctx, a.ID); err != nil {
		return nil, err
	}
	if err := t.audit(ctx, a.ID, Audit{From: from, To: a.Status, Cause: s.Cause, EventID: causeEvent(s), Lookup: s.Lookup,
		Actor: s.Actor, Reason: s.Reason, Note: s.Note}); err != nil {
		return nil, err
	}
	if a.ProviderReference != "" {
		if err := t.ClaimReference(ctx, a, ""); err != nil {
			return nil, err
		}
	}
	closedBy := "lookup"
	if s.Source == SourceManual {
		closedBy = "manual"
	}
	if err := t.Resolved(ctx, a, s.CauseID, closedBy, s.Actor); err != nil {
		return nil, err
	}
	if err := t.CheckDuplicateBooking(ctx, a); err != nil {
		return nil, err
	}
	if err := t.JudgeGate(ctx, a, false); err != nil {
		return nil, err
	}
	if from != StatusInProgress && !from.Terminal() && s.Source != SourceManual {
		return a, t.ApplyPendingDecisions(ctx, a)
	}
	return a, nil
}

func causeEvent(s Settlement) string {
	if s.Cause == "manual" {
		return s.CauseID
	}
	return ""
}

// MarkStale turns an IN_PROGRESS attempt that outlived inProgressTimeout UNKNOWN with cause
// stale_in_progress and timeout class `stale` (DESIGN.md "Attempt states"), audited, then
// escalates no_lookup_capability when no lookup can apply and applies kept decisions.
func (t *Tx) MarkStale(ctx context.Context, a *Row) (*Row, error) {
	_, err := t.tx.Exec(ctx, `UPDATE booking_attempt SET status = 'UNKNOWN', timeout_class = 'stale',
		unknown_since = now(), window_start = greatest(window_start, now()), next_check_at = now() + $2::interval, updated_at = now()
		WHERE id = $1 AND status = 'IN_PROGRESS'`, a.ID, t.firstCheck())
	if err != nil {
		return nil, fmt.Errorf("attempt: mark stale %s: %w", a.IdempotencyKey, err)
	}
	if a, err = t.ByID(ctx, a.ID); err != nil {
		return nil, err
	}
	t.UnknownByClass["stale"]++
	if err := t.audit(ctx, a.ID, Audit{From: StatusInProgress, To: StatusUnknown, Cause: "timeout", Note: "stale_in_progress"}); err != nil {
		return nil, err
	}
	if t.NeedsNoLookupEscalation(a) {
		if err := t.Escalate(ctx, a, ReasonNoLookupCapability, ""); err != nil {
			return nil, err
		}
	}
	if err := t.JudgeGate(ctx, a, a.Version > 1 && !a.GateJudged); err != nil {
		return nil, err
	}
	return a, t.ApplyPendingDecisions(ctx, a)
}
