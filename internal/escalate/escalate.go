// Package escalate is the escalator: it raises deadline_exceeded for attempts that stayed
// UNKNOWN longer than their deadline (per provider and operation, from the capability map),
// measured on the database clock from when the pipeline recorded the attempt UNKNOWN, and not
// while an ambiguous_match or no_lookup_capability escalation is open for the attempt
// (docs/design.md#cause-escalator-deadline). The escalation row and its escalation.opened outbox
// row commit together; the (attempt, reason) UNIQUE key makes it exactly once.
//
// Several escalators may run at once: candidates are read without locks, and each is judged in
// its own transaction that locks the intent, re-reads the attempt and re-checks the condition.
// The scan reads a partial index of UNKNOWN attempts whose deadline is not judged yet, so its
// cost grows with the due items, not the table.
//
// One failing candidate never blocks the others (STYLE.md habit 26): a judgement whose write the
// database refuses for the attempt's own data (attempt.FailureClass) is rolled back, recorded on
// the attempt in a short transaction of its own (escalation_failures, escalation_error, and
// escalation_retry_at on an exponential backoff, which the scan honours), counted, logged at
// error level, and the round goes on. An outage is never recorded on a candidate: the round
// stops and is retried whole.
package escalate

import (
	"cmp"
	"context"
	"embed"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
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

// statements are the escalator's reads (sql/*.sql); internal/attempt writes.
var statements = postgres.MustLoadStatements(sqlFiles, "sql/*.sql")

// Config configures an escalator. Run reads Infra (Brokers and DatabaseURL required;
// AdminAddr default 127.0.0.1:9103, MaxDBConns default service.DefaultRunConns); New reads the
// rest.
type Config struct {
	service.Infra
	// Providers is the capability map (required): deadline and deadlineByOperation.
	Providers *providers.Map
	// Poll is the pause between rounds (default 250ms).
	Poll time.Duration
	// Batch is the most candidates judged per round (default 200).
	Batch int
	// Store is the attempt store's configuration (topics).
	Store attempt.Config
	// RetryInitial and RetryMax shape the backoff after a candidate's judgement failed for its
	// own data: it is tried again after min(RetryInitial × 2^(failures−1), RetryMax), ±20%
	// jitter (defaults 10s, 10m).
	RetryInitial, RetryMax time.Duration
}

// Escalator raises deadline_exceeded escalations.
type Escalator struct {
	cfg     Config
	pool    *pgxpool.Pool
	log     *slog.Logger
	metrics *Metrics
	minDead time.Duration
	// testSignals are the points where tests stop an escalator, in the style of river's
	// clientTestSignals: never set in production, set by the package's tests through
	// export_test.go; a nil field is no signal.
	testSignals struct {
		// beforeCommit runs inside each escalation's transaction before it commits (tests kill
		// an escalator here).
		beforeCommit func(ctx context.Context, attemptID uuid.UUID)
	}
}

// Deps are the escalator's injected dependencies, those of every service.
type Deps = service.Deps

// spec is how service.Run runs the escalator: one loop beside the relay of the resolutions and
// escalations topics.
func (c Config) spec() service.Spec {
	return service.LoopSpec("escalator", c.Infra, "127.0.0.1:9103", relay.ForService(c.Brokers,
		[]string{cmp.Or(c.Store.ResolutionsTopic, events.TopicResolutions), cmp.Or(c.Store.EscalationsTopic, events.TopicEscalations)}))
}

// PoolConfig is the pool Run opens for c; Run refuses to start when its Validate fails.
func (c Config) PoolConfig() service.PoolConfig { return c.spec().PoolConfig() }

// errNoProviders: Config.Providers is required.
var errNoProviders = errors.New("escalate: Providers (capability map) is required")

// Run runs the escalator service until ctx ends: service.Run opens and migrates the pool and
// starts the admin server and the outbox relay around New(cfg, …).Run. A missing Providers is
// an error at once.
func Run(ctx context.Context, cfg Config, deps Deps) error {
	if cfg.Providers == nil {
		return errNoProviders
	}
	return service.RunLoop(ctx, cfg.spec(), deps, func(ctx context.Context, rt *service.Runtime) error {
		e, err := New(cfg, rt.Pool, rt.Logger, rt.Registry)
		if err != nil {
			return err
		}
		return e.Run(ctx)
	})
}

// Metrics are the escalator's series.
type Metrics struct {
	Opened    *prometheus.CounterVec // reason
	Open      *prometheus.GaugeVec   // reason
	OldestAge prometheus.Gauge
	Age       prometheus.Histogram
	// ItemFailures counts candidates set aside for their own data, by stage (escalate) and
	// error_class (attempt.FailureClasses).
	ItemFailures *prometheus.CounterVec
}

// StageEscalate is the escalator's stage label of bookrecon_item_failures_total.
const StageEscalate = "escalate"

// New returns an escalator; reg may be nil.
func New(cfg Config, pool *pgxpool.Pool, log *slog.Logger, reg prometheus.Registerer) (*Escalator, error) {
	if cfg.Providers == nil {
		return nil, errNoProviders
	}
	cfg.Poll = cmp.Or(cfg.Poll, 250*time.Millisecond)
	cfg.Batch = cmp.Or(cfg.Batch, 200)
	cfg.RetryInitial = cmp.Or(cfg.RetryInitial, 10*time.Second)
	cfg.RetryMax = cmp.Or(cfg.RetryMax, 10*time.Minute)
	if log == nil {
		log = slog.Default()
	}
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	e := &Escalator{cfg: cfg, pool: pool, log: log}
	e.metrics = &Metrics{
		Opened: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "bookrecon_escalations_opened_total",
			Help: "Escalations opened, by reason."}, []string{"reason"}),
		Open: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "bookrecon_escalations_open",
			Help: "Open escalations, by reason (all services' escalations, read from the database)."}, []string{"reason"}),
		OldestAge: prometheus.NewGauge(prometheus.GaugeOpts{Name: "bookrecon_escalation_oldest_open_age_seconds",
			Help: "Age in seconds of the oldest open escalation (0 when none)."}),
		ItemFailures: attempt.NewItemFailures(StageEscalate),
	}
	reg.MustRegister(e.metrics.Opened, e.metrics.Open, e.metrics.OldestAge, e.metrics.ItemFailures)
	for _, r := range attempt.Reasons() {
		e.metrics.Opened.WithLabelValues(string(r))
		e.metrics.Open.WithLabelValues(string(r))
	}
	e.minDead = -1
	for _, name := range cfg.Providers.Names() {
		c, _ := cfg.Providers.Get(name)
		for _, op := range events.Operations() {
			if d := c.DeadlineFor(op); e.minDead < 0 || d < e.minDead {
				e.minDead = d
			}
		}
	}
	if e.minDead < 0 {
		e.minDead = 0
	}
	return e, nil
}

