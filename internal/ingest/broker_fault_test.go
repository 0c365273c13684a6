package ingest_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/bookrecon/bookrecon/internal/harness/kafkatest"
	"github.com/bookrecon/bookrecon/internal/harness/loadgen"
	"github.com/bookrecon/bookrecon/internal/harness/pgtest"
	"github.com/bookrecon/bookrecon/internal/harness/samples"
	"github.com/bookrecon/bookrecon/internal/ingest"
	"github.com/bookrecon/bookrecon/internal/kafka"
	"github.com/bookrecon/bookrecon/internal/postgres"
	"github.com/bookrecon/bookrecon/internal/service"
	"github.com/bookrecon/bookrecon/internal/telemetry"
	"github.com/bookrecon/bookrecon/internal/topics"
)

// TestBrokerCommitOutagePauses uses kfake (fault injection) to fail every offset commit for a
// while with a retriable error: the batches' database work commits, the offset commits fail and
// only they are retried (the batch is not applied again) while the ingester reports itself
// paused, nothing is dead-lettered, and once the broker answers again every event is applied
// exactly once.
func TestBrokerCommitOutagePauses(t *testing.T) {
	t.Parallel()
	reg, redelivered := commitFault(t, kerr.CoordinatorNotAvailable, func(reg *prometheus.Registry) bool {
		return metric(t, reg, "bookrecon_ingest_pauses_total") > 0
	})
	// Every record was consumed once: the only duplicates are the ones loadgen published.
	if got := metric(t, reg, "bookrecon_duplicate_deliveries_total"); got != float64(redelivered) {
		t.Errorf("duplicate deliveries = %v, want %v (a batch was applied again after its offset commit failed)", got, redelivered)
	}
}

// TestBrokerCommitFencedGivesUp: offset commits refused with ILLEGAL_GENERATION (the member was
// fenced, the group moved on) are given up, not retried — retrying would wait on a rejoin that
// BlockRebalanceOnPoll holds back. The ingester never pauses, every event is applied exactly once
// (the records redelivered, loadgen's, are deduplicated), and once commits go through again the
// batches after the fault commit every partition to its end.
func TestBrokerCommitFencedGivesUp(t *testing.T) {
	t.Parallel()
	reg, redelivered := commitFault(t, kerr.IllegalGeneration, func(*prometheus.Registry) bool { return true })
	if got := metric(t, reg, "bookrecon_ingest_pauses_total"); got != 0 {
		t.Errorf("pauses = %v, want 0: a fenced commit is given up, not retried", got)
	}
	if got := metric(t, reg, "bookrecon_duplicate_deliveries_total"); got < float64(redelivered) {
		t.Errorf("duplicate deliveries = %v, want at least loadgen's %d", got, redelivered)
	}
}

// commitFault runs an ingester against a kfake cluster whose OffsetCommit answers code on every
// partition until at least 3 commits failed and seen(reg) holds, then lets commits through and
// publishes the last third of the records, and checks that every event is applied exactly once with nothing dead-lettered and that the
// group's committed offsets reach the end of the topic. It returns the ingester's registry and
// how many of the records were loadgen's redeliveries.
func commitFault(t *testing.T, code *kerr.Error, seen func(*prometheus.Registry) bool) (*prometheus.Registry, int) {
	t.Helper()
	tp := topics.Default()
	c := kafkatest.Fake(t, 3, tp.All()...)
	fault := kafkatest.InjectFault(c, kmsg.OffsetCommit, code.Code)

	gen := loadgen.Generate(loadgen.Config{Intents: 500, Seed: 3, Start: time.Now().Add(-time.Minute), Mix: loadgen.Mix{Failure: 0.2}})
	ctx := context.Background()
	prod, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	// produce publishes records lo..hi of gen.
	produce := func(lo, hi int) {
		for i := lo; i < hi; i++ {
			prod.Produce(ctx, &kgo.Record{Topic: tp.Attempts, Key: gen.Keys[i], Value: gen.Records[i]}, nil)
		}
		if err := prod.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// The last third is published once the fault has ended, so that batches come after it on
	// every partition: an ingester that drained the topic while every commit failed would
	// otherwise commit nothing more until new records came (kfake's refusal moves no group on, so
	// no rejoin re-reads them either).
	rest := len(gen.Records) * 2 / 3
	produce(0, rest)
	m, err := samples.Providers()
	if err != nil {
		t.Fatal(err)
	}
	dbURL := pgtest.NewURL(t)
	pool, err := postgres.Open(ctx, dbURL, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	reg := telemetry.NewRegistry()
	startIngester(t, ingest.Config{Infra: service.Infra{Brokers: c.ListenAddrs(), DatabaseURL: dbURL, AdminAddr: "-"}, Providers: m, MaxPollRecords: 100},
		ingest.Deps{Logger: discardLogger(), Registry: reg})

	count := func(q string) int {
		var n int
		if err := pool.QueryRow(ctx, q).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	deadline := time.Now().Add(30 * time.Second)
	for fault.Failed.Load() < 3 || !seen(reg) {
		if time.Now().After(deadline) {
			t.Fatalf("no commit failure reached the ingester (failed commits %d)", fault.Failed.Load())
		}
		time.Sleep(50 * time.Millisecond)
	}
	fault.On.Store(false)
	produce(rest, len(gen.Records))
	for count(`SELECT count(*) FROM processed_event`) != gen.UniqueEvents {
		if time.Now().After(deadline.Add(30 * time.Second)) {
			t.Fatalf("processed %d of %d events", count(`SELECT count(*) FROM processed_event`), gen.UniqueEvents)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n := count(`SELECT count(*) FROM outbox_fact WHERE topic = '` + tp.AttemptsDLQ + `'`); n != 0 {
		t.Errorf("dead letters = %d, want 0", n)
	}
	if n := count(`SELECT count(*) FROM attempt_transition`); n != gen.UniqueEvents {
		t.Errorf("audit rows = %d, want one per unique event (%d)", n, gen.UniqueEvents)
	}
	if n := count(`SELECT count(*) FROM booking_attempt WHERE status IN ('CONFIRMED', 'FAILED')`); n != len(gen.Expected) {
		t.Errorf("terminal attempts = %d, want %d", n, len(gen.Expected))
	}
	// Commits work again, after a rejoin where the member was fenced: the group catches up.
	adm := kadm.NewClient(prod)
	for {
		lag, _ := groupLag(t, adm, kafka.GroupIngester, tp.Attempts)
		if lag == 0 {
			break
		}
		if time.Now().After(deadline.Add(30 * time.Second)) {
			t.Fatalf("group lag %d after the fault ended", lag)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return reg, len(gen.Records) - gen.UniqueEvents
}
