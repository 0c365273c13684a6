package reconcile

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/bookrecon/bookrecon/events"
	"github.com/bookrecon/bookrecon/internal/attempt"
	"github.com/bookrecon/bookrecon/internal/postgres"
	"github.com/bookrecon/bookrecon/providers"
)

// plan is the one lookup a check uses, the first of DESIGN.md's ladder that applies.
type plan struct {
	query providers.Query
	// none: no lookup applies; noCapability: and none ever will (escalate no_lookup_capability).
	none, noCapability bool
}

// Plan picks the check's lookup for a.
func Plan(a *attempt.Row, caps providers.Capabilities) plan {
	q := providers.Query{Provider: a.Provider, Operation: a.Operation}
	started := a.RequestHash != ""
	switch {
	case a.ProviderReference != "" && caps.Supports(providers.LookupProviderReference):
		q.Kind, q.Value = providers.LookupProviderReference, a.ProviderReference
	case a.ClientReference != "" && caps.Supports(providers.LookupClientReference):
		q.Kind, q.Value = providers.LookupClientReference, a.ClientReference
	case a.Operation.HasFingerprint() && started && a.Fingerprint != "" && caps.Supports(providers.LookupFingerprint):
		start := a.FirstEventAt
		if a.StartedAt != nil {
			start = *a.StartedAt
		}
		q.Kind, q.Value = providers.LookupFingerprint, a.Fingerprint
		q.From, q.To = start.Add(-caps.FingerprintWindow), start.Add(caps.FingerprintWindow)
	case len(caps.Lookups) == 0 || started:
		return plan{none: true, noCapability: true}
	default:
		return plan{none: true} // the start has not arrived; the deadline runs
	}
	return plan{query: q}
}

// LookupAudit is the lookup as the audit trail keeps it.
type LookupAudit struct {
	Kind      string `json:"kind"`
	Result    string `json:"result"`
	Records   int    `json:"records"`
	Status    string `json:"status,omitempty"`
	Reference string `json:"reference,omitempty"`
	Error     string `json:"error,omitempty"`
	At        string `json:"at"`
}

// verdict is what a lookup concluded.
type verdict struct {
	settle       *attempt.Settlement
	escalate     attempt.Reason // ambiguous_match or contradiction
	retryAfter   time.Duration
	result       providers.Result
	audit        LookupAudit
	authNotFound bool // a conclusive not-found
	recordStatus providers.RecordStatus
	recordRef    string
	noCapability bool
}

// check looks c up and writes the verdict. A failure for the attempt's own data
// (attempt.FailureClass) is recorded on it and set aside on the backoff (setAside), so it never
// holds up the round; any other error is returned (an outage: the claim's lease expiry makes the
// attempt due again).
func (r *Reconciler) check(ctx context.Context, c Claimed) error {
	err := r.checkOnce(ctx, c)
	if class := attempt.FailureClass(err); class != "" && ctx.Err() == nil {
		a := c.Row
		return r.setAside(ctx, failedItem{stage: StageCheck, id: a.ID, tenant: a.TenantID, key: a.IdempotencyKey,
			token: c.Token, status: attempt.StatusUnknown}, class, err)
	}
	return err
}

func (r *Reconciler) checkOnce(ctx context.Context, c Claimed) error {
	a := c.Row
	caps, ok := r.cfg.Providers.Get(a.Provider)
	if !ok {
		return fmt.Errorf("reconcile: %s: provider %q not in the capability map: %w", a.IdempotencyKey, a.Provider, attempt.ErrInvalidData)
	}
	p := Plan(a, caps)
	var v verdict
	if p.none {
		v = verdict{noCapability: p.noCapability}
	} else {
		v = r.lookup(ctx, a, caps, p.query)
	}
	if f := r.testSignals.beforeWrite; f != nil {
		f(ctx, a)
	}
	return r.write(ctx, c, v)
}

