package bench

// The reconciler's claim benchmark (docs/reconciler.md):
//
//	go test -run='^$' -bench=Claim -benchtime=1x ./internal/bench/
//
// Everything here is named claim*: the package is shared with other benchmarks.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/bookrecon/bookrecon/events"
	"github.com/bookrecon/bookrecon/internal/harness/pgtest"
	"github.com/bookrecon/bookrecon/internal/postgres"
	"github.com/bookrecon/bookrecon/internal/reconcile"
	"github.com/bookrecon/bookrecon/providers"
	"github.com/bookrecon/bookrecon/providers/simulator"
)

const (
	claimBatch       = 100
	claimReconcilers = 2
	claimDue         = 10_000
	claimProvider    = "bench-hotels"
	claimLookups     = 20_000 // per iteration of the lookup benchmark
	claimLookupConc  = 8
	claimTruthSize   = 1_000
)

// claimMap is one provider without a binding rate limit.
const claimMap = `providers:
  bench-hotels:
    lookups: [provider_reference, client_reference]
    authoritativeNotFound: true
    rateLimit: {rps: 1000000, burst: 1000000}
`

// claimResult is what one claim benchmark measured.
type claimResult struct {
	rows, due      int
	claimsPerSec   float64
	p50, p99       time.Duration // one Claim(ctx, 100) call: the statement and the rows' reads
	stmtMean       time.Duration // the claim statement alone (bookrecon_reconcile_claim_seconds)
	calls, claimed int
}

type claimLookupResult struct {
	perSec   float64
	p50, p99 time.Duration
	lookups  int
}

// BenchmarkClaim: two reconcilers call Claim(ctx, 100) concurrently until all 10,000 due
// UNKNOWN attempts are claimed, on a table of 1,000,000 attempts and on one of 10,000 (all
// due), after an untimed warm-up drain; the claim's row selection must read the partial due
// index (checked), so its cost does not grow with the table. Then provider lookups per second
// against the simulator over HTTP. Prints a table with the ratios.
func BenchmarkClaim(b *testing.B) {
	var big, small claimResult
	var look claimLookupResult
	b.Run("rows=1000000/due=10000", func(b *testing.B) { big = claimBench(b, 1_000_000, claimDue) })
	b.Run("rows=10000/due=10000", func(b *testing.B) { small = claimBench(b, claimDue, claimDue) })
	b.Run("provider-lookups/http", func(b *testing.B) { look = claimLookupBench(b) })
	if big.claimed == 0 || small.claimed == 0 || look.lookups == 0 {
		return // a sub-benchmark was filtered out or failed
	}
	fmt.Printf("\nreconciler claims: %d reconcilers × Claim(ctx, %d) until %d due UNKNOWN attempts are claimed\n",
		claimReconcilers, claimBatch, claimDue)
	fmt.Printf("%-12s %-8s %12s %10s %10s %14s %7s\n", "table rows", "due", "claims/s", "p50 ms", "p99 ms", "stmt mean ms", "calls")
	for _, r := range []claimResult{big, small} {
		fmt.Printf("%-12d %-8d %12.0f %10.2f %10.2f %14.2f %7d\n", r.rows, r.due, r.claimsPerSec, claimMS(r.p50), claimMS(r.p99), claimMS(r.stmtMean), r.calls)
	}
	fmt.Printf("ratio 1M/10k: claims/s ×%.2f, p99 ×%.2f, statement ×%.2f (1 = no growth with the table)\n",
		big.claimsPerSec/small.claimsPerSec, claimMS(big.p99)/claimMS(small.p99), claimMS(big.stmtMean)/claimMS(small.stmtMean))
	fmt.Printf("provider lookups over HTTP (simulator, %d workers): %.0f lookups/s, p50 %.2f ms, p99 %.2f ms (%d lookups)\n\n",
		claimLookupConc, look.perSec, claimMS(look.p50), claimMS(look.p99), look.lookups)
}