// Run escalates until ctx ends: ticker → RunOnce → log → continue.
func (e *Escalator) Run(ctx context.Context) error {
	for ctx.Err() == nil {
		n, err := e.RunOnce(ctx)
		if err != nil && ctx.Err() == nil {
			e.log.Warn("escalation round failed; retrying", "err", err)
		}
		if n > 0 {
			e.log.Info("deadline escalations raised", "count", n)
		}
		select {
		case <-ctx.Done():
		case <-time.After(e.cfg.Poll):
		}
	}
	return nil
}

type candidate struct {
	id                  uuid.UUID
	tenant, intent, key string
	failures            int // escalation_failures so far
}

// RunOnce judges one batch of UNKNOWN attempts past the shortest deadline and returns how many
// deadline_exceeded escalations it opened. A candidate that fails for its own data is recorded
// and set aside until its retry-at; an outage ends the round with the error.
func (e *Escalator) RunOnce(ctx context.Context) (int, error) {
	if err := e.observeOpen(ctx); err != nil {
		return 0, err
	}
	// The retry-at condition filters the partial index's rows (booking_attempt_deadline): a
	// candidate set aside never takes a place in the batch before it is due again.
	rows, err := e.pool.Query(ctx, statements.SQL("booking_attempt_deadline_candidates"), fmt.Sprintf("%d microseconds", e.minDead.Microseconds()),
		e.cfg.Batch, string(attempt.StatusUnknown))
	if err != nil {
		return 0, fmt.Errorf("escalate: scan: %w", err)
	}
	cands, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (candidate, error) {
		var c candidate
		return c, r.Scan(&c.id, &c.tenant, &c.intent, &c.key, &c.failures)
	})
	if err != nil {
		return 0, fmt.Errorf("escalate: scan: %w", err)
	}
	opened := 0
	for _, c := range cands {
		ok, err := e.judge(ctx, c)
		if class := attempt.FailureClass(err); class != "" && ctx.Err() == nil {
			if err := e.setAside(ctx, c, class, err); err != nil {
				return opened, err
			}
			continue
		}
		if err != nil {
			return opened, err
		}
		if ok {
			opened++
			e.metrics.Opened.WithLabelValues(string(attempt.ReasonDeadlineExceeded)).Inc()
		}
	}
	return opened, nil
}

