// Package reconcile is the reconciler: it claims due UNKNOWN attempts in one statement
// (FOR UPDATE SKIP LOCKED, lease owner + expiry + fencing token), commits the claim, asks the
// provider outside any transaction, and writes the verdict or the next check time in a
// transaction fenced by the lease token (docs/design.md#reconciliation). It also turns attempts
// stuck IN_PROGRESS past inProgressTimeout UNKNOWN (stale_in_progress).
//
// Giving up is never an outcome: an attempt the provider cannot settle stays UNKNOWN, checked
// on an exponential backoff (github.com/cenkalti/backoff/v4) persisted in the row, until an
// event, a lookup or a person settles it; the escalator hands it to people at its deadline.
package reconcile

import (
	"cmp"
	"context"
	"embed"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/bookrecon/bookrecon/events"
	"github.com/bookrecon/bookrecon/internal/attempt"
	"github.com/bookrecon/bookrecon/internal/postgres"
	"github.com/bookrecon/bookrecon/internal/relay"
	"github.com/bookrecon/bookrecon/internal/service"
	"github.com/bookrecon/bookrecon/providers"
)

//go:embed sql/*.sql
var sqlFiles embed.FS

// statements are the reconciler's reads (sql/*.sql); internal/attempt writes.
var statements = postgres.MustLoadStatements(sqlFiles, "sql/*.sql")

// Config configures a reconciler. Zero values take the documented defaults. Run reads Infra
// (Brokers and DatabaseURL required; AdminAddr default 127.0.0.1:9102, MaxDBConns default
// service.DefaultRunConns) and the provider port; New reads the rest.
type Config struct {
	service.Infra
	// ProviderURL is the base URL of the providers' lookup API Run checks at (required unless
	// Provider is set).
	ProviderURL string
	// Provider, when set, is the provider port Run checks with instead of an HTTP client of
	// ProviderURL.
	Provider providers.Provider
	// Owner names this instance in lease_owner (default a random UUID).
	Owner string
	// Providers is the capability map (required).
	Providers *providers.Map
	// Poll is the pause before claiming again when nothing was due, and the period of the stale
	// sweep and of the oldest-UNKNOWN gauge (default 250ms).
	Poll time.Duration
	// Batch is the most attempts claimed by one statement (default 100); Run never claims more
	// than its free workers.
	Batch int
	// Workers is how many checks run at once (default 8). At one provider at most its
	// capability map's maxInFlight lookups run at once.
	Workers int
	// CallTimeout bounds one provider call (default 5s); the lease lasts twice as long.
	CallTimeout time.Duration
	// ShutdownTimeout bounds phase two of Run's shutdown: once ctx ends, the checks in flight get
	// this long to finish, then their context is cancelled (default 2 × CallTimeout, the lease).
	ShutdownTimeout time.Duration
	// InitialInterval, Multiplier, MaxInterval, RandomizationFactor shape the backoff between
	// checks: interval(n) = min(Initial × Multiplier^n, Max) with jitter (defaults 1s, 2, 10m, 0.2).
	InitialInterval     time.Duration
	Multiplier          float64
	MaxInterval         time.Duration
	RandomizationFactor float64
	// NoJitter sets RandomizationFactor to 0 (the demo's settings).
	NoJitter bool
	// InProgressTimeout turns older IN_PROGRESS attempts UNKNOWN (default 15m).
	InProgressTimeout time.Duration
	// FirstCheck is the delay from turning UNKNOWN to the first check (default 1s).
	FirstCheck time.Duration
	// Store is the attempt store's configuration (topics, policies); built from Providers when
	// its Policies are nil.
	Store attempt.Config
	// DatabaseClockFloor re-checks an authoritative not-found's window on the database clock
	// before recording FAILED, so a reconciler clock running ahead cannot hasten it. Always on
	// with the system clock (New's now == nil); tests that drive time by hand may set it.
	DatabaseClockFloor bool
}

