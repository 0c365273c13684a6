// Package ingest is the ingester: a franz-go consumer group on booking.attempts.v1 and
// booking.manual-decisions.v1 with auto-commit off. Per poll it runs one PostgreSQL transaction
// (or one per lane, Config.Lanes) — insert-first dedup rows, state transitions, audit, anomaly,
// escalation and outbox rows — and commits the offsets only after the database commit
// (docs/design.md#shape, docs/design.md#storage-rules). A record the database refuses is
// isolated under a savepoint, so one record that fails for a reason of its own is dead-lettered
// without poisoning its batch; an outage of PostgreSQL or Kafka pauses the batch and retries
// it, never dead-letters it.
//
// The data path, file by file: consume.go polls a batch, pauses it while PostgreSQL or Kafka is
// away and commits its offsets after the database commit; decode.go decodes and validates it on
// every core; lanes.go splits it into lanes applied at once; apply.go writes a lane — the
// set-based path, and the savepoint path that isolates a record the database refuses (every
// call into internal/attempt is there); deadletter.go writes dead letters through the outbox;
// retention.go keeps processed_event's partitions (a maintenance loop, ticker → runOnce) and
// checks the topics' retention at start. Run (this file) wires them into service.Run; Applier
// runs the database side alone (`make bench`).
package ingest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/bookrecon/bookrecon/internal/ingest/testsignal"
	"github.com/bookrecon/bookrecon/internal/kafka"
	"github.com/bookrecon/bookrecon/internal/lag"
	"github.com/bookrecon/bookrecon/internal/relay"
	"github.com/bookrecon/bookrecon/internal/service"
	"github.com/bookrecon/bookrecon/internal/telemetry"
	"github.com/bookrecon/bookrecon/internal/topics"
	"github.com/bookrecon/bookrecon/processedevent"
	"github.com/bookrecon/bookrecon/providers"
)

// Topics names every topic the pipeline uses (topics.Names); tests give each run its own.
type Topics = topics.Names

// Config configures the ingester. Zero values take the documented defaults. Of Infra,
// Brokers, DatabaseURL are required; MaxDBConns defaults to 8 (below Needs(Lanes).Min() Run refuses
// to start) and AdminAddr to 127.0.0.1:9101 ("-" disables it).
type Config struct {
	service.Infra
	Providers *providers.Map // capability map (required): known providers, lookups, maxVersions
	Group     string         // consumer group (default kafka.GroupIngester)
	Topics    Topics         // default topics.Default()
	// MaxPollRecords bounds a batch (default 8000, about 4,000 a lane: the per-batch work — the
	// lanes' pre-read, the batch's reads, statements, commits, the offset commit — amortises;
	// ×1.09–1.16 over 4000 in BenchmarkIngestEndToEnd, docs/performance.md; a batch holds its
	// intents' locks while it runs: 315 ms on average on 2 cores at full load, against 174 ms
	// at 4000).
	MaxPollRecords int
	// TransportTimeoutCodes extend events.DefaultTransportTimeoutCodes.
	TransportTimeoutCodes []string
	// RetentionDays is processed_event's TTL in days (default 14). The input topics' retention
	// plus RetentionMargin must fit in it, or Run refuses to start (docs/retention.md).
	RetentionDays int
	// RetentionMargin is added to the topics' retention in that check (default 24h).
	RetentionMargin time.Duration
	// FirstCheck is the delay before the reconciler's first check of a new UNKNOWN (default 1s).
	FirstCheck time.Duration
	// BatchTimeout bounds one try of a batch's database work (default 60 s; an 8,000-record batch
	// took 315 ms on average in BenchmarkIngestEndToEnd on 2 cores). A database that stops answering without closing the
	// connection — a gray failure — then pauses the ingester (metric, /readyz, log) and the batch
	// is retried, instead of hanging it while it still looks ready.
	BatchTimeout time.Duration
	// Lanes is how many transactions a poll is split into and applied at once, each on its own
	// connection (default 2; 1: one transaction per poll). Records that share an intent, key,
	// event id, subject or reference stay in one lane, in poll order, and so do records their
	// stored rows link — a key's stored attempt, a kept decision's reference, a reference's
	// stored holder — read unlocked before the split (pollIdentities.split, attempt.ReadLinks), so that
	// lanes leave the database one lane leaves (docs/design.md#transactions-and-locks). The
	// poll's offsets are committed once every lane has committed.
	Lanes int
	// PerEventOnly disables the set-based fast path: every record is applied on its own under
	// a savepoint (a switch if the fast path misbehaves).
	PerEventOnly bool
}

