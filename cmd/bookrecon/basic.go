package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/bookrecon/bookrecon/internal/kafka"
	"github.com/bookrecon/bookrecon/internal/postgres"
	"github.com/bookrecon/bookrecon/internal/publish"
	"github.com/bookrecon/bookrecon/internal/topics"
	"github.com/bookrecon/bookrecon/migrations"
)

type topicsCmd struct {
	ReplicationFactor int16 `default:"1" help:"Replication factor (1 for the local single-node broker; from 3, as in production, the topics get min.insync.replicas=2)."`
	topics.Flags
}

func (c *topicsCmd) Run(ctx context.Context, g *Globals) error {
	cl, err := kgo.NewClient(kafka.Options(g.KafkaBrokers, nil, nil, "cli")...)
	if err != nil {
		return err
	}
	defer cl.Close()
	names := c.Flags.Names().All()
	if err := topics.Ensure(ctx, kadm.NewClient(cl), c.ReplicationFactor, c.Flags.Names()); err != nil {
		return err
	}
	for _, t := range names {
		fmt.Printf("topic %s (%d partitions)\n", t, topics.Partitions)
	}
	return nil
}

type migrateCmd struct{}

func (migrateCmd) Run(ctx context.Context, g *Globals) error {
	u, err := g.migrateURL()
	if err != nil {
		return err
	}
	// Two connections: goose's session lock holds one while the migrations run on the other.
	pool, err := postgres.Open(ctx, u, 2)
	if err != nil {
		return err
	}
	defer pool.Close()
	v, err := migrations.UpPool(ctx, pool)
	if err != nil {
		return err
	}
	fmt.Printf("schema version %d\n", v)
	return nil
}

type publishCmd struct {
	File      string `arg:"" type:"existingfile" help:"JSONL file, one record per line."`
	Topic     string `help:"Target topic (default the attempts topic: booking.attempts.v1, with the topic suffix if one is set)."`
	Paced     bool   `help:"Publish each record at its rebased occurredAt (the sample replay); default: all at once."`
	NoRebase  bool   `help:"Keep occurredAt as written instead of shifting the first record to now."`
	EpochFrom string `type:"existingfile" placeholder:"JSONL" help:"Rebase by the first occurredAt of this file instead of FILE's own, to replay two files on one timeline (the manual decisions beside the attempts)."`
	topics.Flags
}

// Validate refuses contradictory flags (a usage error: exit 80).
func (c *publishCmd) Validate() error {
	if c.NoRebase && c.EpochFrom != "" {
		return errors.New("--epoch-from rebases, --no-rebase does not: give one of them")
	}
	return nil
}

func (c *publishCmd) Run(ctx context.Context, g *Globals) error {
	c.Topic = cmp.Or(c.Topic, c.Flags.Names().Attempts)
	return c.run(ctx, g.KafkaBrokers, os.Stdout, time.Now())
}

// run publishes c.File to c.Topic on brokers, shifting occurredAt so that the epoch (the first
// occurredAt of c.EpochFrom, or of c.File) becomes now, and reports on out.
func (c *publishCmd) run(ctx context.Context, brokers []string, out io.Writer, now time.Time) error {
	lines, err := publish.ReadLines(c.File)
	if err != nil {
		return err
	}
	epochLines := lines
	if c.EpochFrom != "" {
		if epochLines, err = publish.ReadLines(c.EpochFrom); err != nil {
			return err
		}
	}
	var shift time.Duration
	if epoch, ok := publish.Epoch(epochLines); ok && !c.NoRebase {
		shift = now.Sub(epoch)
	}
	cl, err := kgo.NewClient(kafka.Options(brokers, nil, nil, "cli")...)
	if err != nil {
		return err
	}
	defer cl.Close()
	if err := publish.Run(ctx, cl, lines, publish.Options{Topic: c.Topic, Shift: shift, Paced: c.Paced}); err != nil {
		return err
	}
	_, err = fmt.Fprintf(out, "published %d records to %s (occurredAt shifted by %s)\n", len(lines), c.Topic, shift.Round(time.Second))
	return err
}