// setAside records a judgement that failed for the candidate's own data, in a transaction of its
// own after the failed one rolled back: one more failure, the error, and the retry-at on the
// backoff; then counts and logs it. An error here is the database's (an outage).
func (e *Escalator) setAside(ctx context.Context, c candidate, class string, cause error) error {
	wait := e.retryAfter(c.failures + 1)
	var retryAt time.Time
	err := postgres.WithTx(ctx, e.pool, func(tx pgx.Tx) error {
		var err error
		retryAt, err = attempt.NewTx(tx, &e.cfg.Store).RecordDeadlineFailure(ctx, c.id, cause, wait)
		return err
	})
	if err != nil {
		return fmt.Errorf("escalate: record the failure of %s/%s: %w", c.tenant, c.key, err)
	}
	e.metrics.ItemFailures.WithLabelValues(StageEscalate, class).Inc()
	e.log.Error("deadline judgement failed for the attempt's own data; set aside, retried with backoff",
		"attempt_id", c.id, "tenant_id", c.tenant, "idempotency_key", c.key, "failures", c.failures+1,
		"error_class", class, "retry_at", retryAt.UTC(), "err", cause)
	return nil
}

// retryAfter is the backoff after n failures: min(RetryInitial × 2^(n−1), RetryMax) with 20%
// jitter, from backoff/v4's ExponentialBackOff with every field set and MaxElapsedTime 0.
func (e *Escalator) retryAfter(n int) time.Duration {
	b := &backoff.ExponentialBackOff{
		InitialInterval:     e.cfg.RetryInitial,
		RandomizationFactor: 0.2,
		Multiplier:          2,
		MaxInterval:         e.cfg.RetryMax,
		MaxElapsedTime:      0,
		Stop:                backoff.Stop,
		Clock:               backoff.SystemClock,
	}
	b.Reset()
	d := b.NextBackOff()
	for range n - 1 {
		d = b.NextBackOff()
	}
	return d
}

// judge re-checks one candidate under its intent lock and escalates it when its deadline passed.
func (e *Escalator) judge(ctx context.Context, c candidate) (bool, error) {
	opened := false
	err := postgres.WithTx(ctx, e.pool, func(tx pgx.Tx) error {
		opened = false
		at := attempt.NewTx(tx, &e.cfg.Store)
		if err := at.LockIntent(ctx, c.tenant, c.intent); err != nil {
			return err
		}
		a, err := at.ByID(ctx, c.id)
		if err != nil {
			return err
		}
		caps, _ := e.cfg.Providers.Get(a.Provider)
		var raised bool
		if raised, opened, err = at.JudgeDeadline(ctx, a, caps.DeadlineFor(a.Operation)); err != nil || !raised {
			return err
		}
		if f := e.testSignals.beforeCommit; f != nil {
			f(ctx, a.ID)
		}
		return nil
	})
	return opened, err
}

func (e *Escalator) observeOpen(ctx context.Context) error {
	rows, err := e.pool.Query(ctx, statements.SQL("escalation_open_by_reason"), string(attempt.EscalationOpen))
	if err != nil {
		return fmt.Errorf("escalate: open escalations: %w", err)
	}
	defer rows.Close()
	for _, r := range attempt.Reasons() {
		e.metrics.Open.WithLabelValues(string(r)).Set(0)
	}
	oldest := 0.0
	for rows.Next() {
		var reason string
		var n int
		var age float64
		if err := rows.Scan(&reason, &n, &age); err != nil {
			return err
		}
		e.metrics.Open.WithLabelValues(reason).Set(float64(n))
		oldest = max(oldest, age)
	}
	e.metrics.OldestAge.Set(oldest)
	return rows.Err()
}