func (c Config) withDefaults() Config {
	c.Group = cmp.Or(c.Group, kafka.GroupIngester)
	if c.Topics == (Topics{}) {
		c.Topics = topics.Default()
	}
	c.MaxPollRecords = cmp.Or(c.MaxPollRecords, 8000)
	c.RetentionDays = cmp.Or(c.RetentionDays, 14)
	c.RetentionMargin = cmp.Or(c.RetentionMargin, 24*time.Hour)
	c.FirstCheck = cmp.Or(c.FirstCheck, time.Second)
	c.AdminAddr = cmp.Or(c.AdminAddr, "127.0.0.1:9101")
	c.MaxDBConns = cmp.Or(c.MaxDBConns, 8)
	c.BatchTimeout = cmp.Or(c.BatchTimeout, time.Minute)
	c.Lanes = cmp.Or(c.Lanes, 2)
	return c
}

func (c Config) validate() error {
	var errs []error
	if len(c.Brokers) == 0 {
		errs = append(errs, errors.New("ingest: Brokers is required"))
	}
	if c.DatabaseURL == "" {
		errs = append(errs, errors.New("ingest: DatabaseURL is required"))
	}
	if c.Providers == nil {
		errs = append(errs, errors.New("ingest: Providers (capability map) is required"))
	}
	if c.BatchTimeout < time.Second {
		errs = append(errs, fmt.Errorf("ingest: BatchTimeout %s < 1s", c.BatchTimeout))
	}
	if c.Lanes < 1 {
		errs = append(errs, fmt.Errorf("ingest: Lanes %d < 1", c.Lanes))
	}
	if c.RetentionDays < 3 {
		errs = append(errs, fmt.Errorf("ingest: RetentionDays %d < 3", c.RetentionDays))
	}
	if err := c.PoolConfig().Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Needs are the parts of an ingester with lanes lanes (Config.Lanes) that hold a database
// connection at the same time; the smallest pool it runs on is their sum. With more than one
// lane, the next batch's read of its stored links runs while the lanes' transactions do.
func Needs(lanes int) service.Needs {
	n := service.Needs{{What: "batch transactions (one per lane)", Conns: int32(lanes)}, service.RelayNeed, {What: "partition maintenance", Conns: 1},
		{What: "lag collector (on scrape)", Conns: 1}, service.ReadinessNeed}
	if lanes > 1 {
		n = append(n, service.Need{What: "the next batch's read of its stored links", Conns: 1})
	}
	return n
}

// spec is how service.Run runs the ingester (c with its defaults). It has no Spec.Publish: the
// ingester's relay shares its consumer's client (docs/decisions.md, "Where relays run"), so Run
// starts it in Body.Start.
func (c Config) spec() service.Spec {
	return service.Spec{Name: "ingester", Infra: c.Infra, Needs: Needs(c.Lanes), Migrate: true}
}

// clientOpts are the consumer's options beyond kafka.Options: a consumer group on the two input
// topics, reading committed records only, auto-commit off, rebalances blocked while a batch is
// in hand.
func (c Config) clientOpts(sig testsignal.Ingester) []kgo.Opt {
	opts := []kgo.Opt{
		kgo.ConsumerGroup(c.Group),
		kgo.ConsumeTopics(c.Topics.Attempts, c.Topics.Decisions),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), // an aborted transaction's records are never facts
		// Transaction markers are delivered too, only to be committed past: otherwise the group's
		// committed offset stays before a partition's last marker and its lag never reaches 0.
		kgo.KeepControlRecords(),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	}
	if f := sig.OnAssigned; f != nil {
		opts = append(opts, kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, a map[string][]int32) { f(a) }))
	}
	return opts
}

// PoolConfig is the pool c asks for, with the defaults; Run refuses to start when its Validate
// fails.
func (c Config) PoolConfig() service.PoolConfig {
	return c.withDefaults().spec().PoolConfig()
}

// Deps are the ingester's injected dependencies, those of every service.
type Deps = service.Deps