// lookup calls the provider outside any transaction and judges the answer.
func (r *Reconciler) lookup(ctx context.Context, a *attempt.Row, caps providers.Capabilities, q providers.Query) verdict {
	cctx, cancel := context.WithTimeout(ctx, r.cfg.CallTimeout)
	start := time.Now()
	recs, err := r.provider.Lookup(cctx, q)
	cancel()
	res := providers.ResultOf(recs, err)
	r.metrics.Lookups.WithLabelValues(a.Provider, string(q.Kind), string(res)).Inc()
	r.metrics.LookupSeconds.WithLabelValues(a.Provider).Observe(time.Since(start).Seconds())
	now := r.now()
	v := verdict{result: res, audit: LookupAudit{Kind: string(q.Kind), Result: string(res), Records: len(recs), At: now.UTC().Format(time.RFC3339Nano)}}
	source := attempt.Source(q.Kind)
	switch res {
	case providers.ResultError:
		class, _ := providers.ClassOf(err)
		v.audit.Error = string(class)
		if ra, ok := providers.RetryAfter(err); ok {
			v.retryAfter = ra
		}
	case providers.ResultSeveral:
		v.escalate = attempt.ReasonAmbiguousMatch // never guess
	case providers.ResultFound:
		rec := recs[0]
		v.recordStatus, v.recordRef = rec.Status, rec.ProviderReference
		v.audit.Status, v.audit.Reference = string(rec.Status), rec.ProviderReference
		matches := q.Kind == providers.LookupFingerprint && rec.Fingerprint == a.Fingerprint ||
			q.Kind != providers.LookupFingerprint && (rec.Fingerprint == "" || a.Fingerprint == "" || rec.Fingerprint == a.Fingerprint)
		if !matches {
			v.escalate = attempt.ReasonContradiction
			break
		}
		switch rec.Status {
		case providers.StatusConfirmed:
			v.settle = &attempt.Settlement{Status: attempt.StatusConfirmed, Source: source, Reference: rec.ProviderReference}
		case providers.StatusRejected, providers.StatusCancelled:
			v.settle = &attempt.Settlement{Status: attempt.StatusFailed, Source: source, Reference: rec.ProviderReference,
				FailureCode: string(rec.Status), Retryable: true}
		}
	case providers.ResultNotFound:
		if r.authoritativeNotFound(a, caps, q.Kind, now) {
			v.authNotFound = true
			v.settle = &attempt.Settlement{Status: attempt.StatusFailed, Source: attempt.SourceAuthoritativeNotFound,
				FailureCode: "NOT_FOUND", Retryable: true}
		}
	}
	return v
}

// authoritativeNotFound: DESIGN.md "Reconciliation": only for a provider whose not-found is
// authoritative, by provider_reference or client_reference, after window start +
// consistencyWindow, and for business_timeout and client_timeout also after window start +
// maxProcessingTime.
func (r *Reconciler) authoritativeNotFound(a *attempt.Row, caps providers.Capabilities, kind providers.LookupKind, now time.Time) bool {
	if !caps.AuthoritativeNotFound || !kind.IsReference() {
		return false
	}
	if now.Before(a.WindowStart.Add(caps.ConsistencyWindow)) {
		return false
	}
	tc := events.TimeoutClass(a.TimeoutClass)
	if (tc == events.TimeoutBusiness || tc == events.TimeoutClient) && now.Before(a.WindowStart.Add(caps.MaxProcessingTime)) {
		return false
	}
	return true
}

// windowPassedOnDatabaseClock re-checks the authoritative not-found window of a against the
// database's clock, the clock window_start was recorded on.
func (r *Reconciler) windowPassedOnDatabaseClock(ctx context.Context, tx pgx.Tx, a *attempt.Row) (bool, error) {
	caps, _ := r.cfg.Providers.Get(a.Provider)
	need := caps.ConsistencyWindow
	if tc := events.TimeoutClass(a.TimeoutClass); tc == events.TimeoutBusiness || tc == events.TimeoutClient {
		need = max(need, caps.MaxProcessingTime)
	}
	var ok bool
	err := tx.QueryRow(ctx, `SELECT now() >= $1::timestamptz + $2::interval`, a.WindowStart,
		fmt.Sprintf("%d microseconds", need.Microseconds())).Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("reconcile: database clock: %w", err)
	}
	return ok, nil
}

