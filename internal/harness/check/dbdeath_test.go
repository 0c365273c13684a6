package check_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/bookrecon/bookrecon/internal/attempt"
	"github.com/bookrecon/bookrecon/internal/escalate"
	"github.com/bookrecon/bookrecon/internal/harness/check"
	"github.com/bookrecon/bookrecon/internal/harness/kafkatest"
	"github.com/bookrecon/bookrecon/internal/harness/loadgen"
	"github.com/bookrecon/bookrecon/internal/harness/pgtest"
	"github.com/bookrecon/bookrecon/internal/harness/pipelinetest"
	"github.com/bookrecon/bookrecon/internal/ingest"
	"github.com/bookrecon/bookrecon/internal/ingest/testsignal"
	"github.com/bookrecon/bookrecon/internal/reconcile"
	"github.com/bookrecon/bookrecon/internal/telemetry"
	"github.com/bookrecon/bookrecon/providers"
	"github.com/bookrecon/bookrecon/providers/simulator"
)

// crashDown is how long the database stays down after each crash.
const crashDown = 3 * time.Second

// TestLoadDatabaseDies: the database dies under load. On a PostgreSQL cluster of the test's own
// (pgtest.OwnCluster), the whole pipeline — ingester, two reconcilers, escalator — works
// through a generated load (3,000 intents of the default mix, about 6,300 records) while the
// cluster is stopped with -m immediate (a crash: no checkpoint, recovery at the next start) and
// started crashDown later:
//   - mid-batch: twice, each time with a batch's transaction open (dedup rows written);
//   - after-db-commit: once between a batch's COMMIT and its offset commit.
//
// Then every unique event is applied exactly once and none is lost: the ingester counted every
// record consumed once and exactly the generator's redeliveries as duplicate deliveries (no batch
// was consumed again), nothing is dead-lettered, every attempt ends as the generator expects,
// the ingester paused, reported itself not ready while the database was down and ready after,
// the group's lag is 0 and the checker reports 0 violations of its 8 invariants.
func TestLoadDatabaseDies(t *testing.T) {
	if testing.Short() {
		t.Skip("load run on a PostgreSQL cluster of its own")
	}
	t.Parallel()
	pg := pgtest.OwnCluster(t)
	// Sequential: the scenarios share the cluster, each in a database of its own.
	t.Run("mid-batch", func(t *testing.T) {
		// The 3rd and 9th transaction tries, after the 6th record.
		var tries atomic.Int64
		runDatabaseDies(t, pg, 2, func(crash func(string)) testsignal.Ingester {
			return testsignal.Ingester{BeforeRecord: func(i int) {
				if i == 0 {
					tries.Add(1)
				}
				if n := tries.Load(); i == 5 && (n == 3 || n == 9) {
					crash(fmt.Sprintf("transaction try %d open, after record %d", n, i))
				}
			}}
		})
	})
	t.Run("after-db-commit", func(t *testing.T) {
		var commits atomic.Int64
		runDatabaseDies(t, pg, 1, func(crash func(string)) testsignal.Ingester {
			return testsignal.Ingester{AfterDBCommit: func() {
				if n := commits.Add(1); n == 5 {
					crash(fmt.Sprintf("batch %d committed in PostgreSQL, its offsets not yet in Kafka", n))
				}
			}}
		})
	})
}

// outage is one crash of the database.
type outage struct {
	where            string
	stopped, started time.Time // Stop called; Start returned (crash recovery done)
	resumed          time.Time // the first batch committed after started
}

