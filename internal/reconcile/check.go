package reconcile

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/bookrecon/bookrecon/internal/attempt"
	"github.com/bookrecon/bookrecon/internal/postgres"
	"github.com/bookrecon/bookrecon/providers"
)

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
	p := attempt.Ladder(a, caps.Lookups, caps.FingerprintWindow)
	var l attempt.Lookup
	if p.None {
		l = attempt.Lookup{NoCapability: p.NoCapability}
	} else {
		l = r.lookup(ctx, a, caps, p.Query)
	}
	if f := r.testSignals.beforeWrite; f != nil {
		f(ctx, a)
	}
	return r.write(ctx, c, caps, l)
}

// lookup calls the provider outside any transaction and judges the answer (attempt.JudgeLookup).
func (r *Reconciler) lookup(ctx context.Context, a *attempt.Row, caps providers.Capabilities, q providers.Query) attempt.Lookup {
	cctx, cancel := context.WithTimeout(ctx, r.cfg.CallTimeout)
	start := time.Now()
	recs, err := r.provider.Lookup(cctx, q)
	cancel()
	r.metrics.Lookups.WithLabelValues(a.Provider, string(q.Kind), string(providers.ResultOf(recs, err))).Inc()
	r.metrics.LookupSeconds.WithLabelValues(a.Provider).Observe(time.Since(start).Seconds())
	var class string
	var retryAfter time.Duration
	if err != nil {
		c, _ := providers.ClassOf(err)
		class = string(c)
		if ra, ok := providers.RetryAfter(err); ok {
			retryAfter = ra
		}
	}
	return attempt.JudgeLookup(a, caps, q, recs, err, class, retryAfter, r.now())
}

// write records the verdict in a transaction that locks the intent and re-reads the attempt;
// attempt.OnLookup decides what it writes: every write of the attempt's state is fenced by the
// lease token (`lease_token = $token AND status = UNKNOWN`). A verdict is never lost: when the
// attempt was settled meanwhile (by an event, a person or the reconciler that took the lease
// over) the lookup reaches the audit trail only, a contradiction when conclusive and
// disagreeing; when the lease was lost while the attempt is still UNKNOWN it is audited and not
// applied (the new owner checks it again).
func (r *Reconciler) write(ctx context.Context, c Claimed, caps providers.Capabilities, l attempt.Lookup) error {
	var eff *attempt.Effects
	lost := false
	err := postgres.WithTx(ctx, r.pool, func(tx pgx.Tx) error {
		at := attempt.NewTx(tx, &r.cfg.Store)
		eff = &at.Effects
		if err := at.LockIntent(ctx, c.Row.TenantID, c.Row.BookingIntentID); err != nil {
			return err
		}
		a, err := at.ByID(ctx, c.Row.ID)
		if err != nil {
			return err
		}
		lost, err = at.RecordLookup(ctx, a, attempt.LookupCause{Lookup: l, Token: c.Token, Caps: caps, ClockFloor: r.dbClockFloor,
			NextCheck: func(a *attempt.Row, escalates bool) *time.Time { return r.nextCheck(a, l, escalates) }})
		return err
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
// interval once an escalation other than no_lookup_capability is open or this check escalates.
// (No further checks when no lookup can ever apply: attempt.OnLookup leaves next_check_at NULL.)
func (r *Reconciler) nextCheck(a *attempt.Row, l attempt.Lookup, escalates bool) *time.Time {
	d := r.interval(a.CheckCount + 1)
	if escalates || a.Escalated {
		d = r.cfg.MaxInterval
	}
	if l.RetryAfter > d {
		d = l.RetryAfter
	}
	t := r.now().Add(d)
	return &t
}
