package bench

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/bookrecon/bookrecon/events"
	"github.com/bookrecon/bookrecon/internal/harness/kafkatest"
	"github.com/bookrecon/bookrecon/internal/harness/loadgen"
	"github.com/bookrecon/bookrecon/internal/harness/pgtest"
	"github.com/bookrecon/bookrecon/internal/harness/samples"
	"github.com/bookrecon/bookrecon/internal/ingest"
	"github.com/bookrecon/bookrecon/internal/postgres"
	"github.com/bookrecon/bookrecon/processedevent"
)

func ingestEnvInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// Workloads of the ingest benchmarks (internal/harness/loadgen), both keyed by intent and with 5%
// producer redeliveries: the happy mix (start, then success 90% / failure 10%), which the
// set-based path takes whole, and the realistic mix, loadgen.DefaultMix (UNKNOWN, not-sent,
// out-of-order pairs, key conflicts, blind retries), the mix of the load run.
var (
	happyMix     = loadgen.Mix{Failure: 0.10, Redeliveries: 0.05}
	realisticMix = loadgen.DefaultMix
)

// ingestWorkload is a generated run, decoded beforehand for the lines that skip Kafka.
type ingestWorkload struct {
	gen     loadgen.Output
	decoded []events.Attempt
	hashes  []string // events.CanonicalHash of each record
}

// newWorkload generates about total records (total × 95/200 intents) of mix, seed 7.
func newWorkload(b *testing.B, total int, mix loadgen.Mix) ingestWorkload {
	gen := loadgen.Generate(loadgen.Config{Intents: total * 95 / 200, Seed: 7, Start: time.Now().Add(-time.Hour), Mix: mix})
	w := ingestWorkload{gen: gen, decoded: make([]events.Attempt, len(gen.Records)), hashes: make([]string, len(gen.Records))}
	for i, r := range gen.Records {
		a, err := events.DecodeAttempt(r, events.DecodeOptions{})
		if err != nil {
			b.Fatal(err)
		}
		w.decoded[i] = a
		if w.hashes[i], err = events.CanonicalHash(r); err != nil {
			b.Fatal(err)
		}
	}
	return w
}

// benchRun is one measured line: unique events applied, per second, and the WAL written.
type benchRun struct {
	perSec float64
	events int // unique events applied (processed_event rows)
	wal    walResult
}

