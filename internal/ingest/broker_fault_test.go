package ingest_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/bookrecon/bookrecon/internal/ingest"
	"github.com/bookrecon/bookrecon/internal/kafkatest"
	"github.com/bookrecon/bookrecon/internal/loadgen"
	"github.com/bookrecon/bookrecon/internal/pgtest"
	"github.com/bookrecon/bookrecon/internal/postgres"
	"github.com/bookrecon/bookrecon/internal/samples"
	"github.com/bookrecon/bookrecon/internal/telemetry"
	"github.com/bookrecon/bookrecon/providers"
)

// TestBrokerCommitOutagePauses uses kfake (fault injection) to fail every offset commit for a
// while: the batches' database work commits, the offset commits fail and only they are retried
// (the batch is not applied again), nothing is dead-lettered, and once the broker answers again
// every event is applied exactly once.
func TestBrokerCommitOutagePauses(t *testing.T) {
	t.Parallel()
	topics := ingest.DefaultTopics()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, topics.Attempts, topics.AttemptsDLQ, topics.Decisions,
		topics.DecisionsDLQ, topics.Resolutions, topics.Escalations))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fault := kafkatest.InjectFault(c, kmsg.OffsetCommit, kerr.CoordinatorNotAvailable.Code)

	gen := loadgen.Generate(loadgen.Config{Intents: 500, Seed: 3, Start: time.Now().Add(-time.Minute), Mix: loadgen.Mix{Failure: 0.2}})
	ctx := context.Background()
	prod, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	for i, r := range gen.Records {
		prod.Produce(ctx, &kgo.Record{Topic: topics.Attempts, Key: gen.Keys[i], Value: r}, nil)
	}
	if err := prod.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	mp, _ := samples.Path("providers.yaml")
	m, err := providers.LoadMap(mp)
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
	startIngester(t, ingest.Config{Brokers: c.ListenAddrs(), DatabaseURL: dbURL, Providers: m, AdminAddr: "-", MaxPollRecords: 100},
		ingest.Deps{Logger: discardLogger(), Registry: reg})

	count := func(q string) int {
		var n int
		if err := pool.QueryRow(ctx, q).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	deadline := time.Now().Add(30 * time.Second)
	for fault.Failed.Load() < 3 || metric(t, reg, "bookrecon_ingest_pauses_total") == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no commit failure reached the ingester (failed commits %d)", fault.Failed.Load())
		}
		time.Sleep(50 * time.Millisecond)
	}
	fault.On.Store(false)
	for count(`SELECT count(*) FROM processed_event`) != gen.UniqueEvents {
		if time.Now().After(deadline.Add(30 * time.Second)) {
			t.Fatalf("processed %d of %d events", count(`SELECT count(*) FROM processed_event`), gen.UniqueEvents)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Every record was consumed once: the only duplicates are the ones loadgen published.
	if got, want := metric(t, reg, "bookrecon_duplicate_deliveries_total"), float64(len(gen.Records)-gen.UniqueEvents); got != want {
		t.Errorf("duplicate deliveries = %v, want %v (a batch was applied again after its offset commit failed)", got, want)
	}
	if n := count(`SELECT count(*) FROM outbox WHERE topic = '` + topics.AttemptsDLQ + `'`); n != 0 {
		t.Errorf("dead letters = %d, want 0", n)
	}
	if n := count(`SELECT count(*) FROM attempt_transition`); n != gen.UniqueEvents {
		t.Errorf("audit rows = %d, want one per unique event (%d)", n, gen.UniqueEvents)
	}
	if n := count(`SELECT count(*) FROM booking_attempt WHERE status IN ('CONFIRMED', 'FAILED')`); n != len(gen.Expected) {
		t.Errorf("terminal attempts = %d, want %d", n, len(gen.Expected))
	}
}
