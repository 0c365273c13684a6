package attempt

import (
	"context"
	"maps"
	"time"
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

// Settle moves a (read FOR UPDATE under its intent lock) to a terminal state (OnSettle) and
// writes, as a one-step batch (Bulk), every effect that follows: audit row, resolution, closing outcome escalations, provider
// reference claim, duplicate booking, the gate of later versions, kept manual decisions. The
// caller has checked that the verdict applies (fencing, current status).
func (t *Tx) Settle(ctx context.Context, a *Row, s Settlement) (*Row, error) {
	b, cur, err := t.oneStep(ctx, a, s.Reference)
	if err != nil {
		return nil, err
	}
	st := OnSettle(cur, s, b.env(cur.Provider))
	_, err = t.runOne(ctx, b, cur, st)
	return st.Next, err
}

// MarkStale applies the stale-IN_PROGRESS timeout (OnStale) to a, read FOR UPDATE under its
// intent lock: older than timeout on the clock now, it turns UNKNOWN with cause
// stale_in_progress and timeout class `stale`, audited, escalated no_lookup_capability when no
// lookup can apply, and its kept decisions applied. It returns the attempt after it; one that is
// no longer stale is returned unchanged.
func (t *Tx) MarkStale(ctx context.Context, a *Row, now time.Time, timeout time.Duration) (*Row, error) {
	b, cur, err := t.oneStep(ctx, a, "")
	if err != nil {
		return nil, err
	}
	st := OnStale(cur, now, timeout, b.env(cur.Provider))
	_, err = t.runOne(ctx, b, cur, st)
	return st.Next, err
}

// RecordLookup applies a lookup verdict (OnLookup) to a, re-read FOR UPDATE under its intent
// lock, and reports whether the lease was lost (the verdict was then only audited).
func (t *Tx) RecordLookup(ctx context.Context, a *Row, c LookupCause) (lost bool, err error) {
	ref := ""
	if c.Lookup.Settle != nil {
		ref = c.Lookup.Settle.Reference
	}
	b, cur, err := t.oneStep(ctx, a, ref)
	if err != nil {
		return false, err
	}
	st, lost := OnLookup(cur, c, b.env(cur.Provider))
	ok, err := t.runOne(ctx, b, cur, st)
	return lost || !ok, err
}

// JudgeDeadline applies the escalator's deadline check (OnDeadline) to a, read FOR UPDATE under
// its intent lock. raised: the deadline passed and nothing held it back, so deadline_exceeded
// was asked for; opened: and it was inserted (not already there).
func (t *Tx) JudgeDeadline(ctx context.Context, a *Row, deadline time.Duration) (raised, opened bool, err error) {
	b, cur, err := t.oneStep(ctx, a, "")
	if err != nil {
		return false, false, err
	}
	before := t.EscalationsOpened[ReasonDeadlineExceeded]
	s := OnDeadline(cur, maps.Clone(b.stored[cur.ID]), deadline, b.env(cur.Provider))
	if _, err := t.runOne(ctx, b, cur, s); err != nil {
		return false, false, err
	}
	return len(s.Open) > 0, t.EscalationsOpened[ReasonDeadlineExceeded] > before, nil
}
