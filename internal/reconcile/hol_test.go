package reconcile_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bookrecon/bookrecon/internal/harness/pgtest"
	"github.com/bookrecon/bookrecon/providers"
)

// holMap: two providers with their own lookup bounds; the fake provider answers every lookup.
const holMap = `providers:
  fake-a:
    lookups: [client_reference]
    maxInFlight: 3
  fake-b:
    lookups: [client_reference]
    maxInFlight: 2
`

// hangingProvider implements the provider port: the lookup of one client reference hangs until
// its context ends (the reconciler's CallTimeout); every other one finds the booking CONFIRMED.
// It counts the lookups in flight per provider and keeps the maximum; the first lookups at a
// provider wait until its cap is reached once (a rendezvous, so that the maximum is reached
// whatever the scheduling, and exceeded only if the reconciler lets more in).
type hangingProvider struct {
	hang    string
	caps    map[string]int
	hung    chan struct{} // closed when the hanging lookup has started
	hungEnd chan struct{} // closed when it has returned
	mu      sync.Mutex
	now     map[string]int
	max     map[string]int
	met     map[string]chan struct{} // closed when the provider's cap was first reached
	done    atomic.Int32             // answered lookups (the hanging one excluded)
}

func newHangingProvider(hang string, caps map[string]int) *hangingProvider {
	p := &hangingProvider{hang: hang, caps: caps, hung: make(chan struct{}), hungEnd: make(chan struct{}),
		now: map[string]int{}, max: map[string]int{}, met: map[string]chan struct{}{}}
	for name := range caps {
		p.met[name] = make(chan struct{})
	}
	return p
}

func (p *hangingProvider) Lookup(ctx context.Context, q providers.Query) ([]providers.Record, error) {
	p.mu.Lock()
	p.now[q.Provider]++
	p.max[q.Provider] = max(p.max[q.Provider], p.now[q.Provider])
	met := p.met[q.Provider]
	if p.now[q.Provider] == p.caps[q.Provider] {
		select {
		case <-met:
		default:
			close(met)
		}
	}
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.now[q.Provider]--
		p.mu.Unlock()
	}()
	if q.Value == p.hang {
		close(p.hung)
		defer close(p.hungEnd)
		<-ctx.Done() // hangs for the whole call timeout
		return nil, &providers.Error{Provider: q.Provider, Class: providers.ClassTimeout, Err: ctx.Err()}
	}
	select {
	case <-met:
	case <-ctx.Done():
		return nil, &providers.Error{Provider: q.Provider, Class: providers.ClassTimeout, Err: ctx.Err()}
	}
	p.done.Add(1)
	return []providers.Record{{ProviderReference: "REF-" + q.Value, ClientReference: q.Value,
		Status: providers.StatusConfirmed, CreatedAt: time.Now().Add(-time.Hour)}}, nil
}

func (p *hangingProvider) maxima() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return map[string]int{"fake-a": p.max["fake-a"], "fake-b": p.max["fake-b"]}
}

