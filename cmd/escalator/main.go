// Command escalator hands attempts that stayed UNKNOWN past their deadline to people on
// booking.escalations.v1 (see internal/escalate).
package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/alecthomas/kong"

	"github.com/bookrecon/bookrecon/internal/attempt"
	"github.com/bookrecon/bookrecon/internal/escalate"
	"github.com/bookrecon/bookrecon/internal/service"
	"github.com/bookrecon/bookrecon/internal/topics"
)

type cli struct {
	service.SharedFlags
	DBConns   int32         `env:"BOOKRECON_ESCALATOR_DB_CONNS" default:"4" help:"Most database connections (at least 3)."`
	AdminAddr string        `env:"BOOKRECON_ESCALATOR_ADMIN_ADDR" default:"127.0.0.1:9103" help:"Address of /metrics, /livez, /readyz."`
	Poll      time.Duration `env:"BOOKRECON_ESCALATE_POLL" default:"250ms" help:"Pause between scans."`
	topics.Flags
}

func (c cli) config() escalate.Config {
	tp := c.Flags.Names()
	return escalate.Config{
		Infra: c.Infra(c.DBConns, c.AdminAddr),
		Poll:  c.Poll, Store: attempt.Config{ResolutionsTopic: tp.Resolutions, EscalationsTopic: tp.Escalations},
	}
}

// Validate refuses a database pool the escalator cannot run on, and a transaction pooler without
// a direct URL to migrate over, when the command line is parsed (a usage error: exit 80).
func (c cli) Validate() error {
	var f service.FlagChecks
	f.Check(c.config().PoolConfig().Validate())
	f.Positive("poll", "BOOKRECON_ESCALATE_POLL", c.Poll)
	return f.Err()
}

func main() {
	var c cli
	service.ParseFlags(&c, kong.Description("bookrecon escalator"))
	service.Main("escalator", func(ctx context.Context, log *slog.Logger) error {
		m, err := c.LoadProviders()
		if err != nil {
			return err
		}
		cfg := c.config()
		cfg.Providers = m
		return escalate.Run(ctx, cfg, escalate.Deps{Logger: log})
	})
}
