// Package ingest is the ingester: a franz-go consumer group on booking.attempts.v1 and
// booking.manual-decisions.v1 with auto-commit off. Per poll it runs one PostgreSQL transaction
// for the batch — insert-first dedup rows, state transitions, audit, anomaly, escalation and
// outbox rows — and commits the offsets only after the database commit (DESIGN.md "Shape",
// "Storage rules"). Each record runs under a savepoint, so one record that fails for a reason
// of its own is dead-lettered without poisoning its batch; an outage of PostgreSQL or Kafka
// pauses the batch and retries it, never dead-letters it.
package ingest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/bookrecon/bookrecon/events"
	"github.com/bookrecon/bookrecon/internal/attempt"
	"github.com/bookrecon/bookrecon/internal/kafka"
	"github.com/bookrecon/bookrecon/internal/lag"
	"github.com/bookrecon/bookrecon/internal/outbox"
	"github.com/bookrecon/bookrecon/internal/postgres"
	"github.com/bookrecon/bookrecon/internal/relay"
	"github.com/bookrecon/bookrecon/internal/service"
	"github.com/bookrecon/bookrecon/internal/telemetry"
	"github.com/bookrecon/bookrecon/internal/topics"
	"github.com/bookrecon/bookrecon/processedevent"
	"github.com/bookrecon/bookrecon/providers"
)

// ReasonProcessingFailed is the dead-letter reason of a valid record whose own data made its
// transaction fail (a PostgreSQL data or integrity error), with the SQLSTATE as detail.
const ReasonProcessingFailed = "processing_failed"

// Topics names every topic the pipeline uses (topics.Names); tests give each run its own.
type Topics = topics.Names

// Config configures the ingester. Zero values take the documented defaults.
type Config struct {
	Brokers     []string       // seed brokers (required)
	DatabaseURL string         // PostgreSQL URL (required)
	Providers   *providers.Map // capability map (required): known providers, lookups, maxVersions
	Group       string         // consumer group (default kafka.GroupIngester)
	Topics      Topics         // default topics.Default()
	// MigrateDatabaseURL is a direct session to the same database for the migrations (default
	// DatabaseURL; required behind a transaction pooler: service.PoolConfig).
	MigrateDatabaseURL string
	Pooler             postgres.Pooler // what DatabaseURL reaches (default none)
	// MaxPollRecords bounds a batch (default 4000: the per-batch statements amortise, +20% over
	// 1000 in `make bench`; a batch holds its intents' locks for well under a second).
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
	// AdminAddr serves /metrics, /livez, /readyz (default 127.0.0.1:9101; "" keeps the default,
	// "-" disables).
	AdminAddr string
	// MaxDBConns bounds the pool (default 8; below Needs().Min() Run refuses to start).
	MaxDBConns int32
	// BatchTimeout bounds one try of a batch's database work (default 60 s; a 4,000-record batch
	// takes well under a second). A database that stops answering without closing the
	// connection — a gray failure — then pauses the ingester (metric, /readyz, log) and the batch
	// is retried, instead of hanging it while it still looks ready.
	BatchTimeout time.Duration
	// PerEventOnly disables the set-based fast path: every record is applied on its own under
	// a savepoint (a switch if the fast path misbehaves).
	PerEventOnly bool
}

