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
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/bookrecon/bookrecon/events"
	"github.com/bookrecon/bookrecon/internal/ingest"
	"github.com/bookrecon/bookrecon/internal/kafkatest"
	"github.com/bookrecon/bookrecon/internal/loadgen"
	"github.com/bookrecon/bookrecon/internal/pgtest"
	"github.com/bookrecon/bookrecon/internal/postgres"
	"github.com/bookrecon/bookrecon/internal/samples"
	"github.com/bookrecon/bookrecon/processedevent"
	"github.com/bookrecon/bookrecon/providers"
)

func ingestEnvInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// BenchmarkIngest measures, in one run, on the same generated workload (BOOKRECON_BENCH_EVENTS
// records, default 200,000, 5% of them producer redeliveries):
//   - end to end: the records already in a 6-partition topic on the real broker, the ingester
//     binary started, timed from its first committed batch until every unique event is in
//     processed_event; its peak RSS and start-up time;
//   - the ceiling: the PostgreSQL side of the same work, without Kafka — the ingester's own
//     batch apply (ingest.Applier: insert-first, state, audit, anomalies, outbox), 4,000 records
//     per transaction as the ingester polls them, decoded beforehand and not timed;
//   - the baseline: the same work, one transaction per event (the same code with one-record
//     batches, set-based or per-event path, whichever is faster, on the first
//     BOOKRECON_BENCH_BASELINE_EVENTS records, default 3,000);
//   - for reference, the bare minimum any ingester must write — insert-first dedup + attempt
//     state upsert, nothing else — batched 1,000 per transaction and one per transaction.
//
// It prints events/s of each and the ratios end-to-end/ceiling and end-to-end/baseline.
func BenchmarkIngest(b *testing.B) {
	total := ingestEnvInt("BOOKRECON_BENCH_EVENTS", 200000)
	baseN := ingestEnvInt("BOOKRECON_BENCH_BASELINE_EVENTS", 3000)
	gen := loadgen.Generate(loadgen.Config{Intents: total * 95 / 200, Seed: 7, Start: time.Now().Add(-time.Hour),
		Mix: loadgen.Mix{Failure: 0.10, Redeliveries: 0.05}})
	decoded := make([]events.Attempt, len(gen.Records))
	hashes := make([]string, len(gen.Records))
	for i, r := range gen.Records {
		a, err := events.DecodeAttempt(r, events.DecodeOptions{})
		if err != nil {
			b.Fatal(err)
		}
		decoded[i] = a
		if hashes[i], err = events.CanonicalHash(r); err != nil {
			b.Fatal(err)
		}
	}
	ctx := context.Background()
	for range b.N {
		ceiling := ingestApplier(b, ctx, gen, len(gen.Records), 4000, false)
		// One transaction per event, the faster of the two ways the ingester's code can do it.
		baseline := max(ingestApplier(b, ctx, gen, min(baseN, len(gen.Records)), 1, false),
			ingestApplier(b, ctx, gen, min(baseN, len(gen.Records)), 1, true))
		bareCeiling := ingestBareCeiling(b, ctx, decoded, hashes)
		bareBaseline := ingestBareBaseline(b, ctx, decoded[:min(baseN, len(decoded))], hashes)
		e2e, rss, startup := ingestEndToEnd(b, ctx, gen)
		b.ReportMetric(e2e, "e2e_events/s")
		b.ReportMetric(ceiling, "ceiling_events/s")
		b.ReportMetric(baseline, "baseline_events/s")
		b.ReportMetric(e2e/ceiling, "e2e/ceiling")
		b.ReportMetric(e2e/baseline, "e2e/baseline")
		fmt.Printf("\ningest: %d records (%d unique, %d redeliveries)\n", len(gen.Records), gen.UniqueEvents, len(gen.Records)-gen.UniqueEvents)
		fmt.Printf("  end to end (real broker → ingester binary → PostgreSQL)      %8.0f events/s   peak RSS %d MiB, start-up to first commit %.1f s\n",
			e2e, rss>>10, startup.Seconds())
		fmt.Printf("  ceiling: the same PostgreSQL work, no Kafka, decoded beforehand %8.0f events/s\n", ceiling)
		fmt.Printf("  baseline: the same work, one transaction per event             %8.0f events/s\n", baseline)
		fmt.Printf("  end to end / ceiling = %.2f (target 0.7)   end to end / baseline = %.1f (target 10)\n", e2e/ceiling, e2e/baseline)
		fmt.Printf("  reference, bare dedup + state upsert only (no audit, outbox, claims, validation):\n")
		fmt.Printf("    batched 1,000/tx %8.0f events/s (end to end / it = %.2f)   one per tx %6.0f events/s (end to end / it = %.1f)\n",
			bareCeiling, e2e/bareCeiling, bareBaseline, e2e/bareBaseline)
	}
}