func claimMS(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// claimFill bulk-inserts rows attempts (and their intents) in one INSERT … SELECT each: the
// first due are UNKNOWN and due at now, then up to 40,000 UNKNOWN due in an hour, the rest
// terminal (CONFIRMED or FAILED). Ids are time-ordered (UUIDv7 layout), as the pipeline's.
func claimFill(ctx context.Context, pool *pgxpool.Pool, rows, due int, now time.Time) error {
	if _, err := pool.Exec(ctx, `INSERT INTO booking_intent (tenant_id, booking_intent_id)
		SELECT 't_bench', 'bi_' || g FROM generate_series(1, $1::int) g`, rows); err != nil {
		return fmt.Errorf("intents: %w", err)
	}
	_, err := pool.Exec(ctx, `INSERT INTO booking_attempt (id, tenant_id, booking_intent_id, operation, subject,
			operation_version, idempotency_key, provider, status, resolution_source, client_reference, provider_reference,
			timeout_class, first_event_at, window_start, unknown_since, terminal_at, next_check_at, check_count)
		SELECT ('01900000-0000-7000-8000-' || lpad(to_hex(g), 12, '0'))::uuid, 't_bench', 'bi_' || g, 'BOOK', 'bi_' || g, 1,
			'book:bi_' || g || ':v1', $4,
			CASE WHEN g <= $2 + 40000 THEN 'UNKNOWN' WHEN g % 10 = 0 THEN 'FAILED' ELSE 'CONFIRMED' END,
			CASE WHEN g > $2 + 40000 THEN 'event' END,
			'cr_' || g,
			CASE WHEN g > $2 + 40000 AND g % 10 <> 0 THEN 'HTL-' || g END,
			'read_timeout', $3::timestamptz - interval '1 hour', $3::timestamptz - interval '1 hour',
			CASE WHEN g <= $2 + 40000 THEN $3::timestamptz - interval '1 hour' END,
			CASE WHEN g > $2 + 40000 THEN $3::timestamptz - interval '30 minutes' END,
			CASE WHEN g <= $2 THEN $3::timestamptz - (g * interval '1 millisecond')
				WHEN g <= $2 + 40000 THEN $3::timestamptz + interval '1 hour' + (g * interval '1 millisecond') END,
			CASE WHEN g <= $2 + 40000 THEN 3 ELSE 0 END
		FROM generate_series(1, $1::int) g`, rows, due, now, claimProvider)
	if err != nil {
		return fmt.Errorf("attempts: %w", err)
	}
	for _, q := range []string{`VACUUM ANALYZE booking_intent`, `VACUUM ANALYZE booking_attempt`} {
		if _, err := pool.Exec(ctx, q); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	return nil
}

// claimPlanUsesDueIndex checks the structural reason the claim does not grow with the table:
// the claim's row selection (reconcile.Claim's CTE) reads the partial index of UNKNOWN attempts
// by next_check_at, never the table.
func claimPlanUsesDueIndex(ctx context.Context, pool *pgxpool.Pool, now time.Time) error {
	rows, err := pool.Query(ctx, `EXPLAIN SELECT id FROM booking_attempt WHERE status = 'UNKNOWN' AND next_check_at <= $1
		ORDER BY next_check_at LIMIT $2 FOR UPDATE SKIP LOCKED`, now, claimBatch)
	if err != nil {
		return err
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	plan := strings.Join(lines, "\n")
	if !strings.Contains(plan, "booking_attempt_due") || strings.Contains(plan, "Seq Scan") {
		return fmt.Errorf("the claim does not read the due index:\n%s", plan)
	}
	return nil
}

// claimReset makes the claimed rows due again (between iterations when b.N > 1).
func claimReset(ctx context.Context, pool *pgxpool.Pool, due int, now time.Time) error {
	_, err := pool.Exec(ctx, `UPDATE booking_attempt SET lease_owner = NULL, lease_expires_at = NULL,
		next_check_at = $2::timestamptz - interval '1 millisecond'
		WHERE status = 'UNKNOWN' AND next_check_at <= $2::timestamptz + interval '1 minute' AND tenant_id = 't_bench'
		AND booking_intent_id IN (SELECT 'bi_' || g FROM generate_series(1, $1::int) g)`, due, now)
	if err != nil {
		return err
	}
	_, err = pool.Exec(ctx, `VACUUM ANALYZE booking_attempt`)
	return err
}

func claimBench(b *testing.B, rows, due int) claimResult {
	ctx := context.Background()
	url := pgtest.NewURL(b)
	admin, err := postgres.Open(ctx, url, 2)
	if err != nil {
		b.Fatal(err)
	}
	defer admin.Close()
	m, err := providers.ParseMap([]byte(claimMap))
	if err != nil {
		b.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	fill := time.Now()
	if err := claimFill(ctx, admin, rows, due, now); err != nil {
		b.Fatal(err)
	}
	b.Logf("filled %d attempts (%d due) in %s", rows, due, time.Since(fill).Round(time.Millisecond))
	if err := claimPlanUsesDueIndex(ctx, admin, now); err != nil {
		b.Fatal(err)
	}

	type claimer struct {
		rec *reconcile.Reconciler
		reg *prometheus.Registry
	}
	cs := make([]claimer, claimReconcilers)
	for i := range cs {
		pool, err := postgres.Open(ctx, url, 4)
		if err != nil {
			b.Fatal(err)
		}
		defer pool.Close()
		reg := prometheus.NewRegistry()
		rec, err := reconcile.New(reconcile.Config{Owner: fmt.Sprintf("bench-%d", i), Providers: m},
			pool, nil, slog.New(slog.DiscardHandler), reg, func() time.Time { return now })
		if err != nil {
			b.Fatal(err)
		}
		cs[i] = claimer{rec, reg}
	}

	res := claimResult{rows: rows, due: due}
	recs := make([]*reconcile.Reconciler, len(cs))
	for i, c := range cs {
		recs[i] = c.rec
	}
	// A warm-up drain, untimed, then the rows are made due again: both tables are measured with
	// their due rows in cache and their bulk load's dirty pages written, as in steady state.
	if _, _, err := claimDrain(ctx, recs, due); err != nil {
		b.Fatal(err)
	}
	if err := claimReset(ctx, admin, due, now); err != nil {
		b.Fatal(err)
	}
	var warm []float64
	for _, c := range cs {
		s, k := claimHistogram(b, c.reg, "bookrecon_reconcile_claim_seconds")
		warm = append(warm, s, float64(k))
	}
	var lat []time.Duration
	var elapsed time.Duration
	b.ResetTimer()
	for i := range b.N {
		if i > 0 {
			b.StopTimer()
			if err := claimReset(ctx, admin, due, now); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
		l, e, err := claimDrain(ctx, recs, due)
		if err != nil {
			b.Fatal(err)
		}
		lat, elapsed = append(lat, l...), elapsed+e
		res.claimed += due
	}
	b.StopTimer()

	slices.Sort(lat)
	res.calls = len(lat)
	res.claimsPerSec = float64(res.claimed) / elapsed.Seconds()
	res.p50 = claimPercentile(lat, 0.50)
	res.p99 = claimPercentile(lat, 0.99)
	var sum float64
	var n uint64
	for i, c := range cs { // the measured passes only: minus the warm-up's share
		s, k := claimHistogram(b, c.reg, "bookrecon_reconcile_claim_seconds")
		sum, n = sum+s-warm[2*i], n+k-uint64(warm[2*i+1])
	}
	if n > 0 {
		res.stmtMean = time.Duration(sum / float64(n) * float64(time.Second))
	}
	b.ReportMetric(res.claimsPerSec, "claims/s")
	b.ReportMetric(claimMS(res.p99), "p99-ms/claim")
	b.ReportMetric(claimMS(res.p50), "p50-ms/claim")
	b.ReportMetric(claimMS(res.stmtMean), "stmt-ms/claim")
	b.ReportMetric(0, "ns/op") // one op is a whole drain; ns/op says nothing here
	return res
}

// claimDrain runs the reconcilers' Claim(ctx, claimBatch) concurrently until nothing is due,
// and checks that exactly due distinct attempts were claimed. It returns the latency of every
// call that claimed something and the wall time of the drain.
func claimDrain(ctx context.Context, recs []*reconcile.Reconciler, due int) ([]time.Duration, time.Duration, error) {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		lat  []time.Duration
		seen = make(map[uuid.UUID]bool, due)
		errs []error
	)
	t0 := time.Now()
	for _, r := range recs {
		wg.Go(func() {
			for {
				s := time.Now()
				got, err := r.Claim(ctx, claimBatch)
				d := time.Since(s)
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
				}
				if len(got) > 0 {
					lat = append(lat, d)
				}
				for _, g := range got {
					if seen[g.Row.ID] {
						errs = append(errs, fmt.Errorf("attempt %s claimed twice", g.Row.ID))
					}
					seen[g.Row.ID] = true
				}
				mu.Unlock()
				if err != nil || len(got) == 0 {
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(t0)
	if len(seen) != due {
		errs = append(errs, fmt.Errorf("claimed %d distinct attempts, want %d", len(seen), due))
	}
	return lat, elapsed, errors.Join(errs...)
}

// claimPercentile is the nearest-rank percentile of sorted durations.
func claimPercentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted))*p+0.999999) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// claimHistogram returns the sample sum and count of a histogram in reg.
func claimHistogram(b *testing.B, reg *prometheus.Registry, name string) (float64, uint64) {
	mfs, err := reg.Gather()
	if err != nil {
		b.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			h := mf.GetMetric()[0].GetHistogram()
			return h.GetSampleSum(), h.GetSampleCount()
		}
	}
	b.Fatalf("no metric %s", name)
	return 0, 0
}

// claimLookupBench measures provider lookups per second through providers.NewHTTP against the
// simulator served by httptest, claimLookupConc at a time, each a client_reference lookup that
// finds one record among claimTruthSize.
func claimLookupBench(b *testing.B) claimLookupResult {
	m, err := providers.ParseMap([]byte(claimMap))
	if err != nil {
		b.Fatal(err)
	}
	created := time.Now().Add(-time.Hour)
	recs := make([]providers.Record, 0, claimTruthSize)
	for i := range claimTruthSize {
		recs = append(recs, providers.Record{ProviderReference: fmt.Sprintf("HTL-%d", i), ClientReference: fmt.Sprintf("cr_%d", i),
			Status: providers.StatusConfirmed, CreatedAt: created})
	}
	sim := simulator.New(simulator.Config{Truth: simulator.Truth{claimProvider: recs}, Map: m})
	srv := httptest.NewServer(sim)
	defer srv.Close()
	tr := &http.Transport{MaxIdleConns: 2 * claimLookupConc, MaxIdleConnsPerHost: 2 * claimLookupConc}
	defer tr.CloseIdleConnections()
	p := providers.NewHTTP(srv.URL, &http.Client{Transport: tr})
	ctx := context.Background()

	var (
		mu      sync.Mutex
		lat     []time.Duration
		errs    []error
		elapsed time.Duration
	)
	b.ResetTimer()
	for range b.N {
		work := make(chan int)
		var wg sync.WaitGroup
		t0 := time.Now()
		for range claimLookupConc {
			wg.Go(func() {
				local := make([]time.Duration, 0, claimLookups/claimLookupConc+1)
				for i := range work {
					q := providers.Query{Provider: claimProvider, Operation: events.OpBook, Kind: providers.LookupClientReference,
						Value: fmt.Sprintf("cr_%d", i%claimTruthSize)}
					s := time.Now()
					got, err := p.Lookup(ctx, q)
					local = append(local, time.Since(s))
					if err == nil && len(got) != 1 {
						err = fmt.Errorf("%s: %d records", q.Value, len(got))
					}
					if err != nil {
						mu.Lock()
						errs = append(errs, err)
						mu.Unlock()
					}
				}
				mu.Lock()
				lat = append(lat, local...)
				mu.Unlock()
			})
		}
		for i := range claimLookups {
			work <- i
		}
		close(work)
		wg.Wait()
		elapsed += time.Since(t0)
	}
	b.StopTimer()
	if len(errs) > 0 {
		b.Fatalf("%d lookups failed, first: %v", len(errs), errs[0])
	}
	if st := sim.Stats(); len(st.Creates) != 0 {
		b.Fatalf("create calls: %v", st.Creates)
	}
	slices.SortFunc(lat, cmp.Compare)
	r := claimLookupResult{lookups: len(lat), perSec: float64(len(lat)) / elapsed.Seconds(),
		p50: claimPercentile(lat, 0.50), p99: claimPercentile(lat, 0.99)}
	b.ReportMetric(r.perSec, "lookups/s")
	b.ReportMetric(claimMS(r.p99), "p99-ms/lookup")
	b.ReportMetric(0, "ns/op")
	return r
}