func (c Config) withDefaults() Config {
	c.Group = cmp.Or(c.Group, kafka.GroupIngester)
	if c.Topics == (Topics{}) {
		c.Topics = topics.Default()
	}
	c.MaxPollRecords = cmp.Or(c.MaxPollRecords, 4000)
	c.RetentionDays = cmp.Or(c.RetentionDays, 14)
	c.RetentionMargin = cmp.Or(c.RetentionMargin, 24*time.Hour)
	c.FirstCheck = cmp.Or(c.FirstCheck, time.Second)
	c.AdminAddr = cmp.Or(c.AdminAddr, "127.0.0.1:9101")
	c.MaxDBConns = cmp.Or(c.MaxDBConns, 8)
	c.BatchTimeout = cmp.Or(c.BatchTimeout, time.Minute)
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
	if c.RetentionDays < 3 {
		errs = append(errs, fmt.Errorf("ingest: RetentionDays %d < 3", c.RetentionDays))
	}
	if err := c.PoolConfig().Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Needs are the parts of the ingester that hold a database connection at the same time; the
// smallest pool it runs on is their sum.
func Needs() service.Needs {
	return service.Needs{{What: "batch transaction", Conns: 1}, service.RelayNeed, {What: "partition maintenance", Conns: 1},
		{What: "lag collector (on scrape)", Conns: 1}, service.ReadinessNeed}
}

// PoolConfig is the pool c asks for, with the defaults; Run refuses to start when its Validate
// fails.
func (c Config) PoolConfig() service.PoolConfig {
	c = c.withDefaults()
	return service.PoolConfig{Name: "ingester", URL: c.DatabaseURL, MigrateURL: c.MigrateDatabaseURL, Pooler: c.Pooler,
		MaxConns: c.MaxDBConns, Needs: Needs(), Migrate: true}
}

// Deps are the ingester's injected dependencies.
type Deps struct {
	Logger   *slog.Logger
	Registry *prometheus.Registry // nil: a fresh one
	// AdminStarted, when set, receives the admin server's bound address.
	AdminStarted func(addr string)
	// AfterDBCommit, when set, runs between the database commit and the offset commit (crash tests).
	AfterDBCommit func()
	// BeforeRecord, when set, runs inside the batch transaction before the record at index of
	// the batch is applied; index 0 starts a transaction attempt (crash tests, see Failpoint).
	BeforeRecord func(index int)
	// OnAssigned, when set, runs at the start of every consumer-group session, i.e. after every
	// rebalance, with the partitions newly assigned (possibly none) (rebalance tests).
	OnAssigned func(assigned map[string][]int32)
}

// Ingester is a running ingester's state.
type Ingester struct {
	cfg      Config
	log      *slog.Logger
	pool     *pgxpool.Pool
	client   *kgo.Client
	metrics  *Metrics
	acfg     attempt.Config
	codes    []string
	attempts processedevent.Store
	decs     processedevent.Store
	deps     Deps

	mu         sync.Mutex
	knownDays  map[time.Time]bool
	minOccured time.Time
	// paused holds why the batch in hand keeps failing (nil while batches commit): /readyz
	// reports it, so a stalled ingester is not "ready".
	paused atomic.Pointer[string]
	// pauseLog logs the tries of a paused batch: when the pause starts, then every 30 s with
	// repeats, and "batch resumed" when a batch commits again.
	pauseLog *telemetry.Repeated
}

// Run starts the ingester and blocks until ctx ends; it then finishes the batch in hand,
// commits, leaves the group and closes the pool (two-phase shutdown).
func Run(ctx context.Context, cfg Config, deps Deps) error {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return err
	}
	if deps.Logger == nil {
		deps.Logger = slog.Default()
	}
	reg := deps.Registry
	if reg == nil {
		reg = telemetry.NewRegistry()
	}
	var admin net.Listener
	if cfg.AdminAddr != "-" {
		ln, err := telemetry.Listen(cfg.AdminAddr)
		if err != nil {
			return err
		}
		admin = ln
		defer admin.Close() // closed by the admin server too; a second Close is harmless
	}
	pool, err := service.OpenPool(ctx, deps.Logger, cfg.PoolConfig())
	if err != nil {
		return err
	}
	defer pool.Close()
	in := newIngester(cfg, deps, pool, reg)
	opts := append(kafka.Options(cfg.Brokers, deps.Logger, reg, "ingester"),
		kgo.ConsumerGroup(cfg.Group),
		kgo.ConsumeTopics(cfg.Topics.Attempts, cfg.Topics.Decisions),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), // an aborted transaction's records are never facts
		// Transaction markers are delivered too, only to be committed past: otherwise the group's
		// committed offset stays before a partition's last marker and its lag never reaches 0.
		kgo.KeepControlRecords(),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	)
	if deps.OnAssigned != nil {
		opts = append(opts, kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, a map[string][]int32) { deps.OnAssigned(a) }))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("ingest: kafka client: %w", err)
	}
	in.client = cl
	err = service.UntilUp(ctx, deps.Logger, "kafka and postgresql", func() error {
		if err := in.checkRetention(ctx); err != nil {
			return err
		}
		return in.maintainPartitions(ctx)
	}, ErrRetention)
	if err != nil {
		cl.Close()
		return err
	}

	reg.MustRegister(lag.New(lag.Config{Admin: kadm.NewClient(cl), Groups: []string{cfg.Group}, Pool: pool, Providers: cfg.Providers}))

	var wg sync.WaitGroup
	bg, stopBG := context.WithCancel(context.WithoutCancel(ctx))
	t := cfg.Topics
	// The ingester's relay shares the consumer's client (docs/decisions.md, "Where relays run").
	rl := &relay.Relay{Pool: pool, Client: cl, Logger: deps.Logger, Metrics: relay.NewMetrics(reg, []string{t.AttemptsDLQ, t.DecisionsDLQ, t.Resolutions, t.Escalations}),
		Config: relay.Config{Holder: "ingester-" + uuid.NewString()}}
	wg.Go(func() { _ = rl.Run(bg) })
	brokers := kafka.NewBrokerWatch(cl)
	wg.Go(func() { brokers.Run(bg) })
	if admin != nil {
		wg.Go(func() {
			ready := func(ctx context.Context) error {
				if why := in.paused.Load(); why != nil {
					return fmt.Errorf("batch paused: %s", *why)
				}
				if err := rl.Ready(); err != nil {
					return err
				}
				if err := pool.Ping(ctx); err != nil {
					return err
				}
				return brokers.Ready() // a broker answered within kafka.AnsweredWithin
			}
			if err := telemetry.ServeListener(bg, admin, reg, ready, deps.Logger, deps.AdminStarted); err != nil {
				deps.Logger.Error("admin server", "err", err)
			}
		})
	}
	wg.Go(func() {
		t := time.NewTicker(time.Hour)
		defer t.Stop()
		for {
			select {
			case <-bg.Done():
				return
			case <-t.C:
				if err := in.maintainPartitions(bg); err != nil {
					deps.Logger.Warn("partition maintenance", "err", err)
				}
			}
		}
	})

	err = in.consume(ctx)
	// Phase two: intake stopped and the batch in hand committed; leave the group, stop the
	// relay and admin server, then close the pool (deferred).
	cl.Close()
	stopBG()
	wg.Wait()
	return err
}