// TestHungLookupBlocksNothing: 50 due UNKNOWN attempts, 25 at fake-a (maxInFlight 3) and 25 at
// fake-b (maxInFlight 2), Batch 10, 8 workers; the lookup of the earliest due one (at fake-a)
// hangs for the whole CallTimeout. While that call is still blocked (the fake provider
// observes it), Run settles exactly the 49 others CONFIRMED, each looked up once; the hung one
// is UNKNOWN and claimed. Run is then stopped: it returns only after the hung call timed out and
// its check was written (UNKNOWN, one check, error; two-phase shutdown). Each attempt was
// claimed once; in-flight lookups per provider reached exactly 3 and 2, never more.
func TestHungLookupBlocksNothing(t *testing.T) {
	t.Parallel()
	const (
		perProvider = 25
		callTimeout = 10 * time.Second // the hung call's length; the test takes about as long
	)
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	m := parseMap(t, holMap)
	start := time.Now().UTC().Truncate(time.Millisecond)
	clk := newStepClock(start) // never moved: no lease expires
	insertDueUnknown(t, ctx, pool, "t_hol", "a", "fake-a", perProvider, start.Add(-time.Second))
	insertDueUnknown(t, ctx, pool, "t_hol", "b", "fake-b", perProvider, start.Add(-time.Second))
	// The hung one is due first, so it is in the first claim (and in the first batch of a
	// reconciler that waits for batches).
	if _, err := pool.Exec(ctx, `UPDATE booking_attempt SET next_check_at = $1 WHERE client_reference = 'cr_a_1'`, start.Add(-2*time.Second)); err != nil {
		t.Fatal(err)
	}
	prov := newHangingProvider("cr_a_1", map[string]int{"fake-a": 3, "fake-b": 2})
	cfg := demoConfig(m)
	cfg.CallTimeout, cfg.Batch, cfg.Workers, cfg.Poll = callTimeout, 10, 8, 20*time.Millisecond
	rec, reg := newReconciler(t, cfg, pool, prov, clk)
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	ran := make(chan error, 1)
	go func() { ran <- rec.Run(runCtx) }()

	settled := func() int {
		return count(t, ctx, pool, `SELECT count(*) FROM booking_attempt WHERE status = 'CONFIRMED'
			AND resolution_source = 'client_reference' AND provider_reference = 'REF-' || client_reference`)
	}
	select {
	case <-prov.hung:
	case <-time.After(time.Minute): // a hang guard, not timing logic
		t.Fatal("the hanging lookup never started")
	}
	// Wait for the 49 others or for the hung call's end, whichever comes first.
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for n := settled(); n < 2*perProvider-1; n = settled() {
		select {
		case <-prov.hungEnd:
			t.Fatalf("the hung lookup returned (after CallTimeout) with %d of the %d other attempts settled: they waited behind it",
				settled(), 2*perProvider-1)
		case <-tick.C:
		}
	}
	select {
	case <-prov.hungEnd:
		t.Fatal("the hung lookup returned before the others were seen settled")
	default: // still blocked: everything else was settled meanwhile
	}
	if n, answered := settled(), prov.done.Load(); n != 2*perProvider-1 || answered != 2*perProvider-1 {
		t.Fatalf("%d settled, %d lookups answered while the hung call is in flight; want %d and %d", n, answered, 2*perProvider-1, 2*perProvider-1)
	}
	hung := readRow(t, ctx, pool, "t_hol", "book:bi_a_1:v1")
	if hung.Status != "UNKNOWN" || hung.Token != 1 || hung.CheckCount != 0 || hung.LeaseOwner == "" {
		t.Fatalf("hung attempt %+v, want UNKNOWN, claimed once, not yet checked", hung)
	}
	if got := metricWith(t, reg, "bookrecon_provider_lookups_total", map[string]string{"result": "found"}); got != 2*perProvider-1 {
		t.Fatalf("%v lookups found counted, want %d", got, 2*perProvider-1)
	}

	// Shutdown while the hung call is in flight: Run stops claiming and waits for it (it ends at
	// CallTimeout, within ShutdownTimeout); its check is written like any provider timeout.
	stop()
	if err := <-ran; err != nil {
		t.Fatalf("Run = %v", err)
	}
	select {
	case <-prov.hungEnd:
	default:
		t.Fatal("Run returned while the hung check was in flight")
	}
	if r := readRow(t, ctx, pool, "t_hol", "book:bi_a_1:v1"); r.Status != "UNKNOWN" || r.CheckCount != 1 || r.LastLookup != "error" || r.LeaseOwner != "" {
		t.Fatalf("after the timeout: %+v, want UNKNOWN, one check, last lookup error, lease released", r)
	}
	if got := metric(t, reg, "bookrecon_reconcile_claimed_total"); got != 2*perProvider {
		t.Fatalf("%v claims, want %d: each attempt claimed once", got, 2*perProvider)
	}
	if got, want := prov.maxima(), map[string]int{"fake-a": 3, "fake-b": 2}; got["fake-a"] != want["fake-a"] || got["fake-b"] != want["fake-b"] {
		t.Fatalf("most lookups in flight at once %v, want exactly maxInFlight %v", got, want)
	}
	if got := metric(t, reg, "bookrecon_provider_lookups_in_flight"); got != 0 {
		t.Fatalf("%v lookups in flight after Run returned", got)
	}
}
