package attempt

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/bookrecon/bookrecon/events"
)

// Applied is what ApplyEvent did with one event.
type Applied struct {
	Verdict Verdict
	Attempt *Row
}

// ApplyEvent applies one deduplicated attempt event: it locks the intent, reads the attempt,
// asks Decide, and writes the state change, audit row, anomaly and escalation rows and outbox
// rows (DESIGN.md "Attempt states", "Escalations", "Storage rules"). The caller owns the
// transaction and has inserted the processed_event row. transportCodes: see FactOf.
func (t *Tx) ApplyEvent(ctx context.Context, ev events.Attempt, transportCodes []string) (Applied, error) {
	if err := t.LockIntent(ctx, ev.TenantID, ev.BookingIntentID); err != nil {
		return Applied{}, err
	}
	f := FactOf(ev, transportCodes)
	var hash, fp string
	var reqJSON []byte
	if ev.EventType == events.EventStarted {
		d, err := ev.Digests()
		if err != nil {
			return Applied{}, fmt.Errorf("attempt: request hash %s: %w", ev.EventID, err)
		}
		hash, fp = d.RequestHash, d.Fingerprint
		if reqJSON, err = json.Marshal(ev.Request); err != nil {
			return Applied{}, err
		}
	}
	for range 2 {
		cur, err := t.ByKey(ctx, ev.TenantID, ev.IdempotencyKey)
		if err != nil {
			return Applied{}, err
		}
		var c *Current
		if cur != nil {
			c = &Current{Status: cur.Status, BookingIntentID: cur.BookingIntentID, Provider: cur.Provider,
				RequestHash: cur.RequestHash, ProviderReference: cur.ProviderReference}
		}
		v := Decide(c, ev, f, hash)
		if v.Action == ActionCreate {
			a, err := t.create(ctx, ev, f, v, hash, fp, reqJSON)
			if err != nil {
				return Applied{}, err
			}
			if a == nil {
				continue // created meanwhile under another intent's lock: decide again
			}
			return Applied{Verdict: v, Attempt: a}, nil
		}
		a, err := t.applyExisting(ctx, cur, ev, f, v, hash, fp, reqJSON)
		return Applied{Verdict: v, Attempt: a}, err
	}
	return Applied{}, fmt.Errorf("attempt: %s/%s: create raced twice", ev.TenantID, ev.IdempotencyKey)
}

func (t *Tx) create(ctx context.Context, ev events.Attempt, f Fact, v Verdict, hash, fp string, reqJSON []byte) (*Row, error) {
	id := uuid.Must(uuid.NewV7())
	rc := ev.Recovery
	var started any
	if ev.EventType == events.EventStarted {
		started = ev.OccurredAt
	}
	var retryable *bool
	if v.Status == StatusFailed {
		retryable = &f.Retryable
	}
	var reqSent *bool
	if ev.Outcome != nil && !f.Transport && ev.Outcome.RequestSent != nil && f.TimeoutClass == events.TimeoutConnect {
		reqSent = ev.Outcome.RequestSent
	}
	tag, err := t.tx.Exec(ctx, `INSERT INTO booking_attempt (id, tenant_id, booking_intent_id, operation, subject, operation_version,
		idempotency_key, provider, status, resolution_source, request, request_hash, fingerprint, client_reference,
		provider_session_id, correlation_id, payment_reference, subject_provider_reference, provider_idempotency_key,
		provider_reference, failure_code, retryable, timeout_class, request_sent, started_at, first_event_at, window_start,
		failed_fact_at, unknown_since, terminal_at, next_check_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, nullif($10, ''), $11, nullif($12, ''), nullif($13, ''), nullif($14, ''),
		nullif($15, ''), nullif($16, ''), nullif($17, ''), nullif($18, ''), nullif($19, ''), nullif($20, ''), nullif($21, ''),
		$22, nullif($23, ''), $24, $25, $26, greatest($26, now()),
		CASE WHEN $9 = 'FAILED' THEN $26 END,
		CASE WHEN $9 = 'UNKNOWN' THEN now() END,
		CASE WHEN $9 IN ('CONFIRMED', 'FAILED') THEN now() END,
		CASE WHEN $9 = 'UNKNOWN' THEN now() + $27::interval END)
		ON CONFLICT DO NOTHING`,
		id, ev.TenantID, ev.BookingIntentID, string(ev.Operation), ev.KeySubject, ev.OperationVersion,
		ev.IdempotencyKey, ev.Provider, string(v.Status), string(v.Source), reqJSON, hash, fp, rc.ClientReference,
		rc.ProviderSessionID, rc.CorrelationID, rc.PaymentReference, rc.ProviderReference, rc.ProviderIdempotencyKey,
		f.Reference, f.FailureCode, retryable, string(f.TimeoutClass), reqSent, started, ev.OccurredAt, t.firstCheck())
	if err != nil {
		return nil, fmt.Errorf("attempt: create %s/%s: %w", ev.TenantID, ev.IdempotencyKey, err)
	}
	if tag.RowsAffected() == 0 {
		return nil, nil
	}
	a, err := t.ByID(ctx, id)
	if err != nil {
		return nil, err
	}
	t.Created[a.Status]++
	if err := t.audit(ctx, a.ID, Audit{To: a.Status, Cause: "event", EventID: ev.EventID, Note: v.Note}); err != nil {
		return nil, err
	}
	return a, t.afterChange(ctx, a, ev, f, true, true)
}