// runDatabaseDies runs the load on a fresh database of pg with the ingester's test signals from
// hooks, whose crash stops pg at once (-m immediate) and starts it crashDown later; it checks
// that crashes happen, and the end state.
func runDatabaseDies(t *testing.T, pg *pgtest.Cluster, crashes int, hooks func(crash func(where string)) testsignal.Ingester) {
	began := time.Now()
	h := pipelinetest.NewOn(t, 3, pg.NewDatabase(t))
	m, err := providers.ParseMap([]byte(loadMap))
	if err != nil {
		t.Fatal(err)
	}
	h.Providers = m
	gen := loadgen.Generate(loadgen.Config{Intents: 3000, Seed: 61, Start: time.Now().Add(-10 * time.Minute), Mix: loadgen.DefaultMix})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	for i, r := range gen.Records {
		h.Producer.Produce(ctx, &kgo.Record{Topic: h.Topics.Attempts, Key: gen.Keys[i], Value: r}, nil)
	}
	if err := h.Producer.Flush(ctx); err != nil {
		t.Fatal(err)
	}

	var (
		mu      sync.Mutex
		outages []*outage
		admin   atomic.Pointer[string] // the ingester's admin address
		restart sync.WaitGroup
	)
	defer restart.Wait()
	crash := func(where string) {
		o := &outage{where: where, stopped: time.Now()}
		if err := pg.Stop(true); err != nil {
			t.Errorf("crash (%s): %v", where, err)
			return
		}
		mu.Lock()
		outages = append(outages, o)
		mu.Unlock()
		restart.Go(func() {
			time.Sleep(crashDown)
			if a := admin.Load(); a == nil {
				t.Errorf("crash (%s): the admin server has not started", where)
			} else if code := readyz(*a); code != http.StatusServiceUnavailable {
				t.Errorf("/readyz with the database down (%s) = %d, want 503", where, code)
			}
			if err := pg.Start(); err != nil {
				t.Errorf("restart after the crash (%s): %v", where, err)
			}
			mu.Lock()
			o.started = time.Now()
			mu.Unlock()
		})
	}
	sig := hooks(crash)
	deps := ingest.Deps{Logger: testLogger(), Registry: telemetry.NewRegistry(), AdminStarted: func(a string) { admin.Store(&a) }}
	crashHook := sig.AfterDBCommit
	sig.AfterDBCommit = func() {
		mu.Lock()
		for _, o := range outages {
			if !o.started.IsZero() && o.resumed.IsZero() {
				o.resumed = time.Now()
			}
		}
		mu.Unlock()
		if crashHook != nil {
			crashHook()
		}
	}

	sim := simulator.New(simulator.Config{Truth: gen.Truth, Map: m})
	srv := httptest.NewServer(sim)
	defer srv.Close()
	cfg := h.IngestConfig()
	cfg.MaxPollRecords = 300 // about 21 batches
	wg.Go(func() {
		if err := ingest.Run(testsignal.With(ctx, sig), cfg, deps); err != nil {
			t.Errorf("ingest: %v", err)
		}
	})
	store := attempt.Config{ResolutionsTopic: h.Topics.Resolutions, EscalationsTopic: h.Topics.Escalations}
	for i := range 2 {
		rec, err := reconcile.New(reconcile.Config{Owner: fmt.Sprint("r", i), Providers: m, Poll: 100 * time.Millisecond,
			InitialInterval: 200 * time.Millisecond, MaxInterval: 2 * time.Second, NoJitter: true, Batch: 200, Workers: 8, Store: store},
			h.Pool, providers.NewHTTP(srv.URL, nil), deps.Logger, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() { _ = rec.Run(ctx) })
	}
	esc, err := escalate.New(escalate.Config{Providers: m, Store: store}, h.Pool, deps.Logger, nil)
	if err != nil {
		t.Fatal(err)
	}
	wg.Go(func() { _ = esc.Run(ctx) })

	// The database goes away under the waits: a failed query is "not yet".
	count := func(q string) int {
		qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		var n int
		if err := h.Pool.QueryRow(qctx, q).Scan(&n); err != nil {
			return -1
		}
		return n
	}
	h.WaitFor("every unique event applied", 2*time.Minute, func() bool {
		return count(`SELECT count(*) FROM processed_event`) == gen.UniqueEvents
	})
	applied := time.Since(began)
	restart.Wait()
	mu.Lock()
	n := len(outages)
	mu.Unlock()
	if n != crashes {
		t.Fatalf("%d crashes happened, want %d: the fault was not injected", n, crashes)
	}
	h.WaitFor("no UNKNOWN left, outbox drained", 2*time.Minute, func() bool {
		return count(`SELECT count(*) FROM booking_attempt WHERE status IN ('UNKNOWN', 'IN_PROGRESS')`) == 0 &&
			count(`SELECT count(*) FROM outbox WHERE discarded_at IS NULL`) == 0
	})
	adm := kadm.NewClient(h.Producer)
	h.WaitFor("the group's lag at 0", time.Minute, func() bool {
		lags, err := adm.Lag(ctx, cfg.Group)
		l := lags[cfg.Group]
		return err == nil && l.Error() == nil && l.Lag.Total() == 0
	})
	settled := time.Since(began)

	// Exact counts.
	dupes := len(gen.Records) - gen.UniqueEvents
	for _, c := range []struct {
		what      string
		got, want int
	}{
		{"processed_event rows", h.Scalar(`SELECT count(*) FROM processed_event`), gen.UniqueEvents},
		{"records consumed (bookrecon_events_consumed_total)", sum(t, deps.Registry, "bookrecon_events_consumed_total"), len(gen.Records)},
		{"duplicate deliveries (the generator's redeliveries; no batch consumed again)", sum(t, deps.Registry, "bookrecon_duplicate_deliveries_total"), dupes},
		{"dead letters (bookrecon_dead_letters_total)", sum(t, deps.Registry, "bookrecon_dead_letters_total"), 0},
		{"dead-letter outbox rows", h.Scalar(`SELECT count(*) FROM outbox_fact WHERE topic IN ($1, $2)`, h.Topics.AttemptsDLQ, h.Topics.DecisionsDLQ), 0},
		{"attempts", h.Scalar(`SELECT count(*) FROM booking_attempt`), len(gen.Expected)},
	} {
		if c.got != c.want {
			t.Errorf("%s = %d, want %d", c.what, c.got, c.want)
		}
	}
	want := map[string]int{}
	for _, e := range gen.Expected {
		want[e.Status+"/"+e.Source]++
	}
	rows, err := h.Pool.Query(ctx, `SELECT status || '/' || coalesce(resolution_source, ''), count(*) FROM booking_attempt GROUP BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for rows.Next() {
		var k string
		var n int
		if err := rows.Scan(&k, &n); err != nil {
			t.Fatal(err)
		}
		got[k] = n
	}
	if rows.Close(); rows.Err() != nil {
		t.Fatal(rows.Err())
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("attempts by status/source = %v, want %v", got, want)
	}
	pauses := sum(t, deps.Registry, "bookrecon_ingest_pauses_total")
	if pauses < crashes {
		t.Errorf("bookrecon_ingest_pauses_total = %d after %d crashes; want at least %d", pauses, crashes, crashes)
	}
	if a := admin.Load(); a == nil || readyz(*a) != http.StatusOK {
		t.Errorf("/readyz after recovery: want 200")
	}

	rep, err := check.Run(ctx, h.Pool, kafkatest.Brokers(), h.Topics, check.Input{Run: gen, Providers: m, Consumer: cfg.Group + "/" + h.Topics.Attempts})
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	for i, o := range outages {
		t.Logf("crash %d (%s): down %s (restart with recovery %s), first batch committed %s after the restart",
			i+1, o.where, o.started.Sub(o.stopped).Round(time.Millisecond), (o.started.Sub(o.stopped) - crashDown).Round(time.Millisecond),
			o.resumed.Sub(o.started).Round(time.Millisecond))
		if o.resumed.IsZero() {
			t.Errorf("crash %d: no batch committed after the restart", i+1)
		}
	}
	mu.Unlock()
	t.Logf("%d records (%d unique, %d attempts); %d crashes; %d batch pauses; %d relay rows published again (unmarked); all applied after %s, settled after %s\n%s",
		len(gen.Records), gen.UniqueEvents, len(gen.Expected), crashes, pauses, sum(t, deps.Registry, "bookrecon_outbox_unmarked_total"),
		applied.Round(time.Millisecond), settled.Round(time.Millisecond), rep)
	if !rep.OK() {
		t.Errorf("invariant violations:\n%s", rep)
	}
	if len(rep.Invariants) != 8 {
		t.Errorf("checked %d invariants, want 8", len(rep.Invariants))
	}
}

// readyz returns the status code of the admin server's /readyz (0 when it does not answer).
func readyz(addr string) int {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + addr + "/readyz")
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// sum adds every series of a counter family.
func sum(t *testing.T, g prometheus.Gatherer, name string) int {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	total := 0.0
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				total += m.GetCounter().GetValue()
			}
			return int(total)
		}
	}
	t.Fatalf("metric %s not registered", name)
	return 0
}

// testLogger discards logs, unless BOOKRECON_TEST_LOG is set (then they go to stderr).
func testLogger() *slog.Logger {
	if os.Getenv("BOOKRECON_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	return slog.New(slog.DiscardHandler)
}
