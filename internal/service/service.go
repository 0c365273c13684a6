// Package service holds what the service binaries share: Main (logger, signals, exit status),
// ParseFlags, OpenPool (refusing a pool too small, waiting for PostgreSQL, migrating over a
// direct session) and Run, the one runner every service's Run(ctx, cfg, deps) goes through — the
// admin listener, the pool, the Kafka client, the outbox relay and two-phase shutdown around the
// service's own loop (run.go). It links no Kafka client, so the query API, which only reads,
// links none either: the part that publishes a service's outbox rows comes from relay.ForService
// (Spec.Publish), and the ingester, whose relay shares its consumer's client, starts its own.
package service

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bookrecon/bookrecon/internal/postgres"
	"github.com/bookrecon/bookrecon/internal/telemetry"
	"github.com/bookrecon/bookrecon/migrations"
)

// Need is one part of a service that holds database connections while the others run.
type Need struct {
	What  string
	Conns int32
}

// The parts every service with a relay or an admin server has.
var (
	// RelayNeed: the outbox relay runs one statement at a time (its lease, its round's read and
	// marks); it holds no session.
	RelayNeed = Need{What: "outbox relay", Conns: 1}
	// ReadinessNeed: /readyz pings the database; it must not wait behind the others.
	ReadinessNeed = Need{What: "readiness check", Conns: 1}
)

// Needs are the parts of a service that may each hold connections at the same time. A pool
// smaller than their sum leaves a part waiting for another's connection — the relay, which holds
// one while it waits for a second, forever: a pool of 1 deadlocks it.
type Needs []Need

// Min is the smallest pool the parts run on.
func (n Needs) Min() int32 {
	var sum int32
	for _, x := range n {
		sum += x.Conns
	}
	return sum
}

func (n Needs) String() string {
	parts := make([]string, len(n))
	for i, x := range n {
		parts[i] = fmt.Sprintf("%s %d", x.What, x.Conns)
	}
	return strings.Join(parts, ", ")
}

// PoolConfig configures OpenPool.
type PoolConfig struct {
	Name string // the service, for messages
	// URL is the database the service works on, through a pooler when there is one.
	URL string
	// MigrateURL is a direct session to the same database, used only for the migrations (""
	// is URL). The migrations hold a session advisory lock for their whole run (goose's session
	// locker, so that services starting together cannot race), which a transaction pooler
	// breaks: the lock is taken on whichever server session the pooler lends and is not
	// released with the client. Behind PoolerTransaction it is therefore required.
	MigrateURL string
	Pooler     postgres.Pooler // what URL reaches ("": none)
	MaxConns   int32           // the pool's bound (0: Needs.Min(); pgx's default without Needs)
	Needs      Needs           // a MaxConns below Needs.Min() is refused
	Migrate    bool            // bring the schema up to date before returning
}

// Validate reports every configuration problem of c at once; each is a ConfigError (a
// postgres.ErrConfig).
func (c PoolConfig) Validate() error {
	var errs []error
	for _, u := range []struct{ key, url string }{{"BOOKRECON_DATABASE_URL", c.URL}, {"BOOKRECON_MIGRATE_DATABASE_URL", c.MigrateURL}} {
		if u.url == "" {
			continue
		}
		if _, err := pgxpool.ParseConfig(u.url); err != nil { // pgx masks the password
			errs = append(errs, ConfigError(fmt.Sprintf("%s: %s does not parse: %v", c.Name, u.key, err)))
		}
	}
	if !slices.Contains(append(postgres.Poolers(), ""), c.Pooler) {
		errs = append(errs, ConfigError(fmt.Sprintf("%s: database pooler %q is none of %v (BOOKRECON_DATABASE_POOLER)", c.Name, c.Pooler, postgres.Poolers())))
	}
	if need := c.Needs.Min(); c.MaxConns > 0 && c.MaxConns < need {
		errs = append(errs, ConfigError(fmt.Sprintf("%s: a database pool of size %d (its _DB_CONNS) is too small: it holds up to %d connections at once (%s)",
			c.Name, c.MaxConns, need, c.Needs)))
	}
	if c.Migrate && c.Pooler == postgres.PoolerTransaction && (c.MigrateURL == "" || c.MigrateURL == c.URL) {
		errs = append(errs, ConfigError(c.Name+": behind a transaction pooler the migrations need a direct session to the database "+
			"(their advisory lock lives in a session): set BOOKRECON_MIGRATE_DATABASE_URL"))
	}
	return errors.Join(errs...)
}

