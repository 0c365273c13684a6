package reconcile_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/bookrecon/bookrecon/events"
	"github.com/bookrecon/bookrecon/internal/attempt"
	"github.com/bookrecon/bookrecon/internal/harness/pgtest"
	"github.com/bookrecon/bookrecon/internal/reconcile"
	"github.com/bookrecon/bookrecon/providers"
	"github.com/bookrecon/bookrecon/providers/simulator"
)

// TestStaleInProgressTurnsUnknownThenReconciled: an attempt IN_PROGRESS for longer than
// InProgressTimeout (60 s here, counted from created_at, when the pipeline recorded it) is
// turned UNKNOWN with timeout_class 'stale' and an audit row with cause timeout
// (stale_in_progress), then reconciled like any UNKNOWN: found CONFIRMED by client_reference.
// At exactly created_at + 60 s nothing happens yet. At a provider without lookups the same sweep
// opens no_lookup_capability in its own transaction and the attempt is never checked.
func TestStaleInProgressTurnsUnknownThenReconciled(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		spec     attemptSpec
		truth    simulator.Truth
		status   string // after the sweep and the check
		source   string
		ref      string
		escalate []string
	}{
		{
			name: "found by client_reference",
			spec: attemptSpec{Tenant: "t_stale", Intent: "bi_stale", Provider: "sim-hotels", ClientRef: "cr_stale", Traveller: "tr_stale", Stay: hotelStay(40)},
			truth: simulator.Truth{"sim-hotels": {
				record("HTL-STALE", "cr_stale", providers.StatusConfirmed, time.Now().Add(-time.Hour), ""),
			}},
			status: "CONFIRMED", source: "client_reference", ref: "HTL-STALE",
		},
		{
			name:     "no lookup capability",
			spec:     attemptSpec{Tenant: "t_stale", Intent: "bi_stale_legacy", Provider: "sim-legacy", ClientRef: "cr_sl", Traveller: "tr_sl", Stay: hotelStay(41)},
			truth:    simulator.Truth{},
			status:   "UNKNOWN",
			escalate: []string{"no_lookup_capability"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			pool := pgtest.NewPool(t)
			m := mapPath(t)
			scfg := storeConfig(m)
			applyEvent(t, ctx, pool, scfg, tc.spec.Started(time.Now().UTC()))
			before := readRow(t, ctx, pool, tc.spec.Tenant, tc.spec.Key())
			if before.Status != "IN_PROGRESS" {
				t.Fatalf("after the start: %s", before.Status)
			}
			clk := newStepClock(before.CreatedAt.Add(60 * time.Second))
			sim := newSim(tc.truth, m, clk, 1, simulator.Faults{})
			cfg := demoConfig(m)
			cfg.InProgressTimeout = 60 * time.Second
			rec, reg := newReconciler(t, cfg, pool, startSim(t, sim, clk), clk)
			var seen *row
			var seenErr error
			reconcile.SetBeforeWrite(rec, func(ctx context.Context, a *attempt.Row) {
				// The state the sweep committed, before the check writes its verdict.
				r := row{}
				seenErr = pool.QueryRow(ctx, `SELECT status, coalesce(timeout_class, '') FROM booking_attempt WHERE id = $1`, a.ID).
					Scan(&r.Status, &r.TimeoutClass)
				seen = &r
			})

			if n, err := rec.RunOnce(ctx); err != nil || n != 0 {
				t.Fatalf("at created_at + 60s: RunOnce = %d, %v; want nothing", n, err)
			}
			if r := readRow(t, ctx, pool, tc.spec.Tenant, tc.spec.Key()); r.Status != "IN_PROGRESS" {
				t.Fatalf("at created_at + 60s: %s, want IN_PROGRESS", r.Status)
			}
			clk.Add(time.Millisecond)
			if n, err := rec.RunOnce(ctx); err != nil || n != 1 {
				t.Fatalf("past the timeout: RunOnce = %d, %v; want the swept attempt checked", n, err)
			}
			if seenErr != nil || seen == nil || seen.Status != "UNKNOWN" || seen.TimeoutClass != "stale" {
				t.Fatalf("before the verdict: %+v (%v), want UNKNOWN with timeout_class stale", seen, seenErr)
			}
			r := readRow(t, ctx, pool, tc.spec.Tenant, tc.spec.Key())
			if r.Status != tc.status || r.Source != tc.source || r.Ref != tc.ref || r.TimeoutClass != "stale" {
				t.Fatalf("after the check: %s/%s/%q class %q, want %s/%s/%q class stale", r.Status, r.Source, r.Ref,
					r.TimeoutClass, tc.status, tc.source, tc.ref)
			}
			tr := transitions(t, ctx, pool, r.ID)
			if len(tr) < 2 || tr[0].To != "IN_PROGRESS" || tr[1].From != "IN_PROGRESS" || tr[1].To != "UNKNOWN" ||
				tr[1].Cause != "timeout" || tr[1].Note != "stale_in_progress" {
				t.Fatalf("transitions %+v: want the start, then IN_PROGRESS → UNKNOWN by timeout (stale_in_progress)", tr)
			}
			if got := metricWith(t, reg, "bookrecon_unknown_created_total", map[string]string{"timeout_class": "stale"}); got != 1 {
				t.Fatalf("unknown_created{stale} = %v, want 1", got)
			}
			var reasons []string
			for _, e := range escalations(t, ctx, pool) {
				reasons = append(reasons, e.Reason)
			}
			if !slices.Equal(reasons, tc.escalate) {
				t.Fatalf("escalations %v, want %v", reasons, tc.escalate)
			}
			res := resolutions(t, ctx, pool)
			if tc.status == "UNKNOWN" {
				// No lookup can ever apply: no further checks, one escalation.opened.
				if len(res) != 0 || r.NextCheck != nil || len(tr) != 2 {
					t.Fatalf("resolutions %d, next check %v, transitions %+v; want none, none, 2", len(res), r.NextCheck, tr)
				}
				if n := count(t, ctx, pool, `SELECT count(*) FROM outbox WHERE topic = $1`, events.TopicEscalations); n != 1 {
					t.Fatalf("%d escalation records, want 1", n)
				}
				clk.Add(time.Hour)
				if n, err := rec.RunOnce(ctx); err != nil || n != 0 {
					t.Fatalf("an hour later: RunOnce = %d, %v; want no check", n, err)
				}
				return
			}
			if len(tr) != 3 || tr[2].From != "UNKNOWN" || tr[2].To != tc.status || tr[2].Cause != "lookup" {
				t.Fatalf("transitions %+v: want the lookup's verdict third", tr)
			}
			if len(res) != 1 || res[0].Status != tc.status || res[0].ResolutionSource != tc.source {
				t.Fatalf("resolutions %+v", res)
			}
		})
	}
}
