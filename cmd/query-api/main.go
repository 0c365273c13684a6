// Command query-api serves bookrecon's read-only query API to booking services — an intent's
// traveller-facing status and the retry gate, each request authenticated with a bearer token of
// the tokens file (internal/auth) — and /metrics, /livez, /readyz on its admin address (see
// internal/query). It reads PostgreSQL only: it neither migrates nor writes.
package main

import (
	"cmp"
	"context"
	"log/slog"
	"time"

	"github.com/alecthomas/kong"

	"github.com/bookrecon/bookrecon/internal/auth"
	"github.com/bookrecon/bookrecon/internal/postgres"
	"github.com/bookrecon/bookrecon/internal/query"
	"github.com/bookrecon/bookrecon/internal/service"
	"github.com/bookrecon/bookrecon/internal/telemetry"
	"github.com/bookrecon/bookrecon/providers"
)

type cli struct {
	DatabaseURL  string        `env:"BOOKRECON_DATABASE_URL" help:"PostgreSQL URL (default: the local stack's database, 127.0.0.1:5432/bookrecon); never shown, as it holds a password (a read-only role is enough)."`
	Providers    service.File  `env:"BOOKRECON_PROVIDERS" required:"" help:"Capability map: maxVersions per provider."`
	Pooler       string        `env:"BOOKRECON_DATABASE_POOLER" enum:"none,session,transaction" default:"none" help:"What the database URL reaches: none (direct), session or transaction (a pooler in that mode, e.g. PgBouncer)."`
	Tokens       service.File  `env:"BOOKRECON_TOKENS_FILE" required:"" help:"Tokens file: the SHA-256 of each bearer token with its tenant, principal and scopes (bookrecon tokens add); re-read on SIGHUP and on change."`
	Addr         string        `env:"BOOKRECON_QUERY_ADDR" default:"127.0.0.1:8080" help:"Address of the API (every /v1 route needs a bearer token)."`
	AdminAddr    string        `env:"BOOKRECON_QUERY_ADMIN_ADDR" default:"127.0.0.1:9104" help:"Address of /metrics, /livez, /readyz and pprof (unauthenticated: keep it off public networks)."`
	MaxDBConns   int32         `env:"BOOKRECON_QUERY_DB_CONNS" default:"10" help:"Most database connections (at least 2: a request and the readiness check)."`
	QueryTimeout time.Duration `env:"BOOKRECON_QUERY_TIMEOUT" default:"5s" help:"Bound on one request's database work."`
}

func (c cli) config() query.Config {
	return query.Config{Infra: service.Infra{DatabaseURL: c.DatabaseURL, Pooler: postgres.Pooler(c.Pooler), MaxDBConns: c.MaxDBConns,
		AdminAddr: c.AdminAddr}, Addr: c.Addr, QueryTimeout: c.QueryTimeout}
}

// Validate refuses a pool the API cannot run on when the command line is parsed (a usage
// error: exit 80).
func (c cli) Validate() error { return c.config().PoolConfig().Validate() }

func main() {
	var c cli
	service.ParseFlags(&c, kong.Name("query-api"), kong.Description("bookrecon query API: intent status and retry gate."))
	c.DatabaseURL = cmp.Or(c.DatabaseURL, postgres.DefaultURL)
	service.Main("query-api", func(ctx context.Context, log *slog.Logger) error { return run(ctx, c, log, nil, nil) })
}

// run loads the capability map and the tokens file and runs the API (query.Run) until ctx
// ends. started, when set, gets the API's address, adminStarted the admin address.
func run(ctx context.Context, c cli, log *slog.Logger, started, adminStarted func(addr string)) error {
	m, err := providers.LoadMap(string(c.Providers))
	if err != nil {
		return err
	}
	reg := telemetry.NewRegistry()
	tokens, err := auth.Open(string(c.Tokens), log, reg)
	if err != nil {
		return err
	}
	cfg := c.config()
	cfg.Providers, cfg.Tokens, cfg.Started = m, tokens, started
	return query.Run(ctx, cfg, query.Deps{Logger: log, Registry: reg, AdminStarted: adminStarted})
}
