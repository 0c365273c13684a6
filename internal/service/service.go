// Package service holds what the service binaries share: Main (logger, signals, exit status),
// OpenPool (waiting for PostgreSQL, migrating), and for the reconciler and escalator Run — the
// pool, the admin server, the outbox relay and two-phase shutdown around their loop.
package service

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/bookrecon/bookrecon/internal/kafka"
	"github.com/bookrecon/bookrecon/internal/outbox"
	"github.com/bookrecon/bookrecon/internal/postgres"
	"github.com/bookrecon/bookrecon/internal/telemetry"
	"github.com/bookrecon/bookrecon/migrations"
)

// Config is the shared part of a service's configuration.
type Config struct {
	Name        string
	DatabaseURL string
	Brokers     []string
	AdminAddr   string
	MaxDBConns  int32
	// OutputTopics are the topics the service's relay publishes to (its metric series are
	// pre-created).
	OutputTopics []string
}

// Run opens and migrates the pool, starts the admin server and the outbox relay, runs loop
// until ctx ends, then stops the relay, closes the Kafka client and the pool last. /readyz is
// ready while no outbox topic is paused, a broker answered within kafka.AnsweredWithin
// (kafka.BrokerWatch) and PostgreSQL answers.
func Run(ctx context.Context, cfg Config, log *slog.Logger, reg *prometheus.Registry,
	loop func(ctx context.Context, pool *pgxpool.Pool) error) error {
	admin, err := telemetry.Listen(cfg.AdminAddr)
	if err != nil {
		return err
	}
	defer admin.Close() // closed by the admin server too; a second Close is harmless
	pool, err := OpenPool(ctx, log, cfg.DatabaseURL, max(cfg.MaxDBConns, 4), true)
	if err != nil {
		return err
	}
	defer pool.Close()
	cl, err := kgo.NewClient(kafka.Options(cfg.Brokers, log, reg, cfg.Name)...)
	if err != nil {
		return err
	}
	defer cl.Close()
	bg, stop := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stop()
	relay := &outbox.Relay{Pool: pool, Client: cl, Logger: log, Metrics: outbox.NewRelayMetrics(reg, cfg.OutputTopics),
		Config: outbox.RelayConfig{Holder: cfg.Name + "-" + uuid.NewString()}}
	wg.Go(func() { _ = relay.Run(bg) })
	brokers := kafka.NewBrokerWatch(cl)
	wg.Go(func() { brokers.Run(bg) })
	wg.Go(func() {
		// Ready only while it can publish: a broker answered lately, whether or not this
		// service's relay holds the lease now.
		ready := func(ctx context.Context) error {
			if err := relay.Ready(); err != nil {
				return err
			}
			if err := brokers.Ready(); err != nil {
				return err
			}
			return pool.Ping(ctx)
		}
		if err := telemetry.ServeListener(bg, admin, reg, ready, log, nil); err != nil {
			log.Error("admin server", "err", err)
		}
	})
	return loop(ctx, pool)
}

// OpenPool waits for PostgreSQL (UntilUp: an outage pauses start-up), opens a pool of at most
// maxConns and, when migrate is set, brings the schema up to date (migrations.UpPool, under its
// advisory lock). A URL that does not parse (postgres.ErrConfig) fails at once.
func OpenPool(ctx context.Context, log *slog.Logger, url string, maxConns int32, migrate bool) (*pgxpool.Pool, error) {
	var pool *pgxpool.Pool
	err := UntilUp(ctx, log, "postgresql", func() error {
		p, err := postgres.Open(ctx, url, maxConns)
		if err != nil {
			return err
		}
		if migrate {
			if _, err := migrations.UpPool(ctx, p); err != nil {
				p.Close()
				return err
			}
		}
		pool = p
		return nil
	}, postgres.ErrConfig)
	return pool, err
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