// newIngester builds the database side of an ingester; Run adds the Kafka client.
func newIngester(cfg Config, deps Deps, pool *pgxpool.Pool, reg *prometheus.Registry) *Ingester {
	return &Ingester{
		cfg: cfg, log: deps.Logger, pool: pool, metrics: NewMetrics(reg), deps: deps,
		acfg:      attempt.Config{Policies: attempt.PoliciesFrom(cfg.Providers), FirstCheck: cfg.FirstCheck, ResolutionsTopic: cfg.Topics.Resolutions, EscalationsTopic: cfg.Topics.Escalations},
		codes:     append(events.DefaultTransportTimeoutCodes(), cfg.TransportTimeoutCodes...),
		attempts:  processedevent.Store{Consumer: cfg.Group + "/" + cfg.Topics.Attempts},
		decs:      processedevent.Store{Consumer: cfg.Group + "/" + cfg.Topics.Decisions},
		knownDays: map[time.Time]bool{},
		pauseLog:  &telemetry.Repeated{Logger: deps.Logger, Level: slog.LevelWarn, Msg: "batch paused; retrying"},
	}
}

// Applier applies batches of records to PostgreSQL with the ingester's own code for one poll —
// decode and validation (Decode), then insert-first dedup, state changes, audit, anomalies,
// outbox rows and dead letters in one transaction (Apply) — without Kafka: no consumer group,
// no offset commit, no relay, no partition maintenance, so no stale_event bound either (Run sets
// it from the oldest kept processed_event day). `make bench` measures the PostgreSQL ceiling of
// the ingester's work with it (docs/performance.md).
type Applier struct{ in *Ingester }

// Batch is a decoded batch of records, ready for Applier.Apply.
type Batch struct{ items []item }

// NewApplier returns an Applier on pool. Of cfg it reads Providers (required), Group, Topics,
// TransportTimeoutCodes, FirstCheck and PerEventOnly. Metrics are registered on deps.Registry (a
// fresh registry when nil; registering twice on one registry panics).
func NewApplier(cfg Config, pool *pgxpool.Pool, deps Deps) (*Applier, error) {
	cfg = cfg.withDefaults()
	if cfg.Providers == nil {
		return nil, errors.New("ingest: Providers (capability map) is required")
	}
	if deps.Logger == nil {
		deps.Logger = slog.Default()
	}
	if deps.Registry == nil {
		deps.Registry = telemetry.NewRegistry()
	}
	return &Applier{in: newIngester(cfg, deps, pool, deps.Registry)}, nil
}

// Decode decodes and validates recs (records of cfg.Topics' input topics, in partition order)
// on every core, as the ingester does after each poll.
func (a *Applier) Decode(recs []*kgo.Record) Batch { return Batch{items: a.in.decodeAll(recs)} }

// Apply applies b in one transaction. On error the caller may apply b again: every record is
// deduplicated by eventId, so a transaction that did commit (an ambiguous COMMIT failure) is not
// applied twice.
func (a *Applier) Apply(ctx context.Context, b Batch) error { return a.in.applyItems(ctx, b.items) }

// ErrRetention: an input topic keeps records longer than processed_event keeps their dedup
// rows (docs/retention.md); the ingester refuses to start.
var ErrRetention = errors.New("ingest: retention too short")