// BenchmarkIngest measures, in one run (BOOKRECON_BENCH_EVENTS records per workload, default
// 200,000, 5% of them producer redeliveries), each line with its WAL per unique event
// (walMeter: pg_stat_wal, and this database's own share where pg_walinspect can read it):
//   - end to end, happy mix and realistic mix: the records already in a 6-partition topic on the
//     real broker, the ingester binary started, timed from its first committed batch until every
//     record's offset is committed (every unique event then in processed_event: checked); its
//     peak RSS and start-up time (two lanes, the default); and the happy mix again with one lane (BOOKRECON_INGEST_LANES=1);
//   - the ceiling: the PostgreSQL side of the happy mix without Kafka — the ingester's own batch
//     apply (ingest.Applier: insert-first, state, audit, anomalies, outbox), 4,000 records per
//     transaction (a lane of the ingester's default 8,000-record poll), decoded beforehand and
//     not timed;
//   - the baseline: the same work, one transaction per event (the same code with one-record
//     batches, set-based or per-event path, whichever is faster, on the first
//     BOOKRECON_BENCH_BASELINE_EVENTS records, default 3,000);
//   - the bare reference line: the bare minimum any ingester must write — insert-first dedup +
//     attempt state upsert, nothing else — on the happy mix, batched 1,000 per transaction, and
//     the same one per transaction.
//
// It prints events/s of each and the ratios of issue 12 with their targets: realistic / happy
// end to end ≥ 0.8, happy end to end / bare reference ≥ 0.5 (to be met on the median of three
// runs), and the earlier ones: end to end / ceiling (0.7), end to end / baseline (10).
func BenchmarkIngest(b *testing.B) {
	total := ingestEnvInt("BOOKRECON_BENCH_EVENTS", 200000)
	baseN := ingestEnvInt("BOOKRECON_BENCH_BASELINE_EVENTS", 3000)
	happy := newWorkload(b, total, happyMix)
	realistic := newWorkload(b, total, realisticMix)
	ctx := context.Background()
	for range b.N {
		load := loadAverage()
		ceiling := ingestApplier(b, ctx, happy.gen, len(happy.gen.Records), 4000, false, nil)
		// One transaction per event, the faster of the two ways the ingester's code can do it.
		baseline := max(ingestApplier(b, ctx, happy.gen, min(baseN, len(happy.gen.Records)), 1, false, nil).perSec,
			ingestApplier(b, ctx, happy.gen, min(baseN, len(happy.gen.Records)), 1, true, nil).perSec)
		bare := ingestBareCeiling(b, ctx, happy.decoded, happy.hashes)
		bareBaseline := ingestBareBaseline(b, ctx, happy.decoded[:min(baseN, len(happy.decoded))], happy.hashes)
		bin := buildIngester(b)
		e2e, rss, startup := ingestEndToEnd(b, ctx, happy.gen, e2eOptions{bin: bin})
		e2eReal, rssReal, startupReal := ingestEndToEnd(b, ctx, realistic.gen, e2eOptions{bin: bin})
		e2eOneLane, _, _ := ingestEndToEnd(b, ctx, happy.gen, e2eOptions{bin: bin, env: []string{"BOOKRECON_INGEST_LANES=1"}})
		b.ReportMetric(e2e.perSec, "e2e_events/s")
		b.ReportMetric(e2eReal.perSec, "e2e_realistic_events/s")
		b.ReportMetric(e2eOneLane.perSec, "e2e_lanes1_events/s")
		b.ReportMetric(ceiling.perSec, "ceiling_events/s")
		b.ReportMetric(baseline, "baseline_events/s")
		b.ReportMetric(e2eReal.perSec/e2e.perSec, "realistic/happy")
		b.ReportMetric(e2e.perSec/bare.perSec, "happy/bare")
		fmt.Printf("\ningest: happy mix %d records (%d unique, %d redeliveries); realistic mix %d records (%d unique, %d redeliveries)\n",
			len(happy.gen.Records), happy.gen.UniqueEvents, len(happy.gen.Records)-happy.gen.UniqueEvents,
			len(realistic.gen.Records), realistic.gen.UniqueEvents, len(realistic.gen.Records)-realistic.gen.UniqueEvents)
		fmt.Printf("  machine load (1-minute load average, 2 cores) %s at the start, %s at the end: every line shares the cores with what else runs\n", load, loadAverage())
		fmt.Printf("  WAL per unique event: pg_stat_wal wal_bytes delta around the line (cluster-wide: other databases' writes meanwhile are in it),\n")
		fmt.Printf("  and in parentheses this database's own records (pg_walinspect)\n")
		fmt.Printf("  end to end, happy mix (real broker → ingester binary → PostgreSQL)     %8.0f events/s  %s   peak RSS %d MiB, start-up %.1f s\n",
			e2e.perSec, e2e.wal.perEvent(e2e.events), rss>>10, startup.Seconds())
		fmt.Printf("  end to end, realistic mix (loadgen default)                           %8.0f events/s  %s   peak RSS %d MiB, start-up %.1f s\n",
			e2eReal.perSec, e2eReal.wal.perEvent(e2eReal.events), rssReal>>10, startupReal.Seconds())
		fmt.Printf("  end to end, happy mix, 1 lane (BOOKRECON_INGEST_LANES=1)                %8.0f events/s  %s\n",
			e2eOneLane.perSec, e2eOneLane.wal.perEvent(e2eOneLane.events))
		fmt.Printf("  bare reference line, dedup + state upsert, batched 1,000/tx (happy mix) %8.0f events/s  %s\n",
			bare.perSec, bare.wal.perEvent(bare.events))
		fmt.Printf("  ceiling: the happy mix's PostgreSQL work, no Kafka, decoded beforehand %8.0f events/s  %s\n",
			ceiling.perSec, ceiling.wal.perEvent(ceiling.events))
		fmt.Printf("  baseline: the same work, one transaction per event                    %8.0f events/s\n", baseline)
		fmt.Printf("  realistic / happy = %.2f (target ≥ 0.8: %s)   happy / bare = %.2f (target ≥ 0.5: %s)\n",
			e2eReal.perSec/e2e.perSec, met(e2eReal.perSec/e2e.perSec >= 0.8), e2e.perSec/bare.perSec, met(e2e.perSec/bare.perSec >= 0.5))
		fmt.Printf("  happy, 1 lane / bare = %.2f   happy / happy, 1 lane = %.2f\n", e2eOneLane.perSec/bare.perSec, e2e.perSec/e2eOneLane.perSec)
		fmt.Printf("  end to end / ceiling = %.2f (target 0.7)   end to end / baseline = %.1f (target 10)\n", e2e.perSec/ceiling.perSec, e2e.perSec/baseline)
		fmt.Printf("  reference, bare dedup + state upsert only (no audit, outbox, claims, validation):\n")
		fmt.Printf("    batched 1,000/tx %8.0f events/s (end to end / it = %.2f)   one per tx %6.0f events/s (end to end / it = %.1f)\n",
			bare.perSec, e2e.perSec/bare.perSec, bareBaseline.perSec, e2e.perSec/bareBaseline.perSec)
		for _, l := range []struct {
			name string
			r    benchRun
		}{{"end to end, happy mix", e2e}, {"end to end, realistic mix", e2eReal}, {"bare reference line", bare}} {
			fmt.Printf("  %s:\n%s", l.name, l.r.wal.table(l.r.events))
		}
	}
}

