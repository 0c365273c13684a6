package reconcile_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/bookrecon/bookrecon/events"
	"github.com/bookrecon/bookrecon/internal/attempt"
	"github.com/bookrecon/bookrecon/internal/harness/pgtest"
	"github.com/bookrecon/bookrecon/internal/postgres"
	"github.com/bookrecon/bookrecon/internal/reconcile"
	"github.com/bookrecon/bookrecon/providers"
	"github.com/bookrecon/bookrecon/providers/simulator"
)

// oneAttempt is a single UNKNOWN attempt checked by one reconciler on a controllable clock.
type oneAttempt struct {
	ctx  context.Context
	pool *pgxpool.Pool
	clk  *stepClock
	sim  *simulator.Server
	rec  *reconcile.Reconciler
	reg  *prometheus.Registry
	spec attemptSpec
	scfg *attempt.Config
}

// setupOne records spec UNKNOWN (started, then outcome_unknown with class and providerRef) and
// starts the clock at the wall clock, so that it is never behind PostgreSQL's now() that stamped
// the row.
func setupOne(t *testing.T, spec attemptSpec, class, providerRef string, truth simulator.Truth) *oneAttempt {
	t.Helper()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	m := mapPath(t)
	o := &oneAttempt{ctx: ctx, pool: pool, spec: spec, scfg: storeConfig(m)}
	at := time.Now().UTC().Truncate(time.Millisecond)
	applyEvent(t, ctx, pool, o.scfg, spec.Started(at.Add(-2*time.Second)))
	applyEvent(t, ctx, pool, o.scfg, spec.Unknown(at.Add(-time.Second), class, providerRef))
	o.clk = newStepClock(time.Now().UTC().Truncate(time.Millisecond))
	o.sim = newSim(truth, m, o.clk, 1, simulator.Faults{})
	o.rec, o.reg = newReconciler(t, demoConfig(m), pool, startSim(t, o.sim, o.clk), o.clk)
	return o
}

func (o *oneAttempt) row(t *testing.T) row {
	t.Helper()
	return readRow(t, o.ctx, o.pool, o.spec.Tenant, o.spec.Key())
}

// checkAtNext moves the clock to just before the persisted next_check_at (nothing is due), then
// onto it, and runs one check; it returns the row after the check and the check's time.
func (o *oneAttempt) checkAtNext(t *testing.T) (row, time.Time) {
	t.Helper()
	before := o.row(t)
	if before.NextCheck == nil {
		t.Fatal("no next check scheduled")
	}
	if before.NextCheck.After(o.clk.Now()) {
		o.clk.Set(before.NextCheck.Add(-time.Millisecond))
		if n, err := o.rec.RunOnce(o.ctx); err != nil || n != 0 {
			t.Fatalf("1ms before next_check_at: RunOnce = %d, %v; want nothing due", n, err)
		}
		o.clk.Set(*before.NextCheck)
	}
	now := o.clk.Now()
	if n, err := o.rec.RunOnce(o.ctx); err != nil || n != 1 {
		t.Fatalf("at next_check_at: RunOnce = %d, %v; want 1 check", n, err)
	}
	after := o.row(t)
	if after.CheckCount != before.CheckCount+1 {
		t.Fatalf("check_count %d → %d, want +1", before.CheckCount, after.CheckCount)
	}
	return after, now
}

func wantNext(t *testing.T, r row, now time.Time, d time.Duration) {
	t.Helper()
	if r.Status != "UNKNOWN" || r.NextCheck == nil || !r.NextCheck.Equal(now.Add(d)) {
		t.Fatalf("after check %d at %s: status %s, next_check_at %v; want UNKNOWN at +%s", r.CheckCount,
			now.Format(time.RFC3339Nano), r.Status, r.NextCheck, d)
	}
}