func (in *Ingester) consume(ctx context.Context) error {
	for {
		fetches := in.client.PollRecords(ctx, in.cfg.MaxPollRecords)
		if ctx.Err() != nil || fetches.IsClientClosed() {
			in.client.AllowRebalance()
			return nil
		}
		fetches.EachError(func(topic string, p int32, err error) {
			in.log.Warn("fetch error", "topic", topic, "partition", p, "err", err)
		})
		recs := fetches.Records()
		if len(recs) > 0 {
			start := time.Now()
			if err := in.handle(ctx, recs); err != nil {
				in.client.AllowRebalance()
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
			in.metrics.BatchSeconds.Observe(time.Since(start).Seconds())
		}
		in.client.AllowRebalance()
	}
}

// commitTimeout bounds one offset-commit try. franz-go alone retries a commit against an
// unavailable coordinator for up to 30 s; a shorter bound makes the outage visible (pause
// counter, /readyz) within seconds, and the retry continues under handle's backoff.
const commitTimeout = 5 * time.Second

// handle applies a batch and commits its offsets, retrying with backoff while PostgreSQL or
// Kafka is unavailable; each try of the database work is bounded by Config.BatchTimeout, so a
// hung database pauses the batch too. Once the database work has committed only the offset
// commit is retried, so the batch's transaction is not run again (a batch rerun after an
// ambiguous COMMIT failure is deduplicated record by record). It returns nil once the offsets are committed or the group
// has moved on (groupMovedOn), and ctx's error when ctx ends first.
func (in *Ingester) handle(ctx context.Context, recs []*kgo.Record) error {
	b := pauseBackoff()
	// Control records (transaction markers) are no facts: committed, never applied.
	data := recs
	if slices.ContainsFunc(recs, isControl) {
		data = slices.DeleteFunc(slices.Clone(recs), isControl)
	}
	for {
		if len(data) == 0 {
			break
		}
		bctx, cancel := context.WithTimeout(ctx, in.cfg.BatchTimeout)
		err := in.applyBatch(bctx, data)
		cancel()
		if err == nil {
			break
		}
		if err := in.pause(ctx, b, len(recs), err); err != nil {
			return err
		}
	}
	if in.deps.AfterDBCommit != nil {
		in.deps.AfterDBCommit()
	}
	b.Reset()
	for {
		cctx, cancel := context.WithTimeout(ctx, commitTimeout)
		err := in.client.CommitRecords(cctx, recs...)
		cancel()
		switch {
		case err == nil:
			in.paused.Store(nil)
			in.pauseLog.End("batch resumed", "records", len(recs))
			return nil
		case groupMovedOn(err):
			// Retrying would wait on a rejoin that BlockRebalanceOnPoll holds back. The database
			// work stands; whoever owns the partitions next re-reads from the last committed
			// offset and processed_event absorbs the replays.
			in.paused.Store(nil)
			in.pauseLog.End("batch resumed", "records", len(recs))
			in.log.Warn("offset commit refused by the group; replays will be deduplicated", "records", len(recs), "err", err)
			return nil
		}
		// The DB work is committed; only the offsets are retried.
		if err := in.pause(ctx, b, len(recs), fmt.Errorf("ingest: commit offsets: %w", err)); err != nil {
			return err
		}
	}
}

func isControl(r *kgo.Record) bool { return r.Attrs.IsControl() }

// groupMovedOn reports whether an offset commit failed because this member no longer belongs to
// the group generation it consumed in (expired, fenced, or the group rebalancing): the commit can
// never succeed as it is. Every other failure — the coordinator unavailable, a broker error — is
// an outage, retried while the ingester reports itself paused.
func groupMovedOn(err error) bool {
	for _, e := range []*kerr.Error{kerr.IllegalGeneration, kerr.UnknownMemberID, kerr.FencedInstanceID,
		kerr.RebalanceInProgress, kerr.StaleMemberEpoch, kerr.FencedMemberEpoch} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// pauseBackoff is the retry schedule of a paused batch: 100 ms doubling to 5 s, forever.
func pauseBackoff() *backoff.ExponentialBackOff {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.MaxInterval, b.MaxElapsedTime = 100*time.Millisecond, 5*time.Second, 0
	b.Reset()
	return b
}

// pause records why the batch in hand failed (metric, /readyz, log — at the pause's start, then
// at most every 30 s with repeats) and waits for the next try.
// It returns ctx's error when ctx ends first.
func (in *Ingester) pause(ctx context.Context, b backoff.BackOff, records int, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	in.metrics.Paused.Inc()
	why := err.Error()
	in.paused.Store(&why)
	wait := b.NextBackOff()
	in.pauseLog.Log("records", records, "retry_in", wait.String(), "err", err)
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(wait):
		return nil
	}
}

// item is one record of a batch after decoding.
type item struct {
	rec      *kgo.Record
	attempt  *events.Attempt
	decision *events.Decision
	hash     string // CanonicalHash of the record
	// digests are the attempt's request hash and fingerprint (empty unless a start).
	digests events.Digests
	invalid *events.InvalidError
}

func (in *Ingester) decode(r *kgo.Record, opt events.DecodeOptions) item {
	it := item{rec: r}
	var err error
	switch r.Topic {
	case in.cfg.Topics.Decisions:
		var d events.Decision
		d, it.hash, err = events.DecodeDecisionHashed(r.Value, opt)
		if err == nil {
			it.decision = &d
		}
	default:
		var a events.Attempt
		a, it.hash, err = events.DecodeAttemptHashed(r.Value, opt)
		if err == nil {
			it.attempt = &a
			// The request digests too, here where decoding runs in parallel; the bulk path uses them.
			if it.digests, err = a.Digests(); err != nil {
				it.attempt = nil
			}
		}
	}
	if err != nil {
		inv, ok := events.AsInvalid(err)
		if !ok {
			inv = &events.InvalidError{Reason: events.ReasonInvalidJSON, Detail: "undecodable"}
		}
		it.invalid = inv
	}
	return it
}

// decodeAll decodes a batch on every core: validation and RFC 8785 canonicalisation are the
// ingester's CPU cost, and the database waits meanwhile anyway.
func (in *Ingester) decodeAll(recs []*kgo.Record) []item {
	in.mu.Lock()
	opt := events.DecodeOptions{KnownProvider: in.cfg.Providers.Known, MinOccurredAt: in.minOccured}
	in.mu.Unlock()
	items := make([]item, len(recs))
	workers := min(runtime.GOMAXPROCS(0), max(1, len(recs)/64))
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; i < len(recs); i += workers {
				items[i] = in.decode(recs[i], opt)
			}
		})
	}
	wg.Wait()
	return items
}

