package reconcile_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/bookrecon/bookrecon/internal/attempt"
	"github.com/bookrecon/bookrecon/internal/harness/pgtest"
	"github.com/bookrecon/bookrecon/internal/postgres"
	"github.com/bookrecon/bookrecon/internal/reconcile"
	"github.com/bookrecon/bookrecon/providers"
	"github.com/bookrecon/bookrecon/providers/simulator"
)

// fastHotelsMap is sim-hotels without a binding rate limit: the race test is about leases, not
// 429s.
const fastHotelsMap = `providers:
  sim-hotels:
    lookups: [provider_reference, client_reference]
    authoritativeNotFound: true
    rateLimit: {rps: 1000000, burst: 1000000}
`

// insertDueUnknown bulk-inserts n UNKNOWN BOOK attempts of tenant at provider, intents
// bi_<prefix>_1 … n with client references cr_<prefix>_i, all due at due (and their intents).
func insertDueUnknown(t testing.TB, ctx context.Context, pool *pgxpool.Pool, tenant, prefix, provider string, n int, due time.Time) {
	t.Helper()
	if _, err := pool.Exec(ctx, `INSERT INTO booking_intent (tenant_id, booking_intent_id)
		SELECT $1, 'bi_' || $2 || '_' || g FROM generate_series(1, $3::int) g`, tenant, prefix, n); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO booking_attempt (id, tenant_id, booking_intent_id, operation, subject,
			operation_version, idempotency_key, provider, status, client_reference, timeout_class, first_event_at,
			window_start, unknown_since, next_check_at)
		SELECT gen_random_uuid(), $1, 'bi_' || $2 || '_' || g, 'BOOK', 'bi_' || $2 || '_' || g, 1,
			'book:bi_' || $2 || '_' || g || ':v1', $4, 'UNKNOWN', 'cr_' || $2 || '_' || g, 'read_timeout', $5, $5, $5, $5
		FROM generate_series(1, $3::int) g`, tenant, prefix, n, provider, due); err != nil {
		t.Fatal(err)
	}
}

type claimPause struct {
	owner   string
	id      uuid.UUID
	token   int64
	release chan struct{}
}

// TestRaceFourReconcilersWithLostLeases: four reconcilers (separate instances, pools and
// owners) settle 5,000 due UNKNOWN attempts whose bookings exist (CONFIRMED by
// client_reference). Reconcilers 0 and 1 are paused in BeforeWrite (after the provider
// answered, before the fenced write) on the first three and two attempts they claim; for each,
// the test moves the shared clock past that lease, lets another reconciler re-claim and settle
// the attempt, then releases the paused one, whose verdict the fencing token must drop. Every
// lease of an in-flight check expires at those clock moves too, so more takeovers happen on
// their own.
//
// Asserted: exactly 5,000 CONFIRMED; exactly 5,000 attempt_transition rows UNKNOWN → CONFIRMED,
// one per attempt; every other row is a fenced-out verdict's audit row (cause lookup, from = to,
// a lease-lost note: the verdict is kept, never applied), exactly one per lost lease counted,
// and each paused attempt has its paused verdict's CONFIRMED → CONFIRMED row; exactly one
// attempt.resolved per attempt; lease_lost > 0 (≥ 3 at reconciler 0, ≥ 2 at reconciler 1);
// resolutions counted exactly 5,000 across the four; no escalation, no anomaly (every lookup
// agrees); zero provider create calls.
func TestRaceFourReconcilersWithLostLeases(t *testing.T) {
	t.Parallel()
	const (
		n        = 5000
		paused   = 5 // 3 at reconciler 0, 2 at reconciler 1
		tenant   = "t_race"
		callTime = 5 * time.Second // lease = 10 s on the test clock
	)
	ctx := context.Background()
	url := pgtest.NewURL(t)
	admin, err := postgres.Open(ctx, url, 4)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	m := parseMap(t, fastHotelsMap)
	start := time.Now().UTC().Truncate(time.Millisecond)
	clk := newStepClock(start)
	insertDueUnknown(t, ctx, admin, tenant, "race", "sim-hotels", n, start.Add(-time.Second))
	recs := make([]providers.Record, 0, n)
	for i := 1; i <= n; i++ {
		recs = append(recs, record(fmt.Sprintf("HTL-R-%d", i), fmt.Sprintf("cr_race_%d", i), providers.StatusConfirmed, start.Add(-time.Hour), ""))
	}
	sim := newSim(simulator.Truth{"sim-hotels": recs}, m, clk, 1, simulator.Faults{})
	prov := startSim(t, sim, clk)

	rs := make([]*reconcile.Reconciler, 4)
	regs := make([]*prometheus.Registry, 4)
	for i := range rs {
		pool, err := postgres.Open(ctx, url, 8)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		cfg := demoConfig(m)
		cfg.Owner, cfg.CallTimeout, cfg.Batch, cfg.Workers = fmt.Sprintf("rec-%d", i), callTime, 50, 4
		rs[i], regs[i] = newReconciler(t, cfg, pool, prov, clk)
	}
	pausedCh := make(chan claimPause)
	pauseBudget := map[int]int{0: 3, 1: 2} // reconciler → attempts to pause on
	for i, budget := range pauseBudget {
		var pauses atomic.Int32
		owner := fmt.Sprintf("rec-%d", i)
		reconcile.SetBeforeWrite(rs[i], func(_ context.Context, a *attempt.Row) {
			// Only first claims (token 1): a re-claim of somebody else's paused attempt must go
			// through, or the test would wait on itself.
			if a.Token != 1 || pauses.Add(1) > int32(budget) {
				return
			}
			p := claimPause{owner: owner, id: a.ID, token: a.Token, release: make(chan struct{})}
			pausedCh <- p
			<-p.release
		})
	}
	var (
		wg     sync.WaitGroup
		errMu  sync.Mutex
		errs   []error
		done   = make(chan struct{})
		stop   = sync.OnceFunc(func() { close(done) })
		failed = func(err error) { errMu.Lock(); errs = append(errs, err); errMu.Unlock() }
	)
	t.Cleanup(stop) // on a failed assertion too, before the pools close
	// A free-running reconciler: RunOnce while there is work, then wait for the clock to move
	// (nothing else makes an attempt due) or for the end.
	loop := func(r *reconcile.Reconciler) {
		defer wg.Done()
		for {
			moved := clk.Changed()
			k, err := r.RunOnce(ctx)
			if err != nil {
				failed(err)
				return
			}
			if k > 0 {
				continue
			}
			select {
			case <-done:
				return
			case <-moved:
			}
		}
	}
	state := func(id uuid.UUID) (status, owner string, token int64, expires *time.Time) {
		if err := admin.QueryRow(ctx, `SELECT status, coalesce(lease_owner, ''), lease_token, lease_expires_at
			FROM booking_attempt WHERE id = $1`, id).Scan(&status, &owner, &token, &expires); err != nil {
			t.Fatal(err)
		}
		return
	}
	next := func() claimPause {
		select {
		case p := <-pausedCh:
			return p
		case <-time.After(2 * time.Minute): // a hang guard, not timing logic
			t.Fatal("no reconciler paused")
			return claimPause{}
		}
	}

	// Reconciler 0 claims first, so its pauses come from its first batch; the others start
	// once it holds the first paused attempt. Pauses are handled in the order they come.
	wg.Add(3)
	go loop(rs[0])
	pending := []claimPause{next()}
	go loop(rs[1])
	go loop(rs[2])
	var held []claimPause
	for len(held) < paused {
		if len(pending) == 0 {
			pending = append(pending, next())
		}
		p := pending[0]
		pending = pending[1:]
		held = append(held, p)
		status, owner, token, expires := state(p.id)
		if len(held) == 1 && (status != "UNKNOWN" || owner != p.owner || token != p.token || expires == nil) {
			// Nobody can have taken it: the clock has not moved, so the lease still runs.
			t.Fatalf("first paused attempt: %s, owner %q, token %d (claimed %d by %s)", status, owner, token, p.token, p.owner)
		}
		if status == "UNKNOWN" && owner == p.owner && token == p.token {
			clk.Set(expires.Add(time.Millisecond)) // the paused reconciler's lease has expired
		}
		// Reconciler 3 (driven here) and the free-running ones re-claim it; wait until one of
		// them has settled it, then let the paused one try to write its stale verdict.
		for spins := 0; ; spins++ {
			if status, _, _, _ := state(p.id); status == "CONFIRMED" {
				break
			}
			if spins > 100_000 {
				t.Fatalf("paused attempt %s never settled by another reconciler", p.id)
			}
			if k, err := rs[3].RunOnce(ctx); err != nil {
				t.Fatal(err)
			} else if k == 0 {
				select { // a pause that arrives meanwhile is taken now, handled next
				case q := <-pausedCh:
					pending = append(pending, q)
				default:
					runtime.Gosched()
				}
			}
		}
		close(p.release)
	}
	// Finish: reconciler 3 keeps working until nothing is UNKNOWN; a check that failed (none
	// should) would wait for its backoff, so the clock follows the earliest one.
	for spins := 0; count(t, ctx, admin, `SELECT count(*) FROM booking_attempt WHERE status = 'UNKNOWN'`) > 0; spins++ {
		if spins > 100_000 {
			t.Fatal("attempts left UNKNOWN")
		}
		k, err := rs[3].RunOnce(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if k > 0 {
			continue
		}
		var wait *time.Time
		if err := admin.QueryRow(ctx, `SELECT min(next_check_at) FROM booking_attempt
			WHERE status = 'UNKNOWN' AND lease_expires_at IS NULL`).Scan(&wait); err != nil {
			t.Fatal(err)
		}
		if wait != nil {
			clk.Set(*wait)
		}
		runtime.Gosched()
	}
	stop()
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("reconciler errors: %v", errs)
	}

	if got := count(t, ctx, admin, `SELECT count(*) FROM booking_attempt WHERE status = 'CONFIRMED'
		AND resolution_source = 'client_reference' AND provider_reference = replace(client_reference, 'cr_race_', 'HTL-R-')`); got != n {
		t.Errorf("%d attempts CONFIRMED with their own reference, want %d", got, n)
	}
	var confirmed, distinct, late, all int
	if err := admin.QueryRow(ctx, `SELECT count(*) FILTER (WHERE from_status = 'UNKNOWN' AND to_status = 'CONFIRMED'),
		count(DISTINCT attempt_id) FILTER (WHERE from_status = 'UNKNOWN' AND to_status = 'CONFIRMED'),
		count(*) FILTER (WHERE cause = 'lookup' AND from_status = to_status AND to_status IN ('CONFIRMED', 'UNKNOWN')
			AND note IN ('late lookup after CONFIRMED; lease lost', 'late lookup; lease lost, not applied')),
		count(*) FROM attempt_transition`).Scan(&confirmed, &distinct, &late, &all); err != nil {
		t.Fatal(err)
	}
	if confirmed != n || distinct != n || all != n+late {
		t.Errorf("attempt_transition: %d rows UNKNOWN → CONFIRMED for %d attempts, %d late lookups, %d rows in all; want %d, %d, and no other row",
			confirmed, distinct, late, all, n, n)
	}
	for _, p := range held {
		if k := count(t, ctx, admin, `SELECT count(*) FROM attempt_transition WHERE attempt_id = $1 AND cause = 'lookup'
			AND from_status = 'CONFIRMED' AND to_status = 'CONFIRMED' AND note = 'late lookup after CONFIRMED; lease lost'`, p.id); k < 1 {
			t.Errorf("paused attempt %s: no late-lookup row for the paused verdict", p.id)
		}
	}
	res := resolutions(t, ctx, admin)
	keys := map[string]int{}
	for _, r := range res {
		keys[r.IdempotencyKey]++
		if r.Status != "CONFIRMED" || r.ResolutionSource != "client_reference" {
			t.Fatalf("resolution %+v", r)
		}
	}
	if len(res) != n || len(keys) != n {
		t.Errorf("%d attempt.resolved records for %d attempts, want exactly one per attempt (%d)", len(res), len(keys), n)
	}
	if got := count(t, ctx, admin, `SELECT count(*) FROM escalation`) + count(t, ctx, admin, `SELECT count(*) FROM anomaly`); got != 0 {
		t.Errorf("%d escalations and anomalies, want none", got)
	}
	for _, p := range held {
		status, _, token, _ := state(p.id)
		if status != "CONFIRMED" || token <= p.token {
			t.Errorf("paused attempt %s: %s with token %d; want CONFIRMED by a later claim than %d", p.id, status, token, p.token)
		}
	}
	var lost, resolved, contradictions, lookups float64
	for _, reg := range regs {
		lost += metric(t, reg, "bookrecon_lease_lost_total")
		resolved += metric(t, reg, "bookrecon_resolutions_total")
		contradictions += metric(t, reg, "bookrecon_contradictions_total")
		lookups += metric(t, reg, "bookrecon_provider_lookups_total")
	}
	for i, budget := range pauseBudget {
		if li := metric(t, regs[i], "bookrecon_lease_lost_total"); li < float64(budget) {
			t.Errorf("lease lost %v times at paused reconciler %d, want ≥ %d", li, i, budget)
		}
	}
	if lost < paused || int(lost) != late {
		t.Errorf("lease lost %v times in all, %d late lookups audited; want ≥ %d, one row each", lost, late, paused)
	}
	if resolved != n || contradictions != 0 {
		t.Errorf("resolutions counted %v, contradictions %v; want %d, 0", resolved, contradictions, n)
	}
	st := sim.Stats()
	if len(st.Creates) != 0 {
		t.Errorf("provider create calls: %v", st.Creates)
	}
	answered := st.Lookups[simulator.CallKey{Provider: "sim-hotels", Kind: providers.LookupClientReference, Status: 200}]
	if answered != int(lookups) || answered < n+paused {
		t.Errorf("simulator answered %d lookups, reconcilers counted %v; want equal and ≥ %d", answered, lookups, n+paused)
	}
	t.Logf("%d attempts, %d lookups, %v leases lost (%v and %v at the paused reconcilers)", n, answered, lost,
		metric(t, regs[0], "bookrecon_lease_lost_total"), metric(t, regs[1], "bookrecon_lease_lost_total"))
}
