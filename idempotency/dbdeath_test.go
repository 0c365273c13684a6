package idempotency

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/bookrecon/bookrecon/internal/harness/pgtest"
)

// TestPostgresGoesAway: what a booking service gets when PostgreSQL goes away mid-request
// (doc.go "When Redis or PostgreSQL goes away mid-request"), on a cluster of the test's own
// stopped with -m immediate (a crash).
func TestPostgresGoesAway(t *testing.T) {
	if testing.Short() {
		t.Skip("stops a PostgreSQL cluster of its own")
	}
	t.Parallel()
	pg := pgtest.OwnCluster(t)
	restart := func(t *testing.T, f *fixture) {
		t.Helper()
		if err := pg.Start(); err != nil {
			t.Fatal(err)
		}
		f.pool.Reset() // drop the connections the crash broke
	}
	stop := func(t *testing.T) {
		t.Helper()
		if err := pg.Stop(true); err != nil {
			t.Fatal(err)
		}
	}
	// Sequential: the scenarios share the cluster, each in a database of its own.
	t.Run("before the claim: 503, nothing kept, the retry runs", func(t *testing.T) {
		f := setupOn(t, pg.NewDatabase(t))
		srv := serve(t, f.guard(Config{}).Transactional(routeTx, f.txCreate(nil)))
		stop(t)
		got := f.do(srv, req{Key: "k1", Body: `{}`})
		wantProblem(t, got, http.StatusServiceUnavailable, CodeUnavailable)
		if got.Header.Get("Retry-After") != "1" || f.execs.Load() != 0 {
			t.Fatalf("Retry-After %q execs %d, want 1 0", got.Header.Get("Retry-After"), f.execs.Load())
		}
		restart(t, f)
		wantCreated(t, f.do(srv, req{Key: "k1", Body: `{}`}), 1)
		if f.execs.Load() != 1 || f.effects() != 1 {
			t.Fatalf("execs %d effects %d, want 1 1", f.execs.Load(), f.effects())
		}
	})
	t.Run("transactional, during the handler: effect and claim roll back together, 503, the retry runs", func(t *testing.T) {
		f := setupOn(t, pg.NewDatabase(t))
		h := newHold()
		g := f.guard(Config{})
		first := true
		srv := serve(t, g.Transactional(routeTx, func(w http.ResponseWriter, r *http.Request, tx pgx.Tx) {
			if first {
				first = false
				f.holdTx(h, nil)(w, r, tx) // writes, waits while the server dies, answers 201
				return
			}
			f.holdTx(nil, nil)(w, r, tx)
		}))
		answer := make(chan resp)
		go func() { answer <- f.do(srv, req{Key: "k1", Body: `{}`}) }()
		<-h.entered
		stop(t)
		close(h.release)
		wantProblem(t, <-answer, http.StatusServiceUnavailable, CodeUnavailable)
		restart(t, f)
		got := f.do(srv, req{Key: "k1", Body: `{}`})
		if got.Status != http.StatusCreated || got.Header.Get(HeaderReplayed) != "" {
			t.Fatalf("retry: %d replayed %q, want a first 201", got.Status, got.Header.Get(HeaderReplayed))
		}
		if f.execs.Load() != 2 || f.effects() != 1 || f.records() != 1 {
			t.Fatalf("execs %d effects %d records %d, want 2 1 1 (the first rolled back)", f.execs.Load(), f.effects(), f.records())
		}
	})
	t.Run("two-phase, after the external call: the answer given, not stored; retries 409, never a second call", func(t *testing.T) {
		f := setupOn(t, pg.NewDatabase(t))
		h := newHold()
		srv := serve(t, f.guard(Config{RequestTimeout: 5 * time.Second, LeaseMargin: time.Second}).TwoPhase(route2, f.twoPhase(h, nil)))
		answer := make(chan resp)
		go func() { answer <- f.do(srv, req{Key: "k1", Body: `{}`}) }()
		<-h.entered
		stop(t)
		close(h.release)
		wantCreated(t, <-answer, 1) // the provider call happened: its answer is given
		restart(t, f)
		wantProblem(t, f.do(srv, req{Key: "k1", Body: `{}`}), http.StatusConflict, CodeInProgress)
		f.clock.Advance(6 * time.Second)
		wantProblem(t, f.do(srv, req{Key: "k1", Body: `{}`}), http.StatusConflict, CodeOutcomeUnknown)
		if f.execs.Load() != 1 {
			t.Fatalf("execs %d, want 1", f.execs.Load())
		}
		var state string
		if err := f.pool.QueryRow(context.Background(), "SELECT state FROM idempotency_key").Scan(&state); err != nil || state != "in_flight" {
			t.Fatalf("record %q %v, want in_flight", state, err)
		}
	})
}
