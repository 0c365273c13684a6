package reconcile_test

import (
	"context"
	"testing"
	"time"

	"github.com/bookrecon/bookrecon/internal/harness/pgtest"
	"github.com/bookrecon/bookrecon/providers/simulator"
)

// TestDatabaseClockFloor: a reconciler whose clock runs an hour ahead of the database sees an
// authoritative not-found whose consistency window has passed on its own clock but not on the
// database's: it must not record FAILED (skew may only delay a FAILED,
// docs/design.md#judging-an-answer). Once the window has passed on the database clock too, it does.
func TestDatabaseClockFloor(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	m := parseMap(t, `providers:
  sim-hotels:
    lookups: [client_reference]
    authoritativeNotFound: true
    consistencyWindow: 30s
`)
	scfg := storeConfig(m)
	spec := attemptSpec{Tenant: "t", Intent: "bi_skew", Provider: "sim-hotels", ClientRef: "cr_skew", Traveller: "tr", Stay: hotelStay(1)}
	now := time.Now().UTC()
	applyEvent(t, ctx, pool, scfg, spec.Started(now))
	applyEvent(t, ctx, pool, scfg, spec.Unknown(now, "read_timeout", ""))

	clk := newStepClock(now.Add(time.Hour)) // an hour ahead of the database
	sim := newSim(simulator.Truth{}, m, clk, 1, simulator.Faults{})
	cfg := demoConfig(m)
	cfg.DatabaseClockFloor = true
	rec, _ := newReconciler(t, cfg, pool, startSim(t, sim, clk), clk)

	drain(t, ctx, rec)
	if r := readRow(t, ctx, pool, "t", spec.Key()); r.Status != "UNKNOWN" || r.LastLookup != "not_found" || r.CheckCount != 1 {
		t.Fatalf("after a not-found inside the database-clock window: %s, last lookup %q, %d checks; want UNKNOWN, not_found, 1", r.Status, r.LastLookup, r.CheckCount)
	}
	// The window passes on the database clock too.
	if _, err := pool.Exec(ctx, `UPDATE booking_attempt SET window_start = now() - interval '31 seconds'`); err != nil {
		t.Fatal(err)
	}
	clk.Add(time.Minute)
	drain(t, ctx, rec)
	if r := readRow(t, ctx, pool, "t", spec.Key()); r.Status != "FAILED" || r.Source != "authoritative_not_found" {
		t.Fatalf("after the window passed on both clocks: %s/%s; want FAILED/authoritative_not_found", r.Status, r.Source)
	}
}
