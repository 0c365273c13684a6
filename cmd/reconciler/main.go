// Command reconciler settles UNKNOWN booking attempts at the providers (see internal/reconcile).
package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"time"

	"github.com/alecthomas/kong"

	"github.com/bookrecon/bookrecon/internal/attempt"
	"github.com/bookrecon/bookrecon/internal/reconcile"
	"github.com/bookrecon/bookrecon/internal/service"
	"github.com/bookrecon/bookrecon/internal/topics"
)

type cli struct {
	service.SharedFlags
	DBConns           int32         `env:"BOOKRECON_RECONCILER_DB_CONNS" default:"4" help:"Most database connections (at least 3)."`
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

func (c cli) config() reconcile.Config {
	tp := c.Flags.Names()
	return reconcile.Config{
		Infra:       c.Infra(c.DBConns, c.AdminAddr),
		ProviderURL: c.ProviderURL, Poll: c.Poll, InitialInterval: c.InitialInterval, MaxInterval: c.MaxInterval, NoJitter: c.NoJitter,
		CallTimeout: c.CallTimeout, InProgressTimeout: c.InProgressTimeout,
		Store: attempt.Config{ResolutionsTopic: tp.Resolutions, EscalationsTopic: tp.Escalations},
	}
}

// Validate refuses a database pool the reconciler cannot run on, and a transaction pooler without
// a direct URL to migrate over, when the command line is parsed (a usage error: exit 80).
func (c cli) Validate() error {
	var f service.FlagChecks
	f.Check(c.config().PoolConfig().Validate())
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
	service.Main("reconciler", func(ctx context.Context, log *slog.Logger) error {
		m, err := c.LoadProviders()
		if err != nil {
			return err
		}
		cfg := c.config()
		cfg.Providers = m
		return reconcile.Run(ctx, cfg, reconcile.Deps{Logger: log})
	})
}