func met(ok bool) string {
	if ok {
		return "met"
	}
	return "NOT met"
}

// ingestApplier applies the first n records with the ingester's own batch code (ingest.Applier)
// in batches of size, in publish order (so each intent's events stay in order, as a partition
// keeps them), and returns unique events applied per second and the WAL written. perEventOnly
// selects the ingester's per-event path (a savepoint per record) instead of the set-based one.
// Records are decoded beforehand and not timed: this is the PostgreSQL side of the ingester's
// work. tracer, when not nil, sees every statement (BenchmarkIngestBreakdown).
func ingestApplier(b *testing.B, ctx context.Context, gen loadgen.Output, n, size int, perEventOnly bool, tracer pgx.QueryTracer) benchRun {
	pool, url := benchPool(b, tracer)
	m, err := samples.Providers()
	if err != nil {
		b.Fatal(err)
	}
	ap, err := ingest.NewApplier(ingest.Config{Providers: m, PerEventOnly: perEventOnly}, pool,
		ingest.Deps{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: events.TopicAttempts, Key: gen.Keys[i], Value: gen.Records[i], Offset: int64(i)}
	}
	var batches []ingest.Batch
	for lo := 0; lo < n; lo += size {
		batches = append(batches, ap.Decode(recs[lo:min(lo+size, n)]))
	}
	w := startWAL(b, ctx, url)
	start := time.Now()
	for _, batch := range batches {
		if err := ap.Apply(ctx, batch); err != nil {
			b.Fatal(err)
		}
	}
	return finishRun(b, ctx, pool, w, time.Since(start))
}