func (c Config) withDefaults() Config {
	c.Owner = cmp.Or(c.Owner, uuid.NewString())
	c.Poll = cmp.Or(c.Poll, 250*time.Millisecond)
	c.Batch = cmp.Or(c.Batch, 100)
	c.Workers = cmp.Or(c.Workers, 8)
	c.CallTimeout = cmp.Or(c.CallTimeout, 5*time.Second)
	c.ShutdownTimeout = cmp.Or(c.ShutdownTimeout, 2*c.CallTimeout)
	c.InitialInterval = cmp.Or(c.InitialInterval, time.Second)
	c.Multiplier = cmp.Or(c.Multiplier, 2)
	c.MaxInterval = cmp.Or(c.MaxInterval, 10*time.Minute)
	c.RandomizationFactor = cmp.Or(c.RandomizationFactor, 0.2)
	if c.NoJitter {
		c.RandomizationFactor = 0
	}
	c.InProgressTimeout = cmp.Or(c.InProgressTimeout, 15*time.Minute)
	c.FirstCheck = cmp.Or(c.FirstCheck, time.Second)
	if c.Store.Policies == nil && c.Providers != nil {
		c.Store.Policies = attempt.PoliciesFrom(c.Providers)
	}
	c.Store.FirstCheck = c.FirstCheck
	return c
}

// Deps are the reconciler's injected dependencies, those of every service.
type Deps = service.Deps

// spec is how service.Run runs the reconciler: one loop beside the relay of the resolutions and
// escalations topics.
func (c Config) spec() service.Spec {
	return service.LoopSpec("reconciler", c.Infra, "127.0.0.1:9102", relay.ForService(c.Brokers,
		[]string{cmp.Or(c.Store.ResolutionsTopic, events.TopicResolutions), cmp.Or(c.Store.EscalationsTopic, events.TopicEscalations)}))
}

// PoolConfig is the pool Run opens for c; Run refuses to start when its Validate fails.
func (c Config) PoolConfig() service.PoolConfig { return c.spec().PoolConfig() }

// errNoProviders: Config.Providers is required.
var errNoProviders = errors.New("reconcile: Providers (capability map) is required")

// Run runs the reconciler service until ctx ends: service.Run opens and migrates the pool and
// starts the admin server and the outbox relay around New(cfg, …).Run, which checks at
// cfg.Provider, or over HTTP at cfg.ProviderURL; shutdown is Reconciler.Run's, then
// service.Run's. A missing Providers or provider port is an error at once.
func Run(ctx context.Context, cfg Config, deps Deps) error {
	p := cfg.Provider
	switch {
	case cfg.Providers == nil:
		return errNoProviders
	case p == nil && cfg.ProviderURL == "":
		return errors.New("reconcile: ProviderURL (or Provider) is required")
	case p == nil:
		p = providers.NewHTTP(cfg.ProviderURL, &http.Client{})
	}
	return service.RunLoop(ctx, cfg.spec(), deps, func(ctx context.Context, rt *service.Runtime) error {
		r, err := New(cfg, rt.Pool, p, rt.Logger, rt.Registry, nil)
		if err != nil {
			return err
		}
		return r.Run(ctx)
	})
}

// Clock is the reconciler's time source; tests inject one.
type Clock func() time.Time

// Reconciler settles UNKNOWN attempts. Create it with New; Run it, or call RunOnce.
type Reconciler struct {
	cfg      Config
	pool     *pgxpool.Pool
	provider providers.Provider
	log      *slog.Logger
	now      Clock
	metrics  *Metrics
	slots    *slots
	// dbClockFloor: see Config.DatabaseClockFloor.
	dbClockFloor bool
	testSignals  testSignals
}

// testSignals are the points where tests pause a reconciler, in the style of river's
// clientTestSignals: unexported, never set in production, set by the package's tests through
// export_test.go; a nil field is no signal.
type testSignals struct {
	// beforeWrite runs after the provider answered and before the fenced write (tests pause a
	// reconciler here past its lease).
	beforeWrite func(ctx context.Context, a *attempt.Row)
}