// batchResult collects what to count once the batch commits.
type batchResult struct {
	effects    []*attempt.Effects
	consumed   map[[2]string]int
	duplicates map[string]int
	collisions int
	mismatches int
	dead       map[[2]string]int
	decisions  map[[2]string]int
}

func (in *Ingester) applyBatch(ctx context.Context, recs []*kgo.Record) error {
	return in.applyItems(ctx, in.decodeAll(recs))
}

// applyItems is applyBatch after decoding.
func (in *Ingester) applyItems(ctx context.Context, items []item) error {
	days := map[time.Time]bool{}
	for i := range items {
		if a := items[i].attempt; a != nil {
			days[processedevent.Day(a.OccurredAt)] = true
		}
		if d := items[i].decision; d != nil {
			days[processedevent.Day(d.OccurredAt)] = true
		}
	}
	if err := in.ensureDays(ctx, days); err != nil {
		return err
	}
	var res batchResult
	fresh := func() {
		res = batchResult{consumed: map[[2]string]int{}, duplicates: map[string]int{}, dead: map[[2]string]int{}, decisions: map[[2]string]int{}}
	}
	var err error
	if !in.cfg.PerEventOnly {
		err = postgres.WithTx(ctx, in.pool, func(tx pgx.Tx) error {
			fresh()
			return in.applyFast(ctx, tx, items, &res)
		})
		if err != nil && ctx.Err() == nil && (postgres.SQLState(err) != "" && !isInfra(err) || errors.Is(err, attempt.ErrPlanDiverged)) {
			in.log.Warn("batch fast path failed on a record; isolating records", "records", len(items), "err", err)
			err = errRetryPerEvent
		}
	}
	if in.cfg.PerEventOnly || errors.Is(err, errRetryPerEvent) {
		// One transaction, a savepoint per record: a record that fails for its own reasons is
		// dead-lettered without poisoning its batch.
		err = postgres.WithTx(ctx, in.pool, func(tx pgx.Tx) error {
			fresh()
			for i := range items {
				if in.deps.BeforeRecord != nil {
					in.deps.BeforeRecord(i)
				}
				if err := in.applyOne(ctx, tx, &items[i], &res); err != nil {
					return err
				}
			}
			return nil
		})
	}
	if err != nil {
		return err
	}
	m := in.metrics
	for k, n := range res.consumed {
		m.Consumed.WithLabelValues(k[0], k[1]).Add(float64(n))
	}
	for t, n := range res.duplicates {
		m.DuplicateDeliveries.WithLabelValues(t).Add(float64(n))
	}
	for k, n := range res.dead {
		m.DeadLetters.WithLabelValues(k[0], k[1]).Add(float64(n))
	}
	for k, n := range res.decisions {
		m.ManualDecisions.WithLabelValues(k[0], k[1]).Add(float64(n))
	}
	m.EventIDCollisions.Add(float64(res.collisions))
	m.KeyMismatches.Add(float64(res.mismatches))
	for _, e := range res.effects {
		m.observe(e)
		for _, d := range e.DecisionsFailed {
			in.log.Error("kept manual decision failed to apply; marked failed, the attempt's own transition committed", d.LogArgs()...)
		}
	}
	return nil
}

var errRetryPerEvent = errors.New("ingest: retry the batch record by record")

