package ingest_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/bookrecon/bookrecon/internal/harness/loadgen"
	"github.com/bookrecon/bookrecon/internal/harness/pgtest"
	"github.com/bookrecon/bookrecon/internal/harness/pipelinetest"
	"github.com/bookrecon/bookrecon/internal/ingest"
	"github.com/bookrecon/bookrecon/internal/ingest/testsignal"
	"github.com/bookrecon/bookrecon/internal/postgres"
	"github.com/bookrecon/bookrecon/internal/telemetry"
)

// TestDatabaseOutagePausesNeverDeadLetters: while the ingester works through 6,000 events, its
// database connection is killed in the middle of three batches (pg_terminate_backend). Batches pause and are
// retried; no good event is dead-lettered, none is lost, none is applied twice, and the end
// state is exactly the generator's.
func TestDatabaseOutagePausesNeverDeadLetters(t *testing.T) {
	if testing.Short() {
		t.Skip("outage run")
	}
	t.Parallel()
	h, gen, admin, dbName := outageSetup(t, 3000, 5)
	ctx := context.Background()

	// Three times, in the middle of a batch (its transaction open), every connection of the
	// test database that is in a transaction is terminated; the harness's idle ones survive.
	var kills, killed atomic.Int64
	deps := ingest.Deps{Logger: discardLogger(), Registry: telemetry.NewRegistry()}
	var sig testsignal.Ingester
	sig.BeforeRecord = func(i int) {
		if i != 5 || kills.Add(1) > 3 {
			return
		}
		var n int64
		if err := admin.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
			WHERE datname = $1 AND pid <> pg_backend_pid() AND state IN ('active', 'idle in transaction')`, dbName).Scan(&n); err != nil {
			t.Errorf("terminate: %v", err)
		}
		killed.Add(n)
	}
	cfg := h.IngestConfig()
	cfg.MaxPollRecords = 300
	startIngesterSignalled(t, cfg, deps, sig)

	h.WaitFor("every unique event applied", 3*time.Minute, func() bool {
		return h.Scalar(`SELECT count(*) FROM processed_event`) == gen.UniqueEvents
	})
	h.WaitFor("outbox drained", time.Minute, h.OutboxDrained)
	if killed.Load() < 3 {
		t.Fatalf("%d connections killed in open batches; want at least 3: the outage did not happen", killed.Load())
	}
	if pauses := metric(t, deps.Registry, "bookrecon_ingest_pauses_total"); pauses < 3 {
		t.Errorf("bookrecon_ingest_pauses_total = %v after 3 batches lost their connection; want >= 3", pauses)
	}
	appliedOnce(t, h, gen)
	t.Logf("%d connections killed; %v batch pauses", killed.Load(), metric(t, deps.Registry, "bookrecon_ingest_pauses_total"))
}

// outageSetup publishes a generated load of intents (20% failures, 10% redeliveries) to a fresh
// harness and opens an admin pool on the server (closed with the test) to inject faults into
// the harness's database, dbName.
func outageSetup(t *testing.T, intents int, seed uint64) (h *pipelinetest.Harness, gen loadgen.Output, admin *pgxpool.Pool, dbName string) {
	t.Helper()
	h = pipelinetest.New(t, 3)
	gen = loadgen.Generate(loadgen.Config{Intents: intents, Seed: seed, Start: time.Now().Add(-time.Minute), Mix: loadgen.Mix{Failure: 0.2, Redeliveries: 0.1}})
	ctx := context.Background()
	for i, r := range gen.Records {
		h.Producer.Produce(ctx, &kgo.Record{Topic: h.Topics.Attempts, Key: gen.Keys[i], Value: r}, nil)
	}
	if err := h.Producer.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(h.DBURL)
	if err != nil {
		t.Fatal(err)
	}
	admin, err = postgres.Open(ctx, pgtest.URL(), 2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	return h, gen, admin, u.Path[1:]
}

// appliedOnce checks the end state after an outage: nothing dead-lettered, every attempt of the
// generator in its expected status from its own events, one audit row per unique event, one
// resolution per attempt.
func appliedOnce(t *testing.T, h *pipelinetest.Harness, gen loadgen.Output) {
	t.Helper()
	for _, c := range []struct {
		what string
		q    string
		want int
	}{
		{"dead letters", `SELECT count(*) FROM outbox_fact WHERE topic = '` + h.Topics.AttemptsDLQ + `'`, 0},
		{"attempts", `SELECT count(*) FROM booking_attempt`, len(gen.Expected)},
		{"CONFIRMED", `SELECT count(*) FROM booking_attempt WHERE status = 'CONFIRMED' AND resolution_source = 'event'`, countStatus(gen, "CONFIRMED")},
		{"FAILED", `SELECT count(*) FROM booking_attempt WHERE status = 'FAILED' AND resolution_source = 'event'`, countStatus(gen, "FAILED")},
		{"audit rows (one per unique event)", `SELECT count(*) FROM attempt_transition`, gen.UniqueEvents},
		{"resolutions (one per attempt)", `SELECT count(*) FROM outbox_fact WHERE topic = '` + h.Topics.Resolutions + `'`, len(gen.Expected)},
	} {
		if got := h.Scalar(c.q); got != c.want {
			t.Errorf("%s = %d, want %d", c.what, got, c.want)
		}
	}
}

func countStatus(gen loadgen.Output, status string) int {
	n := 0
	for _, e := range gen.Expected {
		if e.Status == status {
			n++
		}
	}
	return n
}

// TestRefusesRetentionShorterThanTopics: processed_event must outlive every redelivery; with a
// TTL of 7 days against topics that keep records 7 days (+1 day margin) the ingester refuses to
// start, with ErrRetention, instead of waiting.
func TestRefusesRetentionShorterThanTopics(t *testing.T) {
	t.Parallel()
	h := pipelinetest.New(t, 1)
	cfg := h.IngestConfig()
	cfg.RetentionDays = 7
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := ingest.Run(ctx, cfg, ingest.Deps{Logger: discardLogger()})
	if !errors.Is(err, ingest.ErrRetention) {
		t.Fatalf("Run = %v, want ErrRetention", err)
	}
}

// TestDatabaseHangPauses: a gray failure. In the middle of the first batch the PostgreSQL
// backend serving it is stopped (SIGSTOP: the connection stays open, nothing answers) and
// resumed 8 s later. With a 2 s BatchTimeout the batch times out, pauses and is retried (the
// retries wait on the stopped transaction's locks, and time out too) until the backend is back
// and aborts its orphaned transaction; then every event is applied exactly once and nothing is
// dead-lettered.
func TestDatabaseHangPauses(t *testing.T) {
	if testing.Short() {
		t.Skip("outage run")
	}
	t.Parallel()
	h, gen, admin, dbName := outageSetup(t, 500, 9)
	ctx := context.Background()

	var stopped atomic.Int64 // the stopped backend's pid
	resumed := make(chan struct{})
	resume := func() {
		if pid := stopped.Swap(-1); pid > 0 {
			if err := syscall.Kill(int(pid), syscall.SIGCONT); err != nil {
				t.Errorf("SIGCONT %d: %v", pid, err)
			}
			close(resumed)
		}
	}
	t.Cleanup(resume)
	giveUp := func() { stopped.Store(-1); close(resumed) } // the fault could not be set up

	var logs logBuffer
	deps := ingest.Deps{Logger: slog.New(slog.NewJSONHandler(&logs, nil)), Registry: telemetry.NewRegistry()}
	var sig testsignal.Ingester
	sig.BeforeRecord = func(i int) {
		if i != 5 || stopped.Load() != 0 {
			return
		}
		// The one backend of the test database inside a transaction that has written (its dedup
		// rows) is the batch's: the relay's lock connection and the harness's are autocommit.
		var pids []int64
		rows, err := admin.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()
			AND state = 'idle in transaction' AND backend_xid IS NOT NULL`, dbName)
		if err == nil {
			pids, err = pgx.CollectRows(rows, pgx.RowTo[int64])
		}
		if err != nil || len(pids) != 1 {
			t.Errorf("the batch's backend: %v %v, want exactly one pid", pids, err)
			giveUp()
			return
		}
		pid := pids[0]
		// Signal only a PostgreSQL process of this machine (the stack's), never whatever else has
		// that pid (a database in a container or elsewhere).
		if comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); err != nil || strings.TrimSpace(string(comm)) != "postgres" {
			t.Errorf("pid %d is not a local postgres process (%q, %v): this fault needs the stack's PostgreSQL", pid, comm, err)
			giveUp()
			return
		}
		if err := syscall.Kill(int(pid), syscall.SIGSTOP); err != nil {
			t.Errorf("SIGSTOP %d: %v (the tests signal PostgreSQL's backends: run them as root or postgres, as .ci/run does)", pid, err)
			giveUp()
			return
		}
		// A safety net outside this process: the backend is resumed even if the test binary dies
		// in the window (a -timeout panic, ^C).
		if err := exec.Command("setsid", "sh", "-c", fmt.Sprintf("sleep 20; kill -CONT %d 2>/dev/null", pid)).Start(); err != nil {
			t.Errorf("safety net: %v", err)
		}
		stopped.Store(pid)
		time.AfterFunc(8*time.Second, resume)
	}
	cfg := h.IngestConfig()
	cfg.MaxPollRecords = 100 // a try takes well under the timeout even under the race detector
	cfg.BatchTimeout = 2 * time.Second
	cfg.Lanes = 1 // one batch transaction at a time: the one backend the fault stops is the batch's
	startIngesterSignalled(t, cfg, deps, sig)

	select {
	case <-resumed:
	case <-time.After(2 * time.Minute):
		t.Fatal("the batch's backend was never stopped")
	}
	if t.Failed() {
		t.FailNow()
	}
	h.WaitFor("every unique event applied", 2*time.Minute, func() bool {
		return h.Scalar(`SELECT count(*) FROM processed_event`) == gen.UniqueEvents
	})
	h.WaitFor("outbox drained", time.Minute, h.OutboxDrained)
	// 8 s of hang against a 2 s deadline and a backoff from 100 ms: three tries time out before
	// the backend is back (without the deadline: none, the batch just waits).
	pauses := metric(t, deps.Registry, "bookrecon_ingest_pauses_total")
	if pauses < 2 {
		t.Errorf("bookrecon_ingest_pauses_total = %v after an 8 s hang with a 2 s batch timeout; want >= 2", pauses)
	}
	// The pause is logged when it starts and when it ends, not at every try (all within 30 s);
	// the lines' repeats add up to the tries.
	lines, repeats := 0, 0.0
	for _, m := range logs.lines(t) {
		switch m["msg"] {
		case "batch paused; retrying":
			lines++
			fallthrough
		case "batch resumed":
			r, _ := m["repeats"].(float64)
			repeats += r
		}
	}
	if lines != 1 || repeats != pauses {
		t.Errorf("%d \"batch paused\" lines with repeats adding up to %v for %v pauses; want 1 line, repeats = pauses", lines, repeats, pauses)
	}
	appliedOnce(t, h, gen)
}