// New returns a reconciler. reg may be nil (metrics not registered); now may be nil (time.Now).
func New(cfg Config, pool *pgxpool.Pool, p providers.Provider, log *slog.Logger, reg prometheus.Registerer, now Clock) (*Reconciler, error) {
	cfg = cfg.withDefaults()
	if cfg.Providers == nil {
		return nil, errNoProviders
	}
	floor := cfg.DatabaseClockFloor
	if now == nil {
		now, floor = time.Now, true
	}
	if log == nil {
		log = slog.Default()
	}
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	metrics := NewMetrics(reg, cfg.Providers)
	return &Reconciler{cfg: cfg, pool: pool, provider: p, log: log, now: now, metrics: metrics,
		slots: newSlots(cfg.Workers, cfg.Providers, metrics), dbClockFloor: floor}, nil
}

// Run reconciles until ctx ends. Checks flow independently: the claim loop claims due
// attempts whenever a worker is free — never more than the free workers, never more for a
// provider than its free lookup slots (maxInFlight) — and each check runs on its own, so a hung
// lookup holds only its own slots, until CallTimeout. The stale sweep and the oldest-UNKNOWN
// gauge run every Poll. Shutdown is two-phase: when ctx ends Run stops claiming, then waits for
// the checks in flight, at most ShutdownTimeout (then they are cancelled; their leases make the
// attempts due again).
func (r *Reconciler) Run(ctx context.Context) error {
	work, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWork()
	var wg sync.WaitGroup
	r.claimLoop(ctx, work, &wg)
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(r.cfg.ShutdownTimeout):
		r.log.Warn("checks still in flight at the shutdown bound; cancelled", "shutdown_timeout", r.cfg.ShutdownTimeout.String())
		cancelWork()
		<-done
	}
	return nil
}

// claimLoop claims and starts checks on work until ctx ends.
func (r *Reconciler) claimLoop(ctx, work context.Context, wg *sync.WaitGroup) {
	var swept time.Time
	for ctx.Err() == nil {
		if time.Since(swept) >= r.cfg.Poll {
			swept = time.Now()
			if err := r.housekeeping(ctx); err != nil && ctx.Err() == nil {
				r.log.Warn("stale sweep or oldest-UNKNOWN gauge failed; retrying", "err", err)
			}
		}
		r.slots.drainFreed()
		free := r.slots.freeWorkers()
		if free == 0 {
			r.wait(ctx, true) // every worker busy: until one is free
			continue
		}
		lim := r.slots.limits()
		n := min(free, r.cfg.Batch)
		claimed, err := r.claim(ctx, n, lim)
		if err != nil {
			if ctx.Err() == nil {
				r.log.Warn("claim failed; retrying", "err", err)
			}
			r.wait(ctx, false)
			continue
		}
		for _, c := range claimed {
			r.slots.take(c.Row.Provider)
			wg.Go(func() {
				defer r.slots.give(c.Row.Provider)
				if err := r.check(work, c); err != nil && work.Err() == nil {
					r.log.Warn("check failed; due again when its lease expires", "attempt_id", c.Row.ID, "err", err)
				}
			})
		}
		switch {
		case len(claimed) == n || lim.filled(claimed):
			// More may be due: claim again at once (for the other providers when one filled up).
		case len(lim.full) > 0:
			r.wait(ctx, true) // a full provider's due attempts wait for one of its slots
		default:
			r.wait(ctx, false) // nothing more is due
		}
	}
}

// wait pauses the claim loop for Poll, until ctx ends, or — when onFree — until a check
// finishes.
func (r *Reconciler) wait(ctx context.Context, onFree bool) {
	var freed <-chan struct{}
	if onFree {
		freed = r.slots.freed
	}
	t := time.NewTimer(r.cfg.Poll)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	case <-freed:
	}
}

// housekeeping turns stale IN_PROGRESS attempts UNKNOWN and sets the oldest-UNKNOWN gauge.
func (r *Reconciler) housekeeping(ctx context.Context) error {
	if err := r.sweepStale(ctx); err != nil {
		return err
	}
	return r.observeOldest(ctx)
}