// Ingester is a running ingester's state.
type Ingester struct {
	cfg     Config
	log     *slog.Logger
	pool    *pgxpool.Pool
	client  *kgo.Client
	metrics *Metrics
	writeConfig
	attempts processedevent.Store
	decs     processedevent.Store
	parts    *partitions
	// signals are the test signals Run found on its context (none in production).
	signals testsignal.Ingester

	// paused holds why the batch in hand keeps failing (nil while batches commit): /readyz
	// reports it, so a stalled ingester is not "ready".
	paused atomic.Pointer[string]
	// pauseLog logs the tries of a paused batch: when the pause starts, then every 30 s with
	// repeats, and "batch resumed" when a batch commits again.
	pauseLog *telemetry.Repeated
}

// Run starts the ingester and blocks until ctx ends; it then finishes the batch in hand,
// commits, leaves the group and closes its Kafka client (which ends a publish in flight), stops
// the relay and closes the pool (service.Run's two-phase shutdown). Before it consumes it waits
// out an outage of Kafka or PostgreSQL, and refuses to start (ErrRetention) when an input topic
// keeps records longer than processed_event keeps their dedup rows. /readyz is not ready while a
// batch is paused, an outbox topic is paused or no broker answered within kafka.AnsweredWithin.
func Run(ctx context.Context, cfg Config, deps Deps) error {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return err
	}
	sig := testsignal.From(ctx)
	var in *Ingester
	return service.Run(ctx, cfg.spec(), deps, service.Body{
		Start: func(ctx context.Context, rt *service.Runtime) error {
			cl, err := kgo.NewClient(append(kafka.Options(cfg.Brokers, rt.Logger, rt.Registry, "ingester"), cfg.clientOpts(sig)...)...)
			if err != nil {
				return fmt.Errorf("ingest: kafka client: %w", err)
			}
			in = newIngester(cfg, rt.Logger, rt.Pool, rt.Registry)
			in.client, in.signals = cl, sig
			err = service.UntilUp(ctx, rt.Logger, "kafka and postgresql", func() error {
				if err := in.checkRetention(ctx); err != nil {
					return err
				}
				_, err := in.parts.maintain(ctx)
				return err
			}, ErrRetention)
			if err != nil {
				cl.Close()
				return err
			}
			rt.Registry.MustRegister(lag.New(lag.Config{Admin: kadm.NewClient(cl), Groups: []string{cfg.Group}, Pool: rt.Pool, Providers: cfg.Providers}))
			t := cfg.Topics
			// The ingester's relay shares the consumer's client (docs/decisions.md, "Where relays run").
			rl := &relay.Relay{Pool: rt.Pool, Client: cl, Logger: rt.Logger, Metrics: relay.NewMetrics(rt.Registry, []string{t.AttemptsDLQ, t.DecisionsDLQ, t.Resolutions, t.Escalations}),
				Config: relay.Config{Holder: "ingester-" + uuid.NewString()}}
			rt.Go(func(ctx context.Context) { _ = rl.Run(ctx) })
			brokers := kafka.NewBrokerWatch(cl)
			rt.Go(brokers.Run)
			rt.ReadyWhen(func(context.Context) error {
				if why := in.paused.Load(); why != nil {
					return fmt.Errorf("batch paused: %s", *why)
				}
				if err := rl.Ready(); err != nil {
					return err
				}
				return brokers.Ready() // a broker answered within kafka.AnsweredWithin
			})
			return nil
		},
		Loop: func(ctx context.Context, rt *service.Runtime) error {
			rt.Go(in.parts.run)
			err := in.consume(ctx)
			// Phase two starts here: intake stopped and the batch in hand committed; leave the
			// group and close the client first, so that a publish in flight ends with it, then
			// service.Run stops the relay and the rest and closes the pool.
			in.client.Close()
			return err
		},
	})
}

// newIngester builds the database side of an ingester; Run adds the Kafka client.
func newIngester(cfg Config, log *slog.Logger, pool *pgxpool.Pool, reg *prometheus.Registry) *Ingester {
	return &Ingester{
		cfg: cfg, log: log, pool: pool, metrics: NewMetrics(reg),
		writeConfig: newWriteConfig(cfg),
		attempts:    processedevent.Store{Consumer: cfg.Group + "/" + cfg.Topics.Attempts},
		decs:        processedevent.Store{Consumer: cfg.Group + "/" + cfg.Topics.Decisions},
		parts:       newPartitions(pool, log, cfg.RetentionDays),
		pauseLog:    &telemetry.Repeated{Logger: log, Level: slog.LevelWarn, Msg: "batch paused; retrying"},
	}
}
