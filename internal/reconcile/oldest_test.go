package reconcile_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bookrecon/bookrecon/internal/harness/pgtest"
)

// TestOldestUnknownAbsentUntilComputed: a reconciler started while its first round cannot read
// the attempts (a held lock) exports no bookrecon_unknown_oldest_age_seconds — never a false 0,
// which would resolve BookreconUnknownPastDeadline and page again — and exports the real age once
// the round has run.
func TestOldestUnknownAbsentUntilComputed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	m := mapPath(t)
	spec := attemptSpec{Tenant: "t_old", Intent: "bi_old", Provider: "sim-hotels", ClientRef: "cr_old", Traveller: "tr_old", Stay: hotelStay(42)}
	applyEvent(t, ctx, pool, storeConfig(m), spec.Started(time.Now().UTC()))
	applyEvent(t, ctx, pool, storeConfig(m), spec.Unknown(time.Now().UTC(), "read_timeout", ""))
	if _, err := pool.Exec(ctx, `UPDATE booking_attempt SET unknown_since = now() - interval '40 minutes', next_check_at = now() + interval '1 hour'`); err != nil {
		t.Fatal(err)
	}
	lock, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lock.Rollback(ctx) }()
	if _, err := lock.Exec(ctx, `LOCK TABLE booking_attempt IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	clk := newStepClock(time.Now())
	r, reg := newReconciler(t, demoConfig(m), pool, startSim(t, http.NotFoundHandler(), clk), clk)
	rctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { _ = r.Run(rctx) })
	defer func() { cancel(); wg.Wait() }()

	time.Sleep(time.Second) // the first round is blocked on the lock meanwhile
	if present(t, reg, "bookrecon_unknown_oldest_age_seconds") {
		t.Fatal("bookrecon_unknown_oldest_age_seconds exported before the first round computed it")
	}
	if err := lock.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for !present(t, reg, "bookrecon_unknown_oldest_age_seconds") {
		if time.Now().After(deadline) {
			t.Fatal("bookrecon_unknown_oldest_age_seconds still absent 30 s after the lock was released")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if age := metric(t, reg, "bookrecon_unknown_oldest_age_seconds"); age < 2390 || age > 2500 {
		t.Errorf("oldest UNKNOWN age = %v, want about 2400 s", age)
	}
}

func present(t *testing.T, g prometheus.Gatherer, name string) bool {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return true
		}
	}
	return false
}
