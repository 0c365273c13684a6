// Command ingester consumes booking.attempts.v1 and booking.manual-decisions.v1 into
// PostgreSQL (see internal/ingest). Configuration comes from flags or BOOKRECON_* variables.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/alecthomas/kong"

	"github.com/bookrecon/bookrecon/internal/ingest"
	"github.com/bookrecon/bookrecon/internal/service"
	"github.com/bookrecon/bookrecon/internal/topics"
)

type cli struct {
	service.SharedFlags
	DBConns       int32         `env:"BOOKRECON_INGESTER_DB_CONNS" default:"8" help:"Most database connections (at least 4 + lanes, 5 + lanes with two lanes or more)."`
	AdminAddr     string        `env:"BOOKRECON_INGESTER_ADMIN_ADDR" default:"127.0.0.1:9101" help:"Address of /metrics, /livez, /readyz."`
	RetentionDays int           `env:"BOOKRECON_RETENTION_DAYS" default:"14" help:"processed_event TTL in days; must exceed the input topics' retention."`
	MaxPoll       int           `env:"BOOKRECON_MAX_POLL_RECORDS" default:"8000" help:"Records per poll, split into the lanes' transactions."`
	Lanes         int           `env:"BOOKRECON_INGEST_LANES" default:"2" help:"Transactions a poll is split into and applied at once (docs/design.md#transactions-and-locks)."`
	BatchTimeout  time.Duration `env:"BOOKRECON_BATCH_TIMEOUT" default:"60s" help:"Bound on one try of a batch's database work; past it the batch pauses and is retried."`
	Group         string        `env:"BOOKRECON_INGESTER_GROUP" help:"Consumer group (default bookrecon-ingester)."`
	topics.Flags
	failpointFlags // only in a binary built with the failpoint tag (crash tests)
}

func (c cli) config() ingest.Config {
	return ingest.Config{
		Infra: c.Infra(c.DBConns, c.AdminAddr),
		Group: c.Group, Topics: c.Flags.Names(), RetentionDays: c.RetentionDays, MaxPollRecords: c.MaxPoll, BatchTimeout: c.BatchTimeout,
		Lanes: c.Lanes,
	}
}

// Validate refuses a database pool the ingester cannot run on, and a transaction pooler without
// a direct URL to migrate over, when the command line is parsed (a usage error: exit 80).
func (c cli) Validate() error {
	var f service.FlagChecks
	f.Check(c.config().PoolConfig().Validate())
	f.AtLeast("retention-days", "BOOKRECON_RETENTION_DAYS", c.RetentionDays, 3)
	f.AtLeast("max-poll", "BOOKRECON_MAX_POLL_RECORDS", c.MaxPoll, 1)
	f.AtLeast("lanes", "BOOKRECON_INGEST_LANES", c.Lanes, 1)
	if c.BatchTimeout < time.Second {
		f.Check(fmt.Errorf("--batch-timeout (BOOKRECON_BATCH_TIMEOUT) must be at least 1s, got %s", c.BatchTimeout))
	}
	if len(c.KafkaBrokers) == 0 || c.KafkaBrokers[0] == "" {
		f.Check(errors.New("--kafka-brokers (BOOKRECON_KAFKA_BROKERS) is required: host:port of at least one broker"))
	}
	return f.Err()
}

func main() {
	var c cli
	service.ParseFlags(&c, kong.Description("bookrecon ingester"))
	service.Main("ingester", func(ctx context.Context, log *slog.Logger) error {
		m, err := c.LoadProviders()
		if err != nil {
			return err
		}
		if ctx, err = c.arm(ctx, log); err != nil {
			return err
		}
		cfg := c.config()
		cfg.Providers = m
		return ingest.Run(ctx, cfg, ingest.Deps{Logger: log})
	})
}
