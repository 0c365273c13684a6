package attempt

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/bookrecon/bookrecon/events"
)

// run writes a Step (transition.go) in its fixed order: Next, the audit row, anomalies, the
// reference claim, the resolution (and closing outcome escalations), duplicate bookings,
// escalations to open, the gate, escalations to close, then kept decisions. It returns false
// when the write found nothing to write to — a create that lost its race, a fenced WriteCheck
// whose lease was lost — and then wrote nothing after it.
func (t *Tx) run(ctx context.Context, s Step) (bool, error) {
	a := s.Next
	if ok, err := t.write(ctx, s); err != nil || !ok {
		return ok, err
	}
	if s.Write == WriteCreate {
		t.Created[a.Status]++
	}
	if s.UnknownClass != "" {
		t.UnknownByClass[s.UnknownClass]++
	}
	if s.Repeat {
		t.IdempotentRepeats++
	}
	if s.KeyConflict {
		t.KeyConflicts++
	}
	if s.Contradicted {
		t.Contradictions++
	}
	if s.Audit != nil {
		if err := t.audit(ctx, a.ID, *s.Audit); err != nil {
			return true, err
		}
	}
	for _, an := range s.Anomalies {
		if err := t.Anomaly(ctx, a.TenantID, &a.ID, an.Kind, an.EventID, an.Detail); err != nil {
			return true, err
		}
	}
	if s.Claim {
		if err := t.ClaimReference(ctx, a, s.ClaimEventID); err != nil {
			return true, err
		}
	}
	if r := s.Resolve; r != nil {
		if err := t.Resolved(ctx, a, r.CauseID, r.ClosedBy, r.Actor); err != nil {
			return true, err
		}
	}
	if s.Duplicates {
		if err := t.CheckDuplicateBooking(ctx, a); err != nil {
			return true, err
		}
	}
	for _, o := range s.Open {
		if err := t.Escalate(ctx, a, o.Reason, o.Detail); err != nil {
			return true, err
		}
	}
	if s.Gate {
		if err := t.JudgeGate(ctx, a, s.JudgeSelf); err != nil {
			return true, err
		}
	}
	for _, c := range s.Close {
		if err := t.CloseEscalations(ctx, a, c.Reasons, c.ClosedBy, c.Actor, c.OnlyID); err != nil {
			return true, err
		}
	}
	if s.ApplyKept {
		if err := t.ApplyPendingDecisions(ctx, a); err != nil {
			return true, err
		}
	}
	return true, nil
}

// write stores s.Next with the statement s.Write names; false: no row to write (see run).
func (t *Tx) write(ctx context.Context, s Step) (bool, error) {
	a := s.Next
	var tag pgconn.CommandTag
	var err error
	switch s.Write {
	case WriteNone:
		return true, nil
	case WriteCreate:
		rc := a.recovery
		tag, err = t.tx.Exec(ctx, q("booking_attempt_insert"), a.ID, a.TenantID, a.BookingIntentID, string(a.Operation), a.Subject,
			a.Version, a.IdempotencyKey, a.Provider, string(a.Status), string(a.Source), requestJSON(a.request), a.RequestHash,
			a.Fingerprint, rc.ClientReference, rc.ProviderSessionID, rc.CorrelationID, rc.PaymentReference, rc.ProviderReference,
			rc.ProviderIdempotencyKey, a.ProviderReference, a.FailureCode, retryableOf(a), a.TimeoutClass, a.requestSent,
			a.StartedAt, a.FirstEventAt, a.WindowStart, a.FailedFactAt, a.UnknownSince, a.TerminalAt, a.NextCheckAt, a.CreatedAt, a.GateJudged)
	case WriteState:
		tag, err = t.tx.Exec(ctx, q("booking_attempt_write_state"), a.ID, string(a.Status), string(a.Source), a.ProviderReference,
			a.FailureCode, retryableOf(a), a.TimeoutClass, a.WindowStart, a.FailedFactAt, a.UnknownSince, a.TerminalAt, a.NextCheckAt)
	case WriteFill:
		rc := a.recovery
		tag, err = t.tx.Exec(ctx, q("booking_attempt_fill_request"), a.ID, requestJSON(a.request), a.RequestHash, a.Fingerprint,
			rc.ClientReference, rc.ProviderSessionID, rc.CorrelationID, rc.PaymentReference, rc.ProviderReference,
			rc.ProviderIdempotencyKey, a.StartedAt, a.WindowStart)
	case WriteReference:
		tag, err = t.tx.Exec(ctx, q("booking_attempt_record_reference"), a.ID, a.ProviderReference)
	case WriteCheck:
		tag, err = t.tx.Exec(ctx, q("booking_attempt_record_check"), a.ID, s.Fence, a.CheckCount, a.NextCheckAt,
			string(StatusUnknown), a.LastLookupResult)
	case WriteDeadlineDone:
		tag, err = t.tx.Exec(ctx, q("booking_attempt_mark_deadline_done"), a.ID)
	}
	if err != nil {
		return false, fmt.Errorf("attempt: write %s/%s: %w", a.TenantID, a.IdempotencyKey, err)
	}
	return tag.RowsAffected() > 0, nil
}

// retryableOf is the stored retryable: set for a FAILED attempt only.
func retryableOf(a *Row) *bool {
	if a.Status != StatusFailed {
		return nil
	}
	return &a.Retryable
}

func requestJSON(r *events.Request) []byte {
	if r == nil {
		return nil
	}
	b, _ := json.Marshal(r)
	return b
}