// applyFast applies a batch with set-based statements: insert-first dedup of all records at
// once, then attempt.Bulk for the intents whose events are all common cases, and the
// per-event path for the rest, without savepoints. Any record-level failure aborts the
// transaction; applyBatch then reruns the batch record by record.
func (in *Ingester) applyFast(ctx context.Context, tx pgx.Tx, items []item, res *batchResult) error {
	var attIdx, decIdx []int
	var attEv, decEv []processedevent.Event
	for i := range items {
		it := &items[i]
		switch {
		case it.attempt != nil:
			a := it.attempt
			attIdx = append(attIdx, i)
			attEv = append(attEv, processedevent.Event{TenantID: a.TenantID, EventID: a.EventID, OccurredAt: a.OccurredAt, Hash: it.hash})
		case it.decision != nil:
			d := it.decision
			decIdx = append(decIdx, i)
			decEv = append(decEv, processedevent.Event{TenantID: d.TenantID, EventID: d.EventID, OccurredAt: d.OccurredAt, Hash: it.hash})
		}
	}
	outcome := make([]processedevent.Outcome, len(items))
	for _, g := range []struct {
		store processedevent.Store
		idx   []int
		evs   []processedevent.Event
	}{{in.attempts, attIdx, attEv}, {in.decs, decIdx, decEv}} {
		os, err := g.store.InsertMany(ctx, tx, g.evs)
		if err != nil {
			return err
		}
		for j, o := range os {
			outcome[g.idx[j]] = o
		}
	}
	var applied []events.Attempt
	var appliedDigests []events.Digests
	var perEvent [][2]string
	for i := range items {
		if outcome[i] != processedevent.Applied {
			continue
		}
		if a := items[i].attempt; a != nil {
			applied = append(applied, *a)
			appliedDigests = append(appliedDigests, items[i].digests)
		}
		if d := items[i].decision; d != nil {
			perEvent = append(perEvent, [2]string{d.TenantID, d.BookingIntentID})
		}
	}
	at := attempt.NewTx(tx, &in.acfg)
	bulk, err := at.NewBulk(ctx, applied, appliedDigests, in.codes, perEvent)
	if err != nil {
		return err
	}
	for i := range items {
		if in.deps.BeforeRecord != nil {
			in.deps.BeforeRecord(i)
		}
		it := &items[i]
		mtopic := in.metricTopic(it.rec.Topic)
		switch {
		case it.invalid != nil:
			res.consumed[[2]string{mtopic, "invalid"}]++
			if err := in.deadLetter(ctx, tx, it.rec, string(it.invalid.Reason), it.invalid.Detail, res); err != nil {
				return err
			}
		case it.decision != nil:
			d := it.decision
			res.consumed[[2]string{mtopic, string(d.EventType)}]++
			if !in.dedupOutcome(outcome[i], mtopic, d.EventID, res) {
				continue
			}
			dt := attempt.NewTx(tx, &in.acfg)
			o, err := dt.ApplyDecision(ctx, *d)
			if err != nil {
				return err
			}
			res.decisions[[2]string{d.Decision, o}]++
			res.effects = append(res.effects, &dt.Effects)
		default:
			a := it.attempt
			in.countAttempt(it, mtopic, res)
			if !in.dedupOutcome(outcome[i], mtopic, a.EventID, res) {
				continue
			}
			if !bulk.PerEvent(*a) {
				if !bulk.Try(*a, it.digests) {
					return attempt.ErrPlanDiverged
				}
				continue
			}
			et := attempt.NewTx(tx, &in.acfg)
			if _, err := et.ApplyEvent(ctx, *a, in.codes); err != nil {
				return err
			}
			res.effects = append(res.effects, &et.Effects)
		}
	}
	if err := bulk.Flush(ctx); err != nil {
		return err
	}
	res.effects = append(res.effects, &at.Effects)
	return nil
}

// applyOne processes one record under a savepoint. A failure caused by the record's own data
// rolls back to the savepoint and dead-letters it; any other failure aborts the batch.
func (in *Ingester) applyOne(ctx context.Context, tx pgx.Tx, it *item, res *batchResult) error {
	topic := it.rec.Topic
	if it.invalid != nil {
		res.consumed[[2]string{in.metricTopic(topic), "invalid"}]++
		return in.deadLetter(ctx, tx, it.rec, string(it.invalid.Reason), it.invalid.Detail, res)
	}
	sp, err := tx.Begin(ctx)
	if err != nil {
		return fmt.Errorf("ingest: savepoint: %w", err)
	}
	eff, err := in.applyValid(ctx, sp, it, res)
	if err == nil {
		if err = sp.Commit(ctx); err == nil {
			if eff != nil {
				res.effects = append(res.effects, eff)
			}
			return nil
		}
	}
	_ = sp.Rollback(ctx)
	if !isPoison(err) {
		return err
	}
	in.log.Error("record failed; dead-lettered", "topic", topic, "partition", it.rec.Partition, "offset", it.rec.Offset, "err", err)
	return in.deadLetter(ctx, tx, it.rec, ReasonProcessingFailed, "sqlstate "+postgres.SQLState(err), res)
}