// finishRun counts the unique events applied (processed_event rows: every figure of
// BenchmarkIngest counts unique events, redeliveries are work but not output), closes the pool
// so its sessions report their WAL, and stops the meter.
func finishRun(b *testing.B, ctx context.Context, pool *pgxpool.Pool, w *walMeter, el time.Duration) benchRun {
	var unique int
	if err := pool.QueryRow(ctx, stmts.SQL("processed_event_count")).Scan(&unique); err != nil {
		b.Fatal(err)
	}
	pool.Close()
	return benchRun{perSec: float64(unique) / el.Seconds(), events: unique, wal: w.stop(b, ctx)}
}

// benchPool is a fresh migrated database with today's processed_event partitions, its URL, and
// a pool on it (closed at cleanup) whose connections report every statement to tracer (nil: none).
func benchPool(b *testing.B, tracer pgx.QueryTracer) (*pgxpool.Pool, string) {
	url := pgtest.NewURL(b)
	cfg, err := postgres.ParseConfig(url, postgres.Options{MaxConns: 20})
	if err != nil {
		b.Fatal(err)
	}
	cfg.ConnConfig.Tracer = tracer
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	if err := processedevent.EnsurePartitions(context.Background(), pool, time.Now().Add(-time.Hour), time.Now()); err != nil {
		b.Fatal(err)
	}
	return pool, url
}