// ingestApplier applies the first n records with the ingester's own batch code (ingest.Applier)
// in batches of size, in publish order (so each intent's events stay in order, as a partition
// keeps them), and returns unique events applied per second. perEventOnly selects the
// ingester's per-event path (a savepoint per record) instead of the set-based one. Records are
// decoded beforehand and not timed: this is the PostgreSQL side of the ingester's work.
func ingestApplier(b *testing.B, ctx context.Context, gen loadgen.Output, n, size int, perEventOnly bool) float64 {
	pool := benchPool(b)
	mp, err := samples.Path("providers.yaml")
	if err != nil {
		b.Fatal(err)
	}
	m, err := providers.LoadMap(mp)
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
	start := time.Now()
	for _, batch := range batches {
		if err := ap.Apply(ctx, batch); err != nil {
			b.Fatal(err)
		}
	}
	return uniquePerSecond(b, ctx, pool, time.Since(start))
}

// uniquePerSecond is the events in processed_event per second of el: every figure of
// BenchmarkIngest counts unique events, redeliveries are work but not output.
func uniquePerSecond(b *testing.B, ctx context.Context, pool *pgxpool.Pool, el time.Duration) float64 {
	var unique int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM processed_event`).Scan(&unique); err != nil {
		b.Fatal(err)
	}
	return float64(unique) / el.Seconds()
}

func benchPool(b *testing.B) *pgxpool.Pool {
	pool := pgtest.NewPool(b)
	if err := processedevent.EnsurePartitions(context.Background(), pool, time.Now().Add(-time.Hour), time.Now()); err != nil {
		b.Fatal(err)
	}
	return pool
}

// ingestBareCeiling: the best batched insert-first + state upsert: per 1,000 events, one
// transaction with three set-based statements (dedup rows, intents, attempt upsert).
func ingestBareCeiling(b *testing.B, ctx context.Context, evs []events.Attempt, hashes []string) float64 {
	pool := benchPool(b)
	start := time.Now()
	for lo := 0; lo < len(evs); lo += 1000 {
		batch := evs[lo:min(lo+1000, len(evs))]
		err := postgres.WithTx(ctx, pool, func(tx pgx.Tx) error {
			var t, id, h, intent, key, status []string
			var day []time.Time
			for i, e := range batch {
				t, id, h, day = append(t, e.TenantID), append(id, e.EventID), append(h, hashes[lo+i]), append(day, processedevent.Day(e.OccurredAt))
			}
			rows, err := tx.Query(ctx, `INSERT INTO processed_event (consumer, tenant_id, event_id, occurred_day, event_hash)
				SELECT 'ceiling', * FROM unnest($1::text[], $2::text[], $3::date[], $4::text[]) ON CONFLICT DO NOTHING RETURNING event_id`, t, id, day, h)
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
			if _, err := tx.Exec(ctx, `INSERT INTO booking_intent SELECT DISTINCT * FROM unnest($1::text[], $2::text[]) ON CONFLICT DO NOTHING`, t, intent); err != nil {
				return err
			}
			_, err = tx.Exec(ctx, `INSERT INTO booking_attempt (id, tenant_id, booking_intent_id, operation, subject, operation_version,
					idempotency_key, provider, status, first_event_at, window_start)
				SELECT gen_random_uuid(), t, i, 'BOOK', i, 1, k, 'sim-hotels', s, now(), now() FROM unnest($1::text[], $2::text[], $3::text[], $4::text[]) AS u(t, i, k, s)
				ON CONFLICT (tenant_id, idempotency_key) DO UPDATE SET status = excluded.status, updated_at = now()`, t, intent, key, status)
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	return uniquePerSecond(b, ctx, pool, time.Since(start))
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
func ingestBareBaseline(b *testing.B, ctx context.Context, evs []events.Attempt, hashes []string) float64 {
	pool := benchPool(b)
	start := time.Now()
	for i, e := range evs {
		err := postgres.WithTx(ctx, pool, func(tx pgx.Tx) error {
			tag, err := tx.Exec(ctx, `INSERT INTO processed_event (consumer, tenant_id, event_id, occurred_day, event_hash)
				VALUES ('baseline', $1, $2, $3, $4) ON CONFLICT DO NOTHING`, e.TenantID, e.EventID, processedevent.Day(e.OccurredAt), hashes[i])
			if err != nil || tag.RowsAffected() == 0 {
				return err
			}
			st := bareStatus(e)
			if _, err := tx.Exec(ctx, `INSERT INTO booking_intent VALUES ($1, $2) ON CONFLICT DO NOTHING`, e.TenantID, e.BookingIntentID); err != nil {
				return err
			}
			_, err = tx.Exec(ctx, `INSERT INTO booking_attempt (id, tenant_id, booking_intent_id, operation, subject, operation_version,
					idempotency_key, provider, status, first_event_at, window_start)
				VALUES (gen_random_uuid(), $1, $2, 'BOOK', $2, 1, $3, 'sim-hotels', $4, now(), now())
				ON CONFLICT (tenant_id, idempotency_key) DO UPDATE SET status = excluded.status, updated_at = now()`, e.TenantID, e.BookingIntentID, e.IdempotencyKey, st)
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	return uniquePerSecond(b, ctx, pool, time.Since(start))
}

// ingestEndToEnd publishes the records, then starts the ingester binary and times it from its
// first committed batch until every unique event is applied. It returns events/s, the
// ingester's peak RSS in KiB and its start-up time (start to first committed batch).
func ingestEndToEnd(b *testing.B, ctx context.Context, gen loadgen.Output) (float64, int64, time.Duration) {
	sfx := kafkatest.Suffix()
	topics := []string{"booking.attempts.v1." + sfx, "booking.attempts.dlq.v1." + sfx, "booking.manual-decisions.v1." + sfx,
		"booking.manual-decisions.dlq.v1." + sfx, "booking.resolutions.v1." + sfx, "booking.escalations.v1." + sfx}
	kafkatest.CreateTopics(b, 6, topics...)
	dbURL := pgtest.NewURL(b)
	pool, err := postgres.Open(ctx, dbURL, 2)
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

	bin := filepath.Join(b.TempDir(), "ingester")
	build := exec.Command("go", "build", "-o", bin, "github.com/bookrecon/bookrecon/cmd/ingester")
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		b.Fatal(err)
	}
	mp, err := samples.Path("providers.yaml")
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "BOOKRECON_DATABASE_URL="+dbURL, "BOOKRECON_KAFKA_BROKERS="+strings.Join(kafkatest.Brokers(), ","),
		"BOOKRECON_PROVIDERS="+mp, "BOOKRECON_TOPIC_SUFFIX="+sfx, "BOOKRECON_INGESTER_GROUP=bench-"+sfx,
		"BOOKRECON_INGESTER_ADMIN_ADDR="+benchAdminAddr())
	start := time.Now()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = cmd.Process.Signal(syscall.SIGTERM); _ = cmd.Wait() }()
	// Throughput is timed from the first committed batch: process start, connections, the
	// schema and partition checks and the group join are start-up, reported on their own.
	var peak int64
	var first time.Time
	var atFirst int
	for {
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM processed_event`).Scan(&n); err != nil {
			b.Fatal(err)
		}
		peak = max(peak, vmHWM(cmd.Process.Pid))
		if n > 0 && first.IsZero() {
			first, atFirst = time.Now(), n
		}
		if n >= gen.UniqueEvents {
			break
		}
		if time.Since(start) > 20*time.Minute {
			b.Fatalf("ingester applied %d of %d events in 20 minutes", n, gen.UniqueEvents)
		}
		if first.IsZero() {
			time.Sleep(20 * time.Millisecond)
		} else {
			time.Sleep(250 * time.Millisecond) // a count(*) costs the database a few ms: poll gently
		}
	}
	if atFirst == gen.UniqueEvents { // everything in the first batch: nothing to time after it
		first, atFirst = start, 0
	}
	return float64(gen.UniqueEvents-atFirst) / time.Since(first).Seconds(), peak, first.Sub(start)
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