// RunOnce turns stale IN_PROGRESS attempts UNKNOWN, then claims one batch of due UNKNOWN
// attempts and checks them — at most Workers at once, at most maxInFlight per provider — and
// waits for the whole batch. It returns how many attempts it checked. It is the batch mode tests
// drive step by step; Run does not wait for batches. Do not call it while Run runs.
func (r *Reconciler) RunOnce(ctx context.Context) (int, error) {
	if err := r.housekeeping(ctx); err != nil {
		return 0, err
	}
	claimed, err := r.Claim(ctx, r.cfg.Batch)
	if err != nil {
		return 0, err
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	fail := func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	}
	for _, c := range claimed {
		if err := r.slots.takeWorker(ctx); err != nil {
			fail(err)
			break
		}
		wg.Go(func() {
			defer r.slots.giveWorker()
			if err := r.slots.takeProvider(ctx, c.Row.Provider); err != nil {
				fail(err)
				return
			}
			defer r.slots.giveProvider(c.Row.Provider)
			if err := r.check(ctx, c); err != nil {
				fail(err)
			}
		})
	}
	wg.Wait()
	return len(claimed), errors.Join(errs...)
}

// Claimed is an attempt claimed by this reconciler, with its fencing token.
type Claimed struct {
	Row   *attempt.Row
	Token int64
}

// Claim leases up to n due UNKNOWN attempts in one statement and commits: the rows' lease
// token is bumped (the fencing token), lease_owner and lease_expires_at set, and next_check_at
// moved to the lease expiry so that a reconciler that dies leaves them due again then.
func (r *Reconciler) Claim(ctx context.Context, n int) ([]Claimed, error) {
	return r.claim(ctx, n, limits{})
}

// claim is Claim within lim: no attempt of a full provider, at most caps[i] of names[i] (the
// earliest due), whatever the order of the due rows. The candidates are the n earliest due rows
// of the other providers, locked SKIP LOCKED; those beyond a provider's cap stay as they are
// (their lock ends with the statement), so a claimed row never waits for a lookup slot.
func (r *Reconciler) claim(ctx context.Context, n int, lim limits) ([]Claimed, error) {
	now := r.now()
	lease := 2 * r.cfg.CallTimeout
	start := time.Now()
	rows, err := attempt.ClaimDue(ctx, r.pool, attempt.Claim{Now: now, Limit: n, Owner: r.cfg.Owner, LeaseExpiry: now.Add(lease),
		Full: lim.full, Names: lim.names, Caps: lim.caps}) // nil for none: ClaimDue sends empty arrays
	if err != nil {
		return nil, fmt.Errorf("reconcile: %w", err)
	}
	r.metrics.ClaimSeconds.Observe(time.Since(start).Seconds())
	r.metrics.Claimed.Add(float64(len(rows)))
	out := make([]Claimed, 0, len(rows))
	for _, a := range rows {
		out = append(out, Claimed{Row: a, Token: a.Token})
	}
	return out, nil
}

// interval is the backoff after n checks: min(Initial × Multiplier^n, MaxInterval) with jitter,
// from backoff/v4's ExponentialBackOff with every field set and MaxElapsedTime 0.
func (r *Reconciler) interval(n int) time.Duration {
	b := &backoff.ExponentialBackOff{
		InitialInterval:     r.cfg.InitialInterval,
		RandomizationFactor: r.cfg.RandomizationFactor,
		Multiplier:          r.cfg.Multiplier,
		MaxInterval:         r.cfg.MaxInterval,
		MaxElapsedTime:      0,
		Stop:                backoff.Stop,
		Clock:               backoff.SystemClock,
	}
	b.Reset()
	d := b.NextBackOff()
	for range n {
		d = b.NextBackOff()
	}
	return d
}

// Interval exposes the backoff schedule for documentation and tests.
func (r *Reconciler) Interval(n int) time.Duration { return r.interval(n) }