// ingestBareCeiling: the best batched insert-first + state upsert: per 1,000 events, one
// transaction with three set-based statements (dedup rows, intents, attempt upsert).
func ingestBareCeiling(b *testing.B, ctx context.Context, evs []events.Attempt, hashes []string) benchRun {
	pool, url := benchPool(b, nil)
	w := startWAL(b, ctx, url)
	start := time.Now()
	for lo := 0; lo < len(evs); lo += 1000 {
		batch := evs[lo:min(lo+1000, len(evs))]
		err := postgres.WithTx(ctx, pool, func(tx pgx.Tx) error {
			var t, id, h, intent, key, status []string
			var day []time.Time
			for i, e := range batch {
				t, id, h, day = append(t, e.TenantID), append(id, e.EventID), append(h, hashes[lo+i]), append(day, processedevent.Day(e.OccurredAt))
			}
			rows, err := tx.Query(ctx, stmts.SQL("processed_event_insert_bare_batch"), t, id, day, h)
			if err != nil {
				return err
			}
			fresh, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				return err
			}
			isNew := map[string]bool{}
			for _, f := range fresh {
				isNew[f] = true
			}
			last := map[string]int{}
			t = t[:0]
			for _, e := range batch {
				if !isNew[e.EventID] {
					continue
				}
				isNew[e.EventID] = false
				st := bareStatus(e)
				k := e.TenantID + "/" + e.IdempotencyKey
				if j, ok := last[k]; ok {
					status[j] = st
					continue
				}
				last[k] = len(key)
				t, intent, key, status = append(t, e.TenantID), append(intent, e.BookingIntentID), append(key, e.IdempotencyKey), append(status, st)
			}
			if _, err := tx.Exec(ctx, stmts.SQL("booking_intent_insert_bare_batch"), t, intent); err != nil {
				return err
			}
			_, err = tx.Exec(ctx, stmts.SQL("booking_attempt_upsert_bare_batch"), t, intent, key, status)
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	return finishRun(b, ctx, pool, w, time.Since(start))
}

// bareStatus is the state the bare reference lines store for e: the outcome, nothing else.
func bareStatus(e events.Attempt) string {
	switch e.EventType {
	case events.EventSucceeded:
		return "CONFIRMED"
	case events.EventFailed:
		return "FAILED"
	}
	return "IN_PROGRESS"
}

// ingestBareBaseline: the same as ingestBareCeiling, one transaction per event.
func ingestBareBaseline(b *testing.B, ctx context.Context, evs []events.Attempt, hashes []string) benchRun {
	pool, url := benchPool(b, nil)
	w := startWAL(b, ctx, url)
	start := time.Now()
	for i, e := range evs {
		err := postgres.WithTx(ctx, pool, func(tx pgx.Tx) error {
			tag, err := tx.Exec(ctx, stmts.SQL("processed_event_insert_bare_one"), e.TenantID, e.EventID, processedevent.Day(e.OccurredAt), hashes[i])
			if err != nil || tag.RowsAffected() == 0 {
				return err
			}
			st := bareStatus(e)
			if _, err := tx.Exec(ctx, stmts.SQL("booking_intent_insert_bare_one"), e.TenantID, e.BookingIntentID); err != nil {
				return err
			}
			_, err = tx.Exec(ctx, stmts.SQL("booking_attempt_upsert_bare_one"), e.TenantID, e.BookingIntentID, e.IdempotencyKey, st)
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	return finishRun(b, ctx, pool, w, time.Since(start))
}

// buildIngester builds cmd/ingester of this tree into a temporary directory and returns its path.
func buildIngester(b *testing.B) string {
	bin := filepath.Join(b.TempDir(), "ingester")
	build := exec.Command("go", "build", "-o", bin, "github.com/bookrecon/bookrecon/cmd/ingester")
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		b.Fatal(err)
	}
	return bin
}

// e2eOptions are the knobs of one end-to-end line.
type e2eOptions struct {
	bin string   // the ingester executable (buildIngester, or another build for an A/B)
	env []string // added to its environment, after the line's own settings
	// profile, when not nil, watches the running ingester (BenchmarkIngestEndToEnd's profile):
	// started once the first batch has committed, stopped once every event is applied.
	profile *e2eProfile
}

// ingestEndToEnd publishes the records, then starts the ingester executable o.bin and times it
// from its first committed batch until every unique event is applied. It returns events/s with
// the WAL written from the ingester's start until it has stopped (SIGTERM once every event is
// in), the ingester's peak RSS in KiB and its start-up time (start to first committed batch).
func ingestEndToEnd(b *testing.B, ctx context.Context, gen loadgen.Output, o e2eOptions) (benchRun, int64, time.Duration) {
	sfx := kafkatest.Suffix()
	topics := []string{"booking.attempts.v1." + sfx, "booking.attempts.dlq.v1." + sfx, "booking.manual-decisions.v1." + sfx,
		"booking.manual-decisions.dlq.v1." + sfx, "booking.resolutions.v1." + sfx, "booking.escalations.v1." + sfx}
	kafkatest.CreateTopics(b, 6, topics...)
	dbURL := pgtest.NewURL(b)
	pool, err := postgres.Open(ctx, withAppName(b, dbURL, benchAppName), 2)
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	prod, err := kgo.NewClient(kgo.SeedBrokers(kafkatest.Brokers()...), kgo.ProducerLinger(5*time.Millisecond))
	if err != nil {
		b.Fatal(err)
	}
	for i, r := range gen.Records {
		prod.Produce(ctx, &kgo.Record{Topic: topics[0], Key: gen.Keys[i], Value: r}, func(_ *kgo.Record, err error) {
			if err != nil {
				b.Error(err)
			}
		})
	}
	if err := prod.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	prod.Close()

	mp, err := samples.Path("providers.yaml")
	if err != nil {
		b.Fatal(err)
	}
	admin := benchAdminAddr()
	if o.profile != nil {
		admin = freeAddr(b) // the profile reads the ingester's /debug/pprof and /metrics
	}
	w := startWAL(b, ctx, dbURL)
	cmd := exec.Command(o.bin)
	cmd.Env = append(os.Environ(), "BOOKRECON_DATABASE_URL="+dbURL, "BOOKRECON_KAFKA_BROKERS="+strings.Join(kafkatest.Brokers(), ","),
		"BOOKRECON_PROVIDERS="+mp, "BOOKRECON_TOPIC_SUFFIX="+sfx, "BOOKRECON_INGESTER_GROUP=bench-"+sfx,
		"BOOKRECON_INGESTER_ADMIN_ADDR="+admin)
	cmd.Env = append(cmd.Env, o.env...)
	start := time.Now()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			_ = cmd.Process.Signal(syscall.SIGTERM)
			_ = cmd.Wait()
		}
	}
	defer stop()
	// Throughput is timed from the first committed batch: process start, connections, the
	// schema and partition checks and the group join are start-up, reported on their own. The
	// line is watched through the group's committed offsets, which the ingester commits only
	// after the database commit: a count(*) of processed_event every 250 ms cost the database
	// up to ~80 ms a poll on the line's own cores by the end of a 300,000-record line.
	adm := kafkatest.Admin(b)
	var peak int64
	var first time.Time
	var atFirst int
	for {
		committed, err := committedOffsets(ctx, adm, "bench-"+sfx, topics[0])
		peak = max(peak, vmHWM(cmd.Process.Pid))
		if committed > 0 && first.IsZero() {
			first = time.Now()
			if err := pool.QueryRow(ctx, stmts.SQL("processed_event_count")).Scan(&atFirst); err != nil {
				b.Fatal(err)
			}
			if o.profile != nil {
				o.profile.start(b, ctx, cmd.Process.Pid, dbURL, admin)
			}
		}
		if committed >= int64(len(gen.Records)) {
			break
		}
		if time.Since(start) > 20*time.Minute {
			b.Fatalf("ingester committed %d of %d records in 20 minutes (last offset fetch: %v)", committed, len(gen.Records), err)
		}
		// Every 100 ms: at 20 ms the watch itself took ~3% of a core and the broker ~1.3% more
		// (an offset fetch each time), on the line's own two cores; the line's end is then
		// known to within 100 ms of a ~20 s line.
		time.Sleep(100 * time.Millisecond)
	}
	el := time.Since(first)
	var n int
	if err := pool.QueryRow(ctx, stmts.SQL("processed_event_count")).Scan(&n); err != nil {
		b.Fatal(err)
	}
	if n != gen.UniqueEvents {
		b.Fatalf("every record committed, but %d of %d unique events in processed_event", n, gen.UniqueEvents)
	}
	if o.profile != nil && !first.IsZero() {
		o.profile.stop(b, ctx, gen.UniqueEvents-atFirst, el)
	}
	if atFirst == gen.UniqueEvents { // everything in the first batch: nothing to time after it
		first, atFirst, el = start, 0, time.Since(start)
	}
	stop()
	pool.Close()
	return benchRun{perSec: float64(gen.UniqueEvents-atFirst) / el.Seconds(), events: gen.UniqueEvents, wal: w.stop(b, ctx)},
		peak, first.Sub(start)
}

// committedOffsets is the sum of group's committed offsets on topic: 0 before its first commit,
// and with the error while the group's coordinator does not answer (the caller retries until its
// deadline, and reports the last error then).
func committedOffsets(ctx context.Context, adm *kadm.Client, group, topic string) (int64, error) {
	offs, err := adm.FetchOffsets(ctx, group)
	if err != nil {
		return 0, err
	}
	var sum int64
	offs.Each(func(o kadm.OffsetResponse) {
		if o.Topic == topic && o.At > 0 {
			sum += o.At
		}
	})
	return sum, nil
}

// vmHWM reads a process's peak resident set size (KiB) from /proc.
func vmHWM(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "VmHWM:") {
			f := strings.Fields(line)
			if len(f) >= 2 {
				n, _ := strconv.ParseInt(f[1], 10, 64)
				return n
			}
		}
	}
	return 0
}

func benchAdminAddr() string { return cmp.Or(os.Getenv("BOOKRECON_BENCH_ADMIN_ADDR"), "127.0.0.1:0") }

// loadAverage is the machine's 1-minute load average (/proc/loadavg), "?" where unreadable.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) > 0 {
		return f[0]
	}
	return "?"
}
