// Command bookrecon is the producer and operations CLI: create topics, migrate the database,
// publish JSONL files with the samples' time rebasing, run the demo, and manage the tokens file.
package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/alecthomas/kong"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bookrecon/bookrecon/internal/auth"
	"github.com/bookrecon/bookrecon/internal/postgres"
	"github.com/bookrecon/bookrecon/internal/service"
)

// Globals are shared by every subcommand.
type Globals struct {
	DatabaseURL  string   `env:"BOOKRECON_DATABASE_URL" help:"PostgreSQL URL (default: the local stack's database, 127.0.0.1:5432/bookrecon); never shown, as it holds a password."`
	MigrateURL   string   `env:"BOOKRECON_MIGRATE_DATABASE_URL" help:"Direct PostgreSQL URL for migrate and the demo's database (default the database URL; required with a transaction pooler)."`
	Pooler       string   `env:"BOOKRECON_DATABASE_POOLER" enum:"none,session,transaction" default:"none" help:"What the database URL reaches: none (direct), session or transaction (a pooler in that mode, e.g. PgBouncer)."`
	KafkaBrokers []string `env:"BOOKRECON_KAFKA_BROKERS" default:"127.0.0.1:19092" help:"Kafka seed brokers."`
}

// open opens a pool of at most maxConns on the database URL, for one command.
func (g *Globals) open(ctx context.Context, maxConns int32) (*pgxpool.Pool, error) {
	return postgres.OpenWith(ctx, g.DatabaseURL, postgres.Options{MaxConns: maxConns, Pooler: postgres.Pooler(g.Pooler)})
}

// migrateURL is the direct session URL of migrate: the migrate URL, else the database URL but
// not behind a transaction pooler (the migrations' advisory lock lives in a session).
func (g *Globals) migrateURL() (string, error) {
	if g.MigrateURL == "" && postgres.Pooler(g.Pooler) == postgres.PoolerTransaction {
		return "", errors.New("BOOKRECON_DATABASE_POOLER=transaction: migrations need a direct session to the database " +
			"(their advisory lock lives in a session): set BOOKRECON_MIGRATE_DATABASE_URL")
	}
	return cmp.Or(g.MigrateURL, g.DatabaseURL), nil
}

type cli struct {
	Globals
	Topics  topicsCmd  `cmd:"" help:"Create the pipeline's topics (idempotent)."`
	Migrate migrateCmd `cmd:"" help:"Apply the database migrations."`
	Publish publishCmd `cmd:"" help:"Publish a JSONL file to a topic, keyed by bookingIntentId, with time rebasing."`
	Demo    demoCmd    `cmd:"" help:"Run the whole pipeline on the sample input and print the report."`
	Loadgen loadgenCmd `cmd:"" help:"Generate (and optionally publish) realistic load with its provider truth and expected outcomes."`
	Check   checkCmd   `cmd:"" help:"Check a run's invariants against the database and the output topics."`
	Tokens  tokensCmd  `cmd:"" help:"Manage the tokens file of the services' bearer tokens: init, add, list, revoke."`
	Ops     opsCmds    `embed:""`
}

func main() {
	var c cli
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	kctx := service.ParseFlags(&c, kong.Name("bookrecon"), kong.Description("bookrecon: booking attempt reconciliation."),
		kong.UsageOnError(), kong.BindTo(ctx, (*context.Context)(nil)))
	c.Globals.DatabaseURL = cmp.Or(c.Globals.DatabaseURL, postgres.DefaultURL)
	if err := kctx.Run(&c.Globals); err != nil {
		fmt.Fprintln(os.Stderr, "bookrecon:", auth.Redact(err.Error())) // a token typed as a value is not echoed
		var e exitError
		if errors.As(err, &e) {
			os.Exit(e.code)
		}
		os.Exit(1) // usage errors exited 80 in ParseFlags
	}
}

// exitError is a failure with its own exit status: check's "not settled" (3), and the refusals
// that are usage-like (service.ExitUsage, 80) although found after parsing, such as decide for
// an attempt its database does not hold.
type exitError struct {
	code int
	err  error
}

func (e exitError) Error() string { return e.err.Error() }
func (e exitError) Unwrap() error { return e.err }