func airSpec(name string, i int) attemptSpec {
	return attemptSpec{Tenant: "t_backoff", Intent: name, Provider: "sim-air", Traveller: fmt.Sprintf("tr_%s", name), Segments: flight(i)}
}

// TestBackoffScheduleNeverGivesUp: with InitialInterval 1s, Multiplier 2, MaxInterval 10s and no
// jitter, the next_check_at persisted after each not-found check is exactly +2, +4, +8, +10,
// +10 s (check_count advancing), nothing is due a millisecond earlier, and after 50 checks the
// attempt is still UNKNOWN with a next check at +10 s: giving up is never an outcome.
func TestBackoffScheduleNeverGivesUp(t *testing.T) {
	t.Parallel()
	// sim-air's not-found is not authoritative: a provider_reference lookup that finds nothing
	// backs off for ever.
	o := setupOne(t, airSpec("bi_nf", 1), "read_timeout", "AIR-NOTHERE", simulator.Truth{})
	schedule := []time.Duration{2 * time.Second, 4 * time.Second, 8 * time.Second, 10 * time.Second, 10 * time.Second}
	for i, d := range schedule {
		r, now := o.checkAtNext(t)
		if r.CheckCount != i+1 || r.LastLookup != "not_found" {
			t.Fatalf("check %d: check_count %d, last lookup %q", i+1, r.CheckCount, r.LastLookup)
		}
		wantNext(t, r, now, d)
		if got := o.rec.Interval(i + 1); got != d {
			t.Fatalf("Interval(%d) = %s, want %s", i+1, got, d)
		}
	}
	for range 50 - len(schedule) {
		r, now := o.checkAtNext(t)
		wantNext(t, r, now, 10*time.Second)
	}
	r := o.row(t)
	if r.CheckCount != 50 || r.Status != "UNKNOWN" {
		t.Fatalf("after 50 checks: %s with check_count %d", r.Status, r.CheckCount)
	}
	if n := count(t, o.ctx, o.pool, `SELECT count(*) FROM attempt_transition WHERE attempt_id = $1 AND cause = 'lookup'
		AND from_status = 'UNKNOWN' AND to_status = 'UNKNOWN'`, r.ID); n != 50 {
		t.Fatalf("%d lookups audited, want 50", n)
	}
	if e := escalations(t, o.ctx, o.pool); len(e) != 0 {
		t.Fatalf("escalations %+v; not-found alone escalates nothing (the deadline is the escalator's)", e)
	}
	if got := o.sim.Stats(); got.Lookups[simulator.CallKey{Provider: "sim-air", Kind: providers.LookupProviderReference, Status: 200}] != 50 {
		t.Fatalf("simulator lookups %v, want 50 answered provider_reference lookups", got.Lookups)
	}
}

// TestBackoffHonoursRetryAfter: a 429 with Retry-After 30 s (in seconds, or as an HTTP date
// rounded up to the next whole second) pushes next_check_at to at least now + 30 s, advances
// check_count, and the schedule then goes on from the advanced count (+4 s after the second
// check).
func TestBackoffHonoursRetryAfter(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		faults simulator.Faults
		max    time.Duration // the date form rounds up to a whole second
	}{
		{"seconds", simulator.Faults{RateLimitSeconds: 1, RetryAfter: 30 * time.Second}, 30 * time.Second},
		{"http-date", simulator.Faults{RateLimitDate: 1, RetryAfter: 30 * time.Second}, 31 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			o := setupOne(t, airSpec("bi_ra", 2), "read_timeout", "AIR-NOTHERE", simulator.Truth{})
			if err := o.sim.SetFaults(tc.faults); err != nil {
				t.Fatal(err)
			}
			r, now := o.checkAtNext(t)
			if r.CheckCount != 1 || r.LastLookup != "error" || r.NextCheck == nil ||
				r.NextCheck.Before(now.Add(30*time.Second)) || r.NextCheck.After(now.Add(tc.max)) {
				t.Fatalf("after the 429: check_count %d, last lookup %q, next_check_at %v; want 1, error, in [now+30s, now+%s]",
					r.CheckCount, r.LastLookup, r.NextCheck, tc.max)
			}
			calls := o.sim.Calls()
			if len(calls) != 1 || calls[0].Status != 429 || calls[0].RetryAfter < 30*time.Second {
				t.Fatalf("simulator calls %+v, want one 429 with Retry-After ≥ 30s", calls)
			}
			if err := o.sim.SetFaults(simulator.Faults{}); err != nil {
				t.Fatal(err)
			}
			r, now = o.checkAtNext(t) // checks that nothing was due before Retry-After ran out
			wantNext(t, r, now, 4*time.Second)
			if calls := o.sim.Calls(); len(calls) != 2 || calls[1].Time.Sub(calls[0].Time) < calls[0].RetryAfter {
				t.Fatalf("second call %v after the 429, which asked for %s", calls[1].Time.Sub(calls[0].Time), calls[0].RetryAfter)
			}
		})
	}
}