// write records the verdict in a transaction fenced by the lease token: every write of the
// attempt carries `lease_token = $token AND status = 'UNKNOWN'`. A verdict is never lost: when
// the attempt was settled meanwhile (by an event, a person or the reconciler that took the lease
// over) the lookup reaches the audit trail only, a contradiction when conclusive and
// disagreeing; when the lease was lost while the attempt is still UNKNOWN it is audited and not
// applied (the new owner checks it again).
func (r *Reconciler) write(ctx context.Context, c Claimed, v verdict) error {
	var eff *attempt.Effects
	lost := false
	err := postgres.WithTx(ctx, r.pool, func(tx pgx.Tx) error {
		at := attempt.NewTx(tx, &r.cfg.Store)
		eff = &at.Effects
		lost = false
		if err := at.LockIntent(ctx, c.Row.TenantID, c.Row.BookingIntentID); err != nil {
			return err
		}
		a, err := at.ByID(ctx, c.Row.ID)
		if err != nil {
			return err
		}
		// Another reconciler re-claimed the attempt (its claim bumped the token): it owns the
		// attempt's state, so this verdict writes none of it — neither the verdict nor
		// next_check_at. Events and decisions do not bump the token.
		lost = a.LeaseToken() != c.Token
		if v.authNotFound && r.dbClockFloor {
			ok, err := r.windowPassedOnDatabaseClock(ctx, tx, a)
			if err != nil {
				return err
			}
			if !ok {
				// The reconciler's clock runs ahead of the database's: skew may only delay a
				// FAILED, never hasten it (DESIGN.md "Reconciliation"). Back off instead; for a
				// late verdict the not-found is not conclusive.
				v.settle, v.authNotFound = nil, false
			}
		}
		if a.Status != attempt.StatusUnknown {
			return r.late(ctx, at, a, v, lost)
		}
		if lost {
			return r.unapplied(ctx, at, a, v)
		}
		if v.settle != nil {
			v.settle.CauseID = fmt.Sprintf("lookup:%s:%d", a.ID, c.Token)
			v.settle.Cause = "lookup"
			v.settle.Lookup = v.audit
			v.settle.Note = "lookup by " + v.audit.Kind
			_, err := at.Settle(ctx, a, *v.settle)
			return err
		}
		next := r.nextCheck(a, v)
		tag, err := tx.Exec(ctx, `UPDATE booking_attempt SET check_count = check_count + 1, check_failures = 0, next_check_at = $3,
			last_lookup_result = nullif($4, ''), lease_owner = NULL, lease_expires_at = NULL, updated_at = now()
			WHERE id = $1 AND lease_token = $2 AND status = 'UNKNOWN'`, a.ID, c.Token, next, string(v.result))
		if err != nil {
			return fmt.Errorf("reconcile: next check %s: %w", a.IdempotencyKey, err)
		}
		if tag.RowsAffected() == 0 {
			lost = true
			return nil
		}
		a.CheckCount++
		a.LastLookupResult = string(v.result)
		if v.result != "" {
			if err := at.Audit(ctx, a.ID, attempt.Audit{From: a.Status, To: a.Status, Cause: "lookup", Lookup: v.audit, Note: "check " + fmt.Sprint(a.CheckCount)}); err != nil {
				return err
			}
		}
		// no_lookup_capability is raised by the transaction that recorded the attempt UNKNOWN
		// (ingester, stale sweep), never on a later check (DESIGN.md "Reconciliation"): here
		// the attempt only leaves the check schedule (next_check_at NULL).
		if v.escalate == attempt.ReasonContradiction {
			at.Contradictions++
			if err := at.Anomaly(ctx, a.TenantID, &a.ID, string(attempt.ReasonContradiction), "", map[string]any{"lookup": v.audit}); err != nil {
				return err
			}
		}
		if v.escalate != "" {
			return at.Escalate(ctx, a, v.escalate, "")
		}
		return nil
	})
	if err != nil {
		return err
	}
	if lost {
		r.metrics.LeaseLost.Inc()
		r.log.Info("lease lost; verdict audited, not applied", "attempt_id", c.Row.ID, "token", c.Token)
	}
	r.observe(eff)
	return nil
}

