// Command bookrecon is the producer and operations CLI: create topics, migrate the database,
// publish JSONL files with the samples' time rebasing, and run the demo.
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

	"github.com/bookrecon/bookrecon/internal/postgres"
	"github.com/bookrecon/bookrecon/internal/service"
)

// Globals are shared by every subcommand.
type Globals struct {
	DatabaseURL  string   `env:"BOOKRECON_DATABASE_URL" help:"PostgreSQL URL (default: the local stack's database, 127.0.0.1:5432/bookrecon); never shown, as it holds a password."`
	KafkaBrokers []string `env:"BOOKRECON_KAFKA_BROKERS" default:"127.0.0.1:19092" help:"Kafka seed brokers."`
}

type cli struct {
	Globals
	Topics  topicsCmd  `cmd:"" help:"Create the pipeline's topics (idempotent)."`
	Migrate migrateCmd `cmd:"" help:"Apply the database migrations."`
	Publish publishCmd `cmd:"" help:"Publish a JSONL file to a topic, keyed by bookingIntentId, with time rebasing."`
	Demo    demoCmd    `cmd:"" help:"Run the whole pipeline on the sample input and print the report."`
	Loadgen loadgenCmd `cmd:"" help:"Generate (and optionally publish) realistic load with its provider truth and expected outcomes."`
	Check   checkCmd   `cmd:"" help:"Check a run's invariants against the database and the output topics."`
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
		fmt.Fprintln(os.Stderr, "bookrecon:", err)
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