// TestBackoffAfterEscalationRunsAtMaxInterval: after an escalation other than
// no_lookup_capability, checks continue at MaxInterval (10 s) from the first one, where the plain
// schedule would have said 2, 4, 8 s. ambiguous_match is raised by the reconciler itself (two
// fingerprint matches, sc07's shape) and opened once however often it recurs;
// deadline_exceeded is raised by the escalator.
func TestBackoffAfterEscalationRunsAtMaxInterval(t *testing.T) {
	t.Parallel()
	t.Run("ambiguous_match", func(t *testing.T) {
		t.Parallel()
		spec := airSpec("bi_amb", 3)
		created := time.Now().Add(-time.Minute)
		truth := simulator.Truth{"sim-air": {
			record("AIR-AMB1", "", providers.StatusConfirmed, created, spec.Fingerprint()),
			record("AIR-AMB2", "", providers.StatusConfirmed, created.Add(time.Second), spec.Fingerprint()),
		}}
		o := setupOne(t, spec, "read_timeout", "", truth)
		for i := range 4 {
			r, now := o.checkAtNext(t)
			if r.LastLookup != "several" {
				t.Fatalf("check %d: last lookup %q, want several", i+1, r.LastLookup)
			}
			wantNext(t, r, now, 10*time.Second)
		}
		want := []escalation{{"t_backoff", spec.Key(), "ambiguous_match", "open"}}
		if got := escalations(t, o.ctx, o.pool); len(got) != 1 || got[0] != want[0] {
			t.Fatalf("escalations %+v, want %+v", got, want)
		}
		if n := count(t, o.ctx, o.pool, `SELECT count(*) FROM outbox WHERE topic = $1`, events.TopicEscalations); n != 1 {
			t.Fatalf("%d escalation.opened records, want 1", n)
		}
	})
	t.Run("deadline_exceeded", func(t *testing.T) {
		t.Parallel()
		o := setupOne(t, airSpec("bi_dl", 4), "read_timeout", "AIR-NOTHERE", simulator.Truth{})
		r, now := o.checkAtNext(t)
		wantNext(t, r, now, 2*time.Second)
		// The escalator's transaction: intent lock, re-read, escalate.
		if err := postgres.WithTx(o.ctx, o.pool, func(tx pgx.Tx) error {
			at := attempt.NewTx(tx, o.scfg)
			if err := at.LockIntent(o.ctx, o.spec.Tenant, o.spec.Intent); err != nil {
				return err
			}
			a, err := at.ByID(o.ctx, r.ID)
			if err != nil {
				return err
			}
			return at.Escalate(o.ctx, a, attempt.ReasonDeadlineExceeded, "")
		}); err != nil {
			t.Fatal(err)
		}
		for range 3 {
			r, now := o.checkAtNext(t)
			wantNext(t, r, now, 10*time.Second)
		}
	})
}
