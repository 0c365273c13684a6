// Command escalator hands attempts that stayed UNKNOWN past their deadline to people on
// booking.escalations.v1 (see internal/escalate).
package main

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/alecthomas/kong"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bookrecon/bookrecon/internal/attempt"
	"github.com/bookrecon/bookrecon/internal/escalate"
	"github.com/bookrecon/bookrecon/internal/postgres"
	"github.com/bookrecon/bookrecon/internal/relay"
	"github.com/bookrecon/bookrecon/internal/service"
	"github.com/bookrecon/bookrecon/internal/telemetry"
	"github.com/bookrecon/bookrecon/internal/topics"
	"github.com/bookrecon/bookrecon/providers"
)

type cli struct {
	DatabaseURL  string        `env:"BOOKRECON_DATABASE_URL" help:"PostgreSQL URL (default: the local stack's database, 127.0.0.1:5432/bookrecon); never shown, as it holds a password."`
	MigrateURL   string        `env:"BOOKRECON_MIGRATE_DATABASE_URL" help:"Direct PostgreSQL URL for the migrations only (default the database URL; required with a transaction pooler)."`
	Pooler       string        `env:"BOOKRECON_DATABASE_POOLER" enum:"none,session,transaction" default:"none" help:"What the database URL reaches: none (direct), session or transaction (a pooler in that mode, e.g. PgBouncer)."`
	DBConns      int32         `env:"BOOKRECON_ESCALATOR_DB_CONNS" default:"4" help:"Most database connections (at least 3)."`
	KafkaBrokers []string      `env:"BOOKRECON_KAFKA_BROKERS" default:"127.0.0.1:19092" help:"Kafka seed brokers (the outbox relay)."`
	Providers    service.File  `env:"BOOKRECON_PROVIDERS" required:"" help:"Capability map: deadline, deadlineByOperation."`
	AdminAddr    string        `env:"BOOKRECON_ESCALATOR_ADMIN_ADDR" default:"127.0.0.1:9103" help:"Address of /metrics, /livez, /readyz."`
	Poll         time.Duration `env:"BOOKRECON_ESCALATE_POLL" default:"250ms" help:"Pause between scans."`
	topics.Flags
}

func (c cli) service() service.Config {
	tp := c.Flags.Names()
	return service.Config{Name: "escalator", DatabaseURL: c.DatabaseURL, MigrateDatabaseURL: c.MigrateURL, Pooler: postgres.Pooler(c.Pooler),
		MaxDBConns: c.DBConns, AdminAddr: c.AdminAddr, Publish: relay.ForService(c.KafkaBrokers, []string{tp.Resolutions, tp.Escalations})}
}

// Validate refuses a database pool the escalator cannot run on, and a transaction pooler without
// a direct URL to migrate over, when the command line is parsed (a usage error: exit 80).
func (c cli) Validate() error {
	var f service.FlagChecks
	f.Check(c.service().PoolConfig().Validate())
	f.Positive("poll", "BOOKRECON_ESCALATE_POLL", c.Poll)
	return f.Err()
}

func main() {
	var c cli
	service.ParseFlags(&c, kong.Description("bookrecon escalator"))
	c.DatabaseURL = cmp.Or(c.DatabaseURL, postgres.DefaultURL)
	service.Main("escalator", func(ctx context.Context, log *slog.Logger) error {
		m, err := providers.LoadMap(string(c.Providers))
		if err != nil {
			return fmt.Errorf("capability map: %w", err)
		}
		reg := telemetry.NewRegistry()
		tp := c.Flags.Names()
		return service.Run(ctx, c.service(), log, reg,
			func(ctx context.Context, pool *pgxpool.Pool) error {
				esc, err := escalate.New(escalate.Config{Providers: m, Poll: c.Poll,
					Store: attempt.Config{ResolutionsTopic: tp.Resolutions, EscalationsTopic: tp.Escalations}}, pool, log, reg)
				if err != nil {
					return err
				}
				return esc.Run(ctx)
			})
	})
}