func (t *Tx) firstCheck() string {
	return fmt.Sprintf("%d microseconds", t.firstCheckDuration().Microseconds())
}

func (t *Tx) firstCheckDuration() time.Duration {
	if t.cfg.FirstCheck <= 0 {
		return defaultFirstCheck
	}
	return t.cfg.FirstCheck
}

// afterChange runs the rules that follow a creation, a status change or a filled-in request:
// UNKNOWN bookkeeping, resolution, duplicate detection, the gate.
func (t *Tx) afterChange(ctx context.Context, a *Row, ev events.Attempt, f Fact, statusChanged, judgeSelf bool) error {
	if statusChanged && a.Status == StatusUnknown {
		t.UnknownByClass[f.TimeoutClass.MetricLabel()]++
	}
	if a.ProviderReference != "" {
		if err := t.ClaimReference(ctx, a, ev.EventID); err != nil {
			return err
		}
	}
	if statusChanged && a.Status.Terminal() {
		if err := t.Resolved(ctx, a, ev.EventID, "event", ""); err != nil {
			return err
		}
		if err := t.CheckDuplicateBooking(ctx, a); err != nil {
			return err
		}
	}
	if a.Status == StatusUnknown && t.NeedsNoLookupEscalation(a) {
		if err := t.Escalate(ctx, a, ReasonNoLookupCapability, ""); err != nil {
			return err
		}
	}
	if err := t.JudgeGate(ctx, a, judgeSelf); err != nil {
		return err
	}
	if statusChanged && (a.Status == StatusUnknown || a.Status.Terminal()) {
		return t.ApplyPendingDecisions(ctx, a)
	}
	return nil
}

