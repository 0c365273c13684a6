// Package reconcile is the reconciler: it claims due UNKNOWN attempts in one statement
// (FOR UPDATE SKIP LOCKED, lease owner + expiry + fencing token), commits the claim, asks the
// provider outside any transaction, and writes the verdict or the next check time in a
// transaction fenced by the lease token (DESIGN.md "Reconciliation"). It also turns attempts
// stuck IN_PROGRESS past inProgressTimeout UNKNOWN (stale_in_progress).
//
// Giving up is never an outcome: an attempt the provider cannot settle stays UNKNOWN, checked
// on an exponential backoff (github.com/cenkalti/backoff/v4) persisted in the row, until an
// event, a lookup or a person settles it; the escalator hands it to people at its deadline.
package reconcile

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/bookrecon/bookrecon/internal/attempt"
	"github.com/bookrecon/bookrecon/internal/postgres"
	"github.com/bookrecon/bookrecon/providers"
)

// Config configures a reconciler. Zero values take the documented defaults.
type Config struct {
	// Owner names this instance in lease_owner (default a random UUID).
	Owner string
	// Providers is the capability map (required).
	Providers *providers.Map
	// Poll is the pause between rounds when nothing was due (default 250ms).
	Poll time.Duration
	// Batch is the most attempts claimed per round (default 100).
	Batch int
	// Workers is how many provider calls run at once (default 8).
	Workers int
	// CallTimeout bounds one provider call (default 5s); the lease lasts twice as long.
	CallTimeout time.Duration
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
	// dbClockFloor: see Config.DatabaseClockFloor.
	dbClockFloor bool
	// BeforeWrite, when set, runs after the provider answered and before the fenced write
	// (tests pause a reconciler here past its lease).
	BeforeWrite func(ctx context.Context, a *attempt.Row)
}

// New returns a reconciler. reg may be nil (metrics not registered); now may be nil (time.Now).
func New(cfg Config, pool *pgxpool.Pool, p providers.Provider, log *slog.Logger, reg prometheus.Registerer, now Clock) (*Reconciler, error) {
	cfg = cfg.withDefaults()
	if cfg.Providers == nil {
		return nil, errors.New("reconcile: Providers (capability map) is required")
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
	return &Reconciler{cfg: cfg, pool: pool, provider: p, log: log, now: now, metrics: NewMetrics(reg, cfg.Providers), dbClockFloor: floor}, nil
}

// Run reconciles until ctx ends: ticker → RunOnce → log → continue (STYLE.md habit 11).
func (r *Reconciler) Run(ctx context.Context) error {
	for ctx.Err() == nil {
		n, err := r.RunOnce(ctx)
		if err != nil && ctx.Err() == nil {
			r.log.Warn("reconcile round failed; retrying", "err", err)
		}
		if n == 0 || err != nil {
			select {
			case <-ctx.Done():
			case <-time.After(r.cfg.Poll):
			}
		}
	}
	return nil
}

// RunOnce turns stale IN_PROGRESS attempts UNKNOWN, then claims and checks one batch of due
// UNKNOWN attempts. It returns how many attempts it checked.
func (r *Reconciler) RunOnce(ctx context.Context) (int, error) {
	if err := r.sweepStale(ctx); err != nil {
		return 0, err
	}
	if err := r.observeOldest(ctx); err != nil {
		return 0, err
	}
	claimed, err := r.Claim(ctx, r.cfg.Batch)
	if err != nil {
		return 0, err
	}
	sem := make(chan struct{}, r.cfg.Workers)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	for _, c := range claimed {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := r.check(ctx, c); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
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
	now := r.now()
	lease := 2 * r.cfg.CallTimeout
	start := time.Now()
	rows, err := r.pool.Query(ctx, `WITH due AS (
			SELECT id FROM booking_attempt
			WHERE status = 'UNKNOWN' AND next_check_at <= $1
			ORDER BY next_check_at
			LIMIT $2
			FOR UPDATE SKIP LOCKED)
		UPDATE booking_attempt a SET lease_owner = $3, lease_token = a.lease_token + 1,
			lease_expires_at = $4, next_check_at = $4
		FROM due WHERE a.id = due.id
		RETURNING a.id, a.lease_token`, now, n, r.cfg.Owner, now.Add(lease))
	if err != nil {
		return nil, fmt.Errorf("reconcile: claim: %w", err)
	}
	type idTok struct {
		id  uuid.UUID
		tok int64
	}
	ids, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (idTok, error) {
		var x idTok
		return x, row.Scan(&x.id, &x.tok)
	})
	if err != nil {
		return nil, fmt.Errorf("reconcile: claim: %w", err)
	}
	r.metrics.ClaimSeconds.Observe(time.Since(start).Seconds())
	r.metrics.Claimed.Add(float64(len(ids)))
	out := make([]Claimed, 0, len(ids))
	for _, x := range ids {
		a, err := r.read(ctx, x.id)
		if err != nil {
			return nil, err
		}
		out = append(out, Claimed{Row: a, Token: x.tok})
	}
	return out, nil
}

func (r *Reconciler) read(ctx context.Context, id uuid.UUID) (*attempt.Row, error) {
	var a *attempt.Row
	err := postgres.WithTx(ctx, r.pool, func(tx pgx.Tx) error {
		var err error
		a, err = attempt.ReadByID(ctx, tx, id)
		return err
	})
	return a, err
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