// nextCheck: the backoff interval after this check, at least any Retry-After; at the maximum
// interval once an escalation other than no_lookup_capability is open; never when no lookup
// can ever apply (no_lookup_capability: no further checks).
func (r *Reconciler) nextCheck(a *attempt.Row, v verdict) *time.Time {
	if v.noCapability {
		return nil
	}
	d := r.interval(a.CheckCount + 1)
	if v.escalate != "" || a.Escalated {
		d = r.cfg.MaxInterval
	}
	if v.retryAfter > d {
		d = v.retryAfter
	}
	t := r.now().Add(d)
	return &t
}

// Notes of the audit rows of verdicts that were not applied.
const (
	noteLate      = "late lookup after "                   // + the terminal status set meanwhile
	noteLeaseLost = "; lease lost"                         // appended when another reconciler took the lease over
	noteUnapplied = "late lookup; lease lost, not applied" // the attempt is still UNKNOWN, held by another reconciler
)

// late handles a verdict for an attempt settled meanwhile — by an event or a person (same
// token), or by the reconciler that took the lease over (lost): audit only, and a contradiction
// when the lookup is conclusive and disagrees. Neither needs the lease: the attempt's state is
// not written.
func (r *Reconciler) late(ctx context.Context, at *attempt.Tx, a *attempt.Row, v verdict, lost bool) error {
	if !a.Status.Terminal() {
		return nil // IN_PROGRESS cannot follow UNKNOWN; nothing to record
	}
	if v.result == "" {
		return nil
	}
	note := noteLate + string(a.Status)
	if lost {
		note += noteLeaseLost
	}
	if err := at.Audit(ctx, a.ID, attempt.Audit{From: a.Status, To: a.Status, Cause: "lookup", Lookup: v.audit, Note: note}); err != nil {
		return err
	}
	disagrees := false
	switch {
	case v.result == providers.ResultFound && v.escalate == "":
		switch {
		case v.recordStatus == providers.StatusConfirmed && a.Status == attempt.StatusFailed:
			disagrees = true
		case (v.recordStatus == providers.StatusRejected || v.recordStatus == providers.StatusCancelled) && a.Status == attempt.StatusConfirmed:
			disagrees = true
		case v.recordStatus == providers.StatusConfirmed && a.ProviderReference != "" && v.recordRef != a.ProviderReference:
			disagrees = true
		}
	case v.authNotFound && a.Status == attempt.StatusConfirmed:
		disagrees = true
	}
	if !disagrees {
		return nil
	}
	at.Contradictions++
	if err := at.Anomaly(ctx, a.TenantID, &a.ID, string(attempt.ReasonContradiction), "", map[string]any{"lookup": v.audit}); err != nil {
		return err
	}
	return at.Escalate(ctx, a, attempt.ReasonContradiction, "late lookup disagrees")
}

// unapplied audits the verdict of a reconciler whose lease another one took over while the
// attempt is still UNKNOWN: the fence keeps the attempt's state for the new owner, whose own
// lookup decides; the trail keeps what this provider call answered. Nothing can contradict an
// UNKNOWN attempt.
func (r *Reconciler) unapplied(ctx context.Context, at *attempt.Tx, a *attempt.Row, v verdict) error {
	if v.result == "" {
		return nil
	}
	return at.Audit(ctx, a.ID, attempt.Audit{From: a.Status, To: a.Status, Cause: "lookup", Lookup: v.audit, Note: noteUnapplied})
}
