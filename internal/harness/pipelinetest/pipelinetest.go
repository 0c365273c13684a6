// Package pipelinetest is the shared harness of the integration and end-to-end tests: its own
// topics on the real broker, its own migrated database, the sample capability map and
// expected outcome, and helpers to publish the sample and wait for the pipeline to go quiet.
// Under -short (`make test-short`, which runs without the stack) New, NewOn and NewOnCluster
// skip their test.
package pipelinetest

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/bookrecon/bookrecon/internal/harness/kafkatest"
	"github.com/bookrecon/bookrecon/internal/harness/pgtest"
	"github.com/bookrecon/bookrecon/internal/harness/samples"
	"github.com/bookrecon/bookrecon/internal/ingest"
	"github.com/bookrecon/bookrecon/internal/postgres"
	"github.com/bookrecon/bookrecon/internal/publish"
	"github.com/bookrecon/bookrecon/internal/service"
	"github.com/bookrecon/bookrecon/internal/topics"
	"github.com/bookrecon/bookrecon/providers"
)

// Harness is one test's isolated pipeline environment.
type Harness struct {
	T         testing.TB
	Brokers   []string // seed brokers of the topics' cluster
	Topics    topics.Names
	Suffix    string // the topics' suffix (topics.FromSuffix)
	Group     string
	DBURL     string
	Pool      *pgxpool.Pool
	Providers *providers.Map
	Expected  samples.Expected
	Producer  *kgo.Client
}

// New creates topics (partitions each) on the real broker and a database for t.
func New(t testing.TB, partitions int32) *Harness {
	t.Helper()
	skipShort(t)
	return NewOn(t, partitions, pgtest.NewURL(t))
}

// NewOn is New with the migrated database at dbURL (a database of pgtest.Cluster's, say).
func NewOn(t testing.TB, partitions int32, dbURL string) *Harness {
	t.Helper()
	skipShort(t)
	sfx := kafkatest.Suffix()
	tp := topics.FromSuffix(sfx) // what BOOKRECON_TOPIC_SUFFIX=<Suffix> gives a binary
	kafkatest.CreateTopics(t, partitions, tp.All()...)
	return newHarness(t, kafkatest.Brokers(), sfx, tp, dbURL)
}

// NewOnCluster creates the topics on c as production has them — topics.Ensure: topics.Partitions
// partitions, replication factor 3, min.insync.replicas=2, the contract's configs — deleted at
// cleanup, and a database for t.
func NewOnCluster(t testing.TB, c *kafkatest.Cluster) *Harness {
	t.Helper()
	skipShort(t)
	sfx := kafkatest.Suffix()
	tp := topics.FromSuffix(sfx)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := topics.Ensure(ctx, c.Admin(), kafkatest.ClusterReplicationFactor, tp); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = c.Admin().DeleteTopics(ctx, tp.All()...)
	})
	return newHarness(t, kafkatest.ClusterBrokers, sfx, tp, pgtest.NewURL(t))
}

// skipShort skips t under -short: a harness needs the broker and PostgreSQL.
func skipShort(t testing.TB) {
	t.Helper()
	kafkatest.SkipShort(t)
	pgtest.SkipShort(t)
}

func newHarness(t testing.TB, brokers []string, sfx string, tp topics.Names, dbURL string) *Harness {
	t.Helper()
	h := &Harness{T: t, Brokers: brokers, Topics: tp, Suffix: sfx, Group: "bookrecon-ingester-" + sfx}
	h.DBURL = dbURL
	pool, err := postgres.Open(context.Background(), h.DBURL, 10)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	h.Pool = pool
	if h.Providers, err = samples.Providers(); err != nil {
		t.Fatal(err)
	}
	ep, _ := samples.Path("expected.json")
	exp, err := samples.LoadExpected(ep)
	if err != nil {
		t.Fatal(err)
	}
	h.Expected = *exp
	h.Producer, err = kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Producer.Close)
	return h
}

// IngestConfig is an ingester configuration for this harness.
func (h *Harness) IngestConfig() ingest.Config {
	return ingest.Config{Infra: service.Infra{Brokers: h.Brokers, DatabaseURL: h.DBURL, AdminAddr: "127.0.0.1:0"},
		Providers: h.Providers, Group: h.Group, Topics: h.Topics}
}

// SampleLines reads a sample JSONL file.
func (h *Harness) SampleLines(name string) [][]byte {
	p, err := samples.Path(name)
	if err != nil {
		h.T.Fatal(err)
	}
	lines, err := publish.ReadLines(p)
	if err != nil {
		h.T.Fatal(err)
	}
	return lines
}

// Scalar runs a one-value query.
func (h *Harness) Scalar(q string, args ...any) int {
	h.T.Helper()
	var n int
	if err := h.Pool.QueryRow(context.Background(), q, args...).Scan(&n); err != nil {
		h.T.Fatalf("%s: %v", q, err)
	}
	return n
}

// WaitFor polls cond every 100ms until it holds or timeout passes (then fails the test).
func (h *Harness) WaitFor(what string, timeout time.Duration, cond func() bool) {
	h.T.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			h.T.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// OutboxDrained reports whether every outbox row is published (a published row leaves the
// outbox; a discarded one stays, and does not count).
func (h *Harness) OutboxDrained() bool {
	return h.Scalar(`SELECT count(*) FROM outbox WHERE discarded_at IS NULL`) == 0
}

// Published returns the number of outbox facts published to topic ("" for every topic): the
// facts of outbox_fact whose row has left the outbox (internal/relay deletes a row once it is
// published; a pending, set-aside or discarded row stays).
func (h *Harness) Published(topic string) int {
	return h.Scalar(`SELECT count(*) FROM outbox_fact f WHERE ($1 = '' OR f.topic = $1)
		AND NOT EXISTS (SELECT 1 FROM outbox o WHERE o.topic = f.topic AND o.event_id = f.event_id)`, topic)
}

// FactValues returns the value of every outbox fact written to topic, by eventId: the rows
// still in the outbox as they stand, and the facts published as the topic holds them (by their
// ce_id header; a fact published twice counts once). It reads the topic until it has every
// published fact, for at most 30 s.
func (h *Harness) FactValues(topic string) map[string][]byte {
	h.T.Helper()
	ctx := context.Background()
	out := map[string][]byte{}
	rows, err := h.Pool.Query(ctx, `SELECT event_id, value FROM outbox WHERE topic = $1`, topic)
	if err != nil {
		h.T.Fatal(err)
	}
	for rows.Next() {
		var id string
		var v []byte
		if err := rows.Scan(&id, &v); err != nil {
			h.T.Fatal(err)
		}
		out[id] = v
	}
	if err := rows.Err(); err != nil {
		h.T.Fatal(err)
	}
	want := len(out) + h.Published(topic)
	if want == len(out) {
		return out
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(h.Brokers...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		h.T.Fatal(err)
	}
	defer cl.Close()
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for len(out) < want && pctx.Err() == nil {
		cl.PollFetches(pctx).EachRecord(func(r *kgo.Record) {
			if id := kafkatest.Header(r, "ce_id"); id != "" {
				if _, ok := out[id]; !ok {
					out[id] = r.Value
				}
			}
		})
	}
	return out
}
