package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/bookrecon/bookrecon/internal/harness/check"
	"github.com/bookrecon/bookrecon/internal/harness/loadgen"
	"github.com/bookrecon/bookrecon/internal/kafka"
	"github.com/bookrecon/bookrecon/internal/topics"
	"github.com/bookrecon/bookrecon/providers"
)

type loadgenCmd struct {
	Out          string        `required:"" help:"Folder for attempts.jsonl, provider-truth.json (load it into the simulator) and expected.json."`
	Intents      int           `default:"10000" help:"Booking intents (about 2.1 events each)."`
	Seed         uint64        `default:"1" help:"Random seed: the same seed gives the same files."`
	Spacing      time.Duration `default:"1ms" help:"occurredAt step between events."`
	Failure      float64       `default:"0.10" help:"Share of definitive failures."`
	Unknown      float64       `default:"0.10" help:"Share of outcome_unknown settled by the reconciler."`
	NotSent      float64       `default:"0.02" help:"Share of connect_timeout with requestSent false."`
	OutOfOrder   float64       `default:"0.03" help:"Share of outcome-before-start pairs."`
	KeyConflict  float64       `default:"0.01" help:"Share of key conflicts."`
	BlindRetry   float64       `default:"0.01" help:"Share of blind retries."`
	Redeliveries float64       `default:"0.05" help:"Share of records published twice."`
	Publish      bool          `help:"Also publish the records to the attempts topic as fast as the broker takes them."`
	topics.Flags
}

func (c *loadgenCmd) mix() loadgen.Mix {
	return loadgen.Mix{Failure: c.Failure, Unknown: c.Unknown, NotSent: c.NotSent, OutOfOrder: c.OutOfOrder,
		KeyConflict: c.KeyConflict, BlindRetry: c.BlindRetry, Redeliveries: c.Redeliveries}
}

// Validate refuses a run that cannot be generated (a usage error: exit 80).
func (c *loadgenCmd) Validate() error {
	var errs []error
	if c.Intents < 1 {
		errs = append(errs, fmt.Errorf("--intents %d: at least 1", c.Intents))
	}
	if c.Spacing <= 0 {
		errs = append(errs, fmt.Errorf("--spacing %s: must be positive (occurredAt must move forward)", c.Spacing))
	}
	return errors.Join(append(errs, c.mix().Validate())...)
}

func (c *loadgenCmd) Run(ctx context.Context, g *Globals) error {
	out := loadgen.Generate(loadgen.Config{Intents: c.Intents, Seed: c.Seed, Start: time.Now(), Spacing: c.Spacing, Mix: c.mix()})
	if err := out.Write(c.Out); err != nil {
		return err
	}
	fmt.Printf("wrote %d records (%d unique events, %d key conflicts, %d blind retries) to %s\n",
		len(out.Records), out.UniqueEvents, out.KeyConflicts, out.BlindRetries, c.Out)
	if !c.Publish {
		return nil
	}
	cl, err := kgo.NewClient(kafka.Options(g.KafkaBrokers, nil, nil, "loadgen")...)
	if err != nil {
		return err
	}
	defer cl.Close()
	start, topic := time.Now(), c.Flags.Names().Attempts
	for i, r := range out.Records {
		cl.Produce(ctx, &kgo.Record{Topic: topic, Key: out.Keys[i], Value: r}, nil)
	}
	if err := cl.Flush(ctx); err != nil {
		return err
	}
	fmt.Printf("published in %s\n", time.Since(start).Round(time.Millisecond))
	return nil
}

type checkCmd struct {
	Input     string         `required:"" help:"Folder written by loadgen (attempts.jsonl, provider-truth.json, expected.json)."`
	Providers string         `env:"BOOKRECON_PROVIDERS" type:"existingfile" help:"Capability map, for the deadlines."`
	Group     string         `default:"bookrecon-ingester" help:"The ingester's consumer group."`
	Wait      *time.Duration `placeholder:"DURATION" help:"How long to wait for the pipeline to settle before checking (consumer lag 0, outbox backlog 0, every UNKNOWN attempt terminal or escalated); not settled by then exits 3. Default: the longest escalation deadline of the capability map (30m without one) + 30s."`
	topics.Flags
}

// exitNotSettled is check's exit status when the pipeline did not settle within --wait: the
// invariants were not checked (1 is "invariants violated", 80 a usage error).
const exitNotSettled = 3

// settleMargin is added to the longest escalation deadline for check's default --wait.
const settleMargin = 30 * time.Second

// Validate refuses a negative --wait (a usage error: exit 80).
func (c *checkCmd) Validate() error {
	if c.Wait != nil && *c.Wait < 0 {
		return fmt.Errorf("--wait %s: must not be negative", *c.Wait)
	}
	return nil
}

func (c *checkCmd) Run(ctx context.Context, g *Globals) error {
	return c.run(ctx, g, os.Stdout)
}

func (c *checkCmd) run(ctx context.Context, g *Globals, w io.Writer) error {
	in, err := loadgen.Read(c.Input)
	if err != nil {
		return err
	}
	var m *providers.Map
	if c.Providers != "" {
		if m, err = providers.LoadMap(c.Providers); err != nil {
			return err
		}
	}
	pool, err := g.open(ctx, 4)
	if err != nil {
		return err
	}
	defer pool.Close()
	cl, err := kgo.NewClient(kafka.Options(g.KafkaBrokers, nil, nil, "cli")...)
	if err != nil {
		return err
	}
	defer cl.Close()
	tp := c.Flags.Names()
	wait := check.LongestDeadline(m) + settleMargin
	if c.Wait != nil {
		wait = *c.Wait
	}
	fmt.Fprintf(w, "waiting up to %s for the pipeline to settle (--wait)\n", wait)
	src := check.Source{Pool: pool, Admin: kadm.NewClient(cl), Group: c.Group, Input: []string{tp.Attempts, tp.Decisions}}
	_, err = check.WaitSettled(ctx, src, check.WaitOptions{Wait: wait, Report: func(p check.Progress, waited time.Duration) {
		fmt.Fprintf(w, "%5s  %s\n", age(waited), p)
	}})
	if errors.Is(err, check.ErrNotSettled) {
		return exitError{code: exitNotSettled, err: fmt.Errorf("%w; the invariants were not checked "+
			"(raise --wait; bookrecon escalations list and bookrecon outbox list show what waits on a person)", err)}
	}
	if err != nil {
		return err
	}
	fmt.Fprintln(w, "settled; checking")
	rep, err := check.Run(ctx, pool, g.KafkaBrokers, tp, check.Input{Run: in, Providers: m, Consumer: c.Group + "/" + tp.Attempts})
	if err != nil {
		return err
	}
	fmt.Fprint(w, rep)
	if !rep.OK() {
		return fmt.Errorf("invariants violated")
	}
	return nil
}