func (in *Ingester) metricTopic(topic string) string {
	if topic == in.cfg.Topics.Decisions {
		return events.TopicManualDecisions
	}
	return events.TopicAttempts
}

func (in *Ingester) applyValid(ctx context.Context, tx pgx.Tx, it *item, res *batchResult) (*attempt.Effects, error) {
	mtopic := in.metricTopic(it.rec.Topic)
	if d := it.decision; d != nil {
		res.consumed[[2]string{mtopic, string(d.EventType)}]++
		o, err := in.decs.Insert(ctx, tx, processedevent.Event{TenantID: d.TenantID, EventID: d.EventID, OccurredAt: d.OccurredAt, Hash: it.hash})
		if err != nil || !in.dedupOutcome(o, mtopic, d.EventID, res) {
			return nil, err
		}
		at := attempt.NewTx(tx, &in.acfg)
		outcome, err := at.ApplyDecision(ctx, *d)
		if err != nil {
			return nil, err
		}
		res.decisions[[2]string{d.Decision, outcome}]++
		return &at.Effects, nil
	}
	a := it.attempt
	in.countAttempt(it, mtopic, res)
	o, err := in.attempts.Insert(ctx, tx, processedevent.Event{TenantID: a.TenantID, EventID: a.EventID, OccurredAt: a.OccurredAt, Hash: it.hash})
	if err != nil || !in.dedupOutcome(o, mtopic, a.EventID, res) {
		return nil, err
	}
	at := attempt.NewTx(tx, &in.acfg)
	if _, err := at.ApplyEvent(ctx, *a, in.codes); err != nil {
		return nil, err
	}
	return &at.Effects, nil
}

// countAttempt counts a valid attempt record, and a Kafka key that differs from its
// bookingIntentId (processed normally, counted and logged: DESIGN.md "Contract v1").
func (in *Ingester) countAttempt(it *item, mtopic string, res *batchResult) {
	a := it.attempt
	res.consumed[[2]string{mtopic, string(a.EventType)}]++
	if it.rec.Key != nil && string(it.rec.Key) != a.BookingIntentID {
		res.mismatches++
		in.log.Warn("record key differs from bookingIntentId", "topic", it.rec.Topic, "partition", it.rec.Partition,
			"offset", it.rec.Offset, "event_id", a.EventID)
	}
}

func (in *Ingester) dedupOutcome(o processedevent.Outcome, topic, eventID string, res *batchResult) bool {
	switch o {
	case processedevent.Duplicate:
		res.duplicates[topic]++
		return false
	case processedevent.Collision:
		res.collisions++
		in.log.Warn("eventId reused with different content; not applied", "topic", topic, "event_id", eventID)
		return false
	}
	return true
}