// ConfigError is a database configuration that no retry can mend; it matches postgres.ErrConfig.
type ConfigError string

func (e ConfigError) Error() string { return string(e) }

// Unwrap makes errors.Is(e, postgres.ErrConfig) hold.
func (e ConfigError) Unwrap() error { return postgres.ErrConfig }

// OpenPool validates c (an error is returned at once), waits for PostgreSQL (UntilUp: an outage
// pauses start-up), opens a pool of at most c.MaxConns and, when c.Migrate is set, brings the
// schema up to date over c.MigrateURL (migrations.UpPool, under its advisory lock, on a pool of
// its own closed afterwards). A URL that does not parse (postgres.ErrConfig) fails at once.
func OpenPool(ctx context.Context, log *slog.Logger, c PoolConfig) (*pgxpool.Pool, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	c.MaxConns = cmp.Or(c.MaxConns, c.Needs.Min())
	var pool *pgxpool.Pool
	err := UntilUp(ctx, log, "postgresql", func() error {
		p, err := postgres.OpenWith(ctx, c.URL, postgres.Options{MaxConns: c.MaxConns, Pooler: c.Pooler})
		if err != nil {
			return err
		}
		if c.Migrate {
			if err := migrate(ctx, cmp.Or(c.MigrateURL, c.URL)); err != nil {
				p.Close()
				return err
			}
		}
		pool = p
		return nil
	}, postgres.ErrConfig)
	return pool, err
}

// migrate brings the schema of the database at url, a direct session, up to date.
func migrate(ctx context.Context, url string) error {
	// Two connections: goose's session lock holds one while the migrations run on the other.
	p, err := postgres.Open(ctx, url, 2)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	defer p.Close()
	_, err = migrations.UpPool(ctx, p)
	return err
}

// Main runs a service binary's body with the conventions every service shares: the JSON logger
// named name (telemetry.Logger), a context that SIGINT or SIGTERM ends, one last line
// "<name> stopped" and the exit status. After the signal (body returned nil or only the end of
// ctx, see Interrupted) the line is at info with reason "signal" and the process exits 0; when
// body returns nil on its own, reason "done" and 0; otherwise it is at error with reason "error"
// and the error, and the process exits 1.
func Main(name string, body func(ctx context.Context, log *slog.Logger) error) {
	log := telemetry.Logger(name)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := body(ctx, log)
	signalled, interrupted := ctx.Err() != nil, Interrupted(ctx, err) // before stop ends ctx too
	stop()
	switch {
	case err != nil && !interrupted:
		log.Error(name+" stopped", "reason", "error", "err", err)
		os.Exit(1)
	case signalled:
		log.Info(name+" stopped", "reason", "signal")
	default:
		log.Info(name+" stopped", "reason", "done")
	}
}

// Interrupted reports whether err is only the end of ctx — the shutdown a signal asked for, for
// instance while start-up still waited for PostgreSQL — rather than a failure: a service's main
// then exits 0.
func Interrupted(ctx context.Context, err error) bool {
	return ctx.Err() != nil && errors.Is(err, ctx.Err())
}

// UntilUp runs step until it succeeds, retrying with backoff while what it needs is unavailable
// (infrastructure outages pause start-up too; they never make it give up). An error matching
// one of fatal (a configuration error) or the end of ctx returns at once.
func UntilUp(ctx context.Context, log *slog.Logger, what string, step func() error, fatal ...error) error {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.MaxInterval, b.MaxElapsedTime = 200*time.Millisecond, 10*time.Second, 0
	b.Reset()
	for {
		err := step()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil { // the step failed because start-up was called off
			return ctx.Err()
		}
		for _, f := range fatal {
			if errors.Is(err, f) {
				return err
			}
		}
		wait := b.NextBackOff()
		log.Warn("waiting for "+what, "retry_in", wait.String(), "err", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
	}
}
