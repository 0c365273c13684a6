// Command reconciler settles UNKNOWN booking attempts at the providers (see internal/reconcile).
package main

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"time"

	"github.com/alecthomas/kong"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bookrecon/bookrecon/internal/attempt"
	"github.com/bookrecon/bookrecon/internal/postgres"
	"github.com/bookrecon/bookrecon/internal/reconcile"
	"github.com/bookrecon/bookrecon/internal/relay"
	"github.com/bookrecon/bookrecon/internal/service"
	"github.com/bookrecon/bookrecon/internal/telemetry"
	"github.com/bookrecon/bookrecon/internal/topics"
	"github.com/bookrecon/bookrecon/providers"
)

type cli struct {
	DatabaseURL       string        `env:"BOOKRECON_DATABASE_URL" help:"PostgreSQL URL (default: the local stack's database, 127.0.0.1:5432/bookrecon); never shown, as it holds a password."`
	MigrateURL        string        `env:"BOOKRECON_MIGRATE_DATABASE_URL" help:"Direct PostgreSQL URL for the migrations only (default the database URL; required with a transaction pooler)."`
	Pooler            string        `env:"BOOKRECON_DATABASE_POOLER" enum:"none,session,transaction" default:"none" help:"What the database URL reaches: none (direct), session or transaction (a pooler in that mode, e.g. PgBouncer)."`
	DBConns           int32         `env:"BOOKRECON_RECONCILER_DB_CONNS" default:"4" help:"Most database connections (at least 3)."`
	KafkaBrokers      []string      `env:"BOOKRECON_KAFKA_BROKERS" default:"127.0.0.1:19092" help:"Kafka seed brokers (the outbox relay)."`
	Providers         service.File  `env:"BOOKRECON_PROVIDERS" required:"" help:"Capability map."`
	ProviderURL       string        `env:"BOOKRECON_PROVIDER_URL" default:"http://127.0.0.1:18080" help:"Base URL of the providers' lookup API (the simulator)."`
	AdminAddr         string        `env:"BOOKRECON_RECONCILER_ADMIN_ADDR" default:"127.0.0.1:9102" help:"Address of /metrics, /livez, /readyz."`
	Poll              time.Duration `env:"BOOKRECON_RECONCILE_POLL" default:"250ms" help:"Pause between rounds when nothing is due."`
	InitialInterval   time.Duration `env:"BOOKRECON_BACKOFF_INITIAL" default:"1s" help:"Backoff initial interval."`
	MaxInterval       time.Duration `env:"BOOKRECON_BACKOFF_MAX" default:"10m" help:"Backoff maximum interval."`
	NoJitter          bool          `env:"BOOKRECON_BACKOFF_NO_JITTER" help:"RandomizationFactor 0 (the demo's settings)."`
	CallTimeout       time.Duration `env:"BOOKRECON_PROVIDER_CALL_TIMEOUT" default:"5s" help:"Provider call timeout; the lease is twice this."`
	InProgressTimeout time.Duration `env:"BOOKRECON_IN_PROGRESS_TIMEOUT" default:"15m" help:"IN_PROGRESS older than this turns UNKNOWN (stale_in_progress)."`
	topics.Flags
}

func (c cli) service() service.Config {
	tp := c.Flags.Names()
	return service.Config{Name: "reconciler", DatabaseURL: c.DatabaseURL, MigrateDatabaseURL: c.MigrateURL, Pooler: postgres.Pooler(c.Pooler),
		MaxDBConns: c.DBConns, AdminAddr: c.AdminAddr, Publish: relay.ForService(c.KafkaBrokers, []string{tp.Resolutions, tp.Escalations})}
}

// Validate refuses a database pool the reconciler cannot run on, and a transaction pooler without
// a direct URL to migrate over, when the command line is parsed (a usage error: exit 80).
func (c cli) Validate() error {
	var f service.FlagChecks
	f.Check(c.service().PoolConfig().Validate())
	f.Positive("poll", "BOOKRECON_RECONCILE_POLL", c.Poll)
	f.Positive("initial-interval", "BOOKRECON_BACKOFF_INITIAL", c.InitialInterval)
	f.Positive("call-timeout", "BOOKRECON_PROVIDER_CALL_TIMEOUT", c.CallTimeout)
	f.Positive("in-progress-timeout", "BOOKRECON_IN_PROGRESS_TIMEOUT", c.InProgressTimeout)
	if c.MaxInterval < c.InitialInterval {
		f.Check(fmt.Errorf("--max-interval (BOOKRECON_BACKOFF_MAX) %s is below --initial-interval (BOOKRECON_BACKOFF_INITIAL) %s", c.MaxInterval, c.InitialInterval))
	}
	if u, err := url.Parse(c.ProviderURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		f.Check(fmt.Errorf("--provider-url (BOOKRECON_PROVIDER_URL) %q is not an http(s) URL", c.ProviderURL))
	}
	return f.Err()
}

func main() {
	var c cli
	service.ParseFlags(&c, kong.Description("bookrecon reconciler"))
	c.DatabaseURL = cmp.Or(c.DatabaseURL, postgres.DefaultURL)
	service.Main("reconciler", func(ctx context.Context, log *slog.Logger) error {
		m, err := providers.LoadMap(string(c.Providers))
		if err != nil {
			return fmt.Errorf("capability map: %w", err)
		}
		reg := telemetry.NewRegistry()
		tp := c.Flags.Names()
		return service.Run(ctx, c.service(), log, reg,
			func(ctx context.Context, pool *pgxpool.Pool) error {
				rec, err := reconcile.New(reconcile.Config{Providers: m, Poll: c.Poll, InitialInterval: c.InitialInterval,
					MaxInterval: c.MaxInterval, NoJitter: c.NoJitter, CallTimeout: c.CallTimeout, InProgressTimeout: c.InProgressTimeout,
					Store: attempt.Config{ResolutionsTopic: tp.Resolutions, EscalationsTopic: tp.Escalations}},
					pool, providers.NewHTTP(c.ProviderURL, &http.Client{}), log, reg, nil)
				if err != nil {
					return err
				}
				return rec.Run(ctx)
			})
	})
}