// deadLetter writes the record to its dead-letter topic through the outbox: original key and
// bytes (a null value stays null), the reason and origin in headers, keyed by source position
// (DESIGN.md "Contract v1"). It runs under a savepoint: should PostgreSQL refuse the dead letter
// itself (postgres.IsDataError), it is written again with a fixed detail (DetailDeadLetterRewritten and
// the SQLSTATE), the reason and the original bytes kept, so a record whose dead letter cannot be
// written as built never stalls its partition and is never mistaken for an outage. Any other
// failure is returned: the batch pauses and is retried.
func (in *Ingester) deadLetter(ctx context.Context, tx pgx.Tx, r *kgo.Record, reason, detail string, res *batchResult) error {
	insert := func(detail string) error {
		return postgres.Savepoint(ctx, tx, func(sp pgx.Tx) error { return outbox.Insert(ctx, sp, in.deadLetterMessage(r, reason, detail)) })
	}
	err := insert(detail)
	if postgres.IsDataError(err) {
		in.log.Error("dead letter refused by the database; written again with a fixed detail", "topic", r.Topic,
			"partition", r.Partition, "offset", r.Offset, "reason", reason, "sqlstate", postgres.SQLState(err))
		err = insert(DetailDeadLetterRewritten + postgres.SQLState(err))
	}
	if err != nil {
		return fmt.Errorf("ingest: dead letter %s/%d/%d: %w", r.Topic, r.Partition, r.Offset, err)
	}
	res.dead[[2]string{in.metricTopic(r.Topic), reason}]++
	in.log.Info("dead letter", "topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "reason", reason, "detail", detail)
	return nil
}

// DetailDeadLetterRewritten, followed by the SQLSTATE, is the bookrecon.dlq.detail of a dead
// letter that PostgreSQL refused as first built (see deadLetter).
const DetailDeadLetterRewritten = "dead letter rewritten: the database refused it as built, sqlstate "

// deadLetterMessage is the outbox message of r's dead letter.
func (in *Ingester) deadLetterMessage(r *kgo.Record, reason, detail string) outbox.Message {
	dlq := in.cfg.Topics.AttemptsDLQ
	if r.Topic == in.cfg.Topics.Decisions {
		dlq = in.cfg.Topics.DecisionsDLQ
	}
	pos := r.Topic + "/" + strconv.Itoa(int(r.Partition)) + "/" + strconv.FormatInt(r.Offset, 10)
	return outbox.Message{
		Topic: dlq, Key: r.Key, Value: r.Value, EventID: pos,
		Headers: []outbox.Header{
			{Key: "bookrecon.dlq.reason", Value: reason},
			{Key: "bookrecon.dlq.detail", Value: detail},
			{Key: "bookrecon.source.topic", Value: r.Topic},
			{Key: "bookrecon.source.partition", Value: strconv.Itoa(int(r.Partition))},
			{Key: "bookrecon.source.offset", Value: strconv.FormatInt(r.Offset, 10)},
		},
	}
}

// isPoison reports whether err came from the record's own data (postgres.IsDataError): the
// record is dead-lettered. Every other failure is infrastructure: the batch is retried.
func isPoison(err error) bool { return postgres.IsDataError(err) }

// isInfra reports whether a PostgreSQL error is the database's condition rather than the
// batch's: connection (08), resources (53), operator intervention (57), system (58) and
// transaction rollback (40) classes.
func isInfra(err error) bool {
	switch c := postgres.SQLState(err); {
	case len(c) < 2:
		return true
	default:
		switch c[:2] {
		case "08", "53", "57", "58", "40", "XX":
			return true
		}
	}
	return false
}

// ensureDays creates processed_event partitions for days not seen before.
func (in *Ingester) ensureDays(ctx context.Context, days map[time.Time]bool) error {
	in.mu.Lock()
	var missing []time.Time
	for d := range days {
		if !in.knownDays[d] {
			missing = append(missing, d)
		}
	}
	in.mu.Unlock()
	if len(missing) == 0 {
		return nil
	}
	if err := processedevent.EnsurePartitions(ctx, in.pool, missing...); err != nil {
		return err
	}
	in.mu.Lock()
	for _, d := range missing {
		in.knownDays[d] = true
	}
	in.mu.Unlock()
	return nil
}

// maintainPartitions keeps partitions for [today − RetentionDays, today + 2], drops older ones
// whole, and moves the stale_event bound to the oldest kept day (docs/retention.md).
func (in *Ingester) maintainPartitions(ctx context.Context) error {
	today := processedevent.Day(time.Now())
	var days []time.Time
	for d := -in.cfg.RetentionDays; d <= 2; d++ {
		days = append(days, today.AddDate(0, 0, d))
	}
	if err := processedevent.EnsurePartitions(ctx, in.pool, days...); err != nil {
		return err
	}
	dropped, err := processedevent.DropBefore(ctx, in.pool, days[0])
	if err != nil {
		return err
	}
	if len(dropped) > 0 {
		in.log.Info("processed_event partitions dropped", "days", len(dropped))
	}
	oldest, err := processedevent.OldestDay(ctx, in.pool)
	if err != nil {
		return err
	}
	in.mu.Lock()
	in.minOccured = oldest
	for _, d := range days {
		in.knownDays[d] = true
	}
	in.mu.Unlock()
	return nil
}

// checkRetention refuses to start when an input topic keeps records longer than
// processed_event does (minus the margin): a redelivery could then outlive its dedup row.
func (in *Ingester) checkRetention(ctx context.Context) error {
	adm := kadm.NewClient(in.client)
	cfgs, err := adm.DescribeTopicConfigs(ctx, in.cfg.Topics.Attempts, in.cfg.Topics.Decisions)
	if err != nil {
		return fmt.Errorf("ingest: describe topic configs: %w", err)
	}
	ttl := time.Duration(in.cfg.RetentionDays) * 24 * time.Hour
	for _, rc := range cfgs {
		if rc.Err != nil {
			return fmt.Errorf("ingest: topic %s: %w", rc.Name, rc.Err)
		}
		for _, c := range rc.Configs {
			if c.Key != "retention.ms" || c.Value == nil {
				continue
			}
			ms, err := strconv.ParseInt(*c.Value, 10, 64)
			if err != nil {
				return fmt.Errorf("ingest: topic %s retention.ms: %w", rc.Name, err)
			}
			if ms < 0 || time.Duration(ms)*time.Millisecond+in.cfg.RetentionMargin > ttl {
				return fmt.Errorf("%w: topic %s keeps records %s (+%s margin) but processed_event keeps %s: raise RetentionDays or lower retention.ms", ErrRetention,
					rc.Name, time.Duration(ms)*time.Millisecond, in.cfg.RetentionMargin, ttl)
			}
		}
	}
	return nil
}