func (t *Tx) applyExisting(ctx context.Context, a *Row, ev events.Attempt, f Fact, v Verdict, hash, fp string, reqJSON []byte) (*Row, error) {
	aud := Audit{From: a.Status, To: a.Status, Cause: "event", EventID: ev.EventID, Note: v.Note}
	switch v.Action {
	case ActionRepeat:
		t.IdempotentRepeats++
		return a, t.audit(ctx, a.ID, aud)
	case ActionKeyConflict:
		t.KeyConflicts++
		detail := map[string]any{"rule": v.Note, "eventType": ev.EventType}
		if f.Reference != "" {
			detail["providerReference"] = f.Reference // not applied: audit trail only
		}
		if err := t.audit(ctx, a.ID, aud); err != nil {
			return nil, err
		}
		if err := t.Anomaly(ctx, a.TenantID, &a.ID, string(ReasonKeyConflict), ev.EventID, detail); err != nil {
			return nil, err
		}
		return a, t.Escalate(ctx, a, ReasonKeyConflict, "")
	case ActionContradiction:
		t.Contradictions++
		if err := t.audit(ctx, a.ID, aud); err != nil {
			return nil, err
		}
		if err := t.Anomaly(ctx, a.TenantID, &a.ID, string(ReasonContradiction), ev.EventID,
			map[string]any{"eventType": ev.EventType, "providerReference": f.Reference}); err != nil {
			return nil, err
		}
		return a, t.Escalate(ctx, a, ReasonContradiction, "")
	case ActionAuditOnly:
		if a.Status == StatusUnknown && f.Reference != "" && a.ProviderReference == "" {
			// A repeated outcome_unknown that brings a provider reference records it.
			if _, err := t.tx.Exec(ctx, `UPDATE booking_attempt SET provider_reference = $2, updated_at = now() WHERE id = $1`, a.ID, f.Reference); err != nil {
				return nil, err
			}
			a.ProviderReference = f.Reference
			aud.Note += "; provider reference recorded"
			if err := t.audit(ctx, a.ID, aud); err != nil {
				return nil, err
			}
			return a, t.ClaimReference(ctx, a, ev.EventID)
		}
		return a, t.audit(ctx, a.ID, aud)
	case ActionFillRequest:
		rc := ev.Recovery
		_, err := t.tx.Exec(ctx, `UPDATE booking_attempt SET request = $2, request_hash = $3, fingerprint = nullif($4, ''),
			client_reference = coalesce(client_reference, nullif($5, '')), provider_session_id = coalesce(provider_session_id, nullif($6, '')),
			correlation_id = coalesce(correlation_id, nullif($7, '')), payment_reference = coalesce(payment_reference, nullif($8, '')),
			subject_provider_reference = coalesce(subject_provider_reference, nullif($9, '')),
			provider_idempotency_key = coalesce(provider_idempotency_key, nullif($10, '')),
			started_at = $11, window_start = greatest(window_start, $11, now()), updated_at = now() WHERE id = $1`,
			a.ID, reqJSON, hash, fp, rc.ClientReference, rc.ProviderSessionID, rc.CorrelationID, rc.PaymentReference,
			rc.ProviderReference, rc.ProviderIdempotencyKey, ev.OccurredAt)
		if err != nil {
			return nil, fmt.Errorf("attempt: fill request %s: %w", a.IdempotencyKey, err)
		}
		if a, err = t.ByID(ctx, a.ID); err != nil {
			return nil, err
		}
		if err := t.audit(ctx, a.ID, aud); err != nil {
			return nil, err
		}
		return a, t.afterChange(ctx, a, ev, f, false, true)
	case ActionTransition:
		var retryable *bool
		if v.Status == StatusFailed {
			retryable = &f.Retryable
		}
		_, err := t.tx.Exec(ctx, `UPDATE booking_attempt SET status = $2, resolution_source = nullif($3, ''),
			provider_reference = coalesce(nullif($4, ''), provider_reference), failure_code = coalesce(nullif($5, ''), failure_code),
			retryable = coalesce($6, retryable), timeout_class = coalesce(nullif($7, ''), timeout_class),
			window_start = greatest($8, now()),
			failed_fact_at = CASE WHEN $2 = 'FAILED' THEN $8 END,
			unknown_since = CASE WHEN $2 = 'UNKNOWN' THEN now() ELSE unknown_since END,
			terminal_at = CASE WHEN $2 IN ('CONFIRMED', 'FAILED') THEN now() END,
			next_check_at = CASE WHEN $2 = 'UNKNOWN' THEN now() + $9::interval END,
			lease_owner = NULL, lease_expires_at = NULL, updated_at = now()
			WHERE id = $1`,
			a.ID, string(v.Status), string(v.Source), f.Reference, f.FailureCode, retryable, string(f.TimeoutClass), ev.OccurredAt, t.firstCheck())
		if err != nil {
			return nil, fmt.Errorf("attempt: transition %s: %w", a.IdempotencyKey, err)
		}
		if a, err = t.ByID(ctx, a.ID); err != nil {
			return nil, err
		}
		aud.To = a.Status
		if err := t.audit(ctx, a.ID, aud); err != nil {
			return nil, err
		}
		return a, t.afterChange(ctx, a, ev, f, true, false)
	}
	return a, nil
}
