package lag_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"

	"github.com/bookrecon/bookrecon/internal/harness/kafkatest"
	"github.com/bookrecon/bookrecon/internal/harness/pgtest"
	"github.com/bookrecon/bookrecon/internal/lag"
	"github.com/bookrecon/bookrecon/providers"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const capMap = `providers:
  fast: {lookups: [provider_reference], deadline: 10m, deadlineByOperation: {REFUND: 2h}}
  slow: {lookups: [provider_reference], deadline: 3h}
`

// TestCollector checks every series against a real broker and a real database: lag per
// partition from committed offsets, the outbox backlog, and the overdue count per provider and
// operation deadline.
func TestCollector(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the real broker and PostgreSQL")
	}
	t.Parallel()
	ctx := context.Background()
	sfx := kafkatest.Suffix()
	topic, group := "lagtest."+sfx, "lagtest-"+sfx
	kafkatest.CreateTopics(t, 3, topic)

	cl, err := kgo.NewClient(kgo.SeedBrokers(kafkatest.Brokers()...), kgo.DefaultProduceTopic(topic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	// partition 0: 5 records, 2 committed → lag 3; partition 1: 4 records, all committed → 0;
	// partition 2: 2 records, nothing committed → 2.
	for p, n := range map[int32]int{0: 5, 1: 4, 2: 2} {
		for range n {
			if err := cl.ProduceSync(ctx, &kgo.Record{Partition: p, Value: []byte("x")}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	adm := kadm.NewClient(cl)
	var offs kadm.Offsets
	offs.Add(kadm.Offset{Topic: topic, Partition: 0, At: 2, LeaderEpoch: -1})
	offs.Add(kadm.Offset{Topic: topic, Partition: 1, At: 4, LeaderEpoch: -1})
	offs.Add(kadm.Offset{Topic: topic, Partition: 2, At: 0, LeaderEpoch: -1})
	if err := adm.CommitAllOffsets(ctx, group, offs); err != nil {
		t.Fatal(err)
	}

	pool := pgtest.NewPool(t)
	m, err := providers.ParseMap([]byte(capMap))
	if err != nil {
		t.Fatal(err)
	}
	// Three pending outbox rows (one 90 s old, one set aside), one published (its fact kept, its
	// row gone), one set aside and then discarded.
	if _, err := pool.Exec(ctx, `INSERT INTO outbox (topic, value, event_id, created_at, set_aside_at, discarded_at, discard_reason) VALUES
		('t', 'v', 'e1', now() - interval '90 seconds', NULL, NULL, NULL), ('t', 'v', 'e2', now(), NULL, NULL, NULL),
		('t', 'v', 'e4', now(), now(), NULL, NULL), ('t', 'v', 'e5', now() - interval '2 hours', now(), now(), 'test')`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO outbox_fact (topic, event_id) VALUES ('t', 'e1'), ('t', 'e2'), ('t', 'e3'), ('t', 'e4'), ('t', 'e5')`); err != nil {
		t.Fatal(err)
	}
	// UNKNOWN attempts: overdue (fast BOOK 10m, UNKNOWN 20m), within its deadline (fast REFUND
	// 2h), within (slow 3h), overdue but judged (deadline_done), overdue but CONFIRMED.
	for i, a := range []struct {
		provider, op, status string
		age                  time.Duration
		done                 bool
	}{
		{"fast", "BOOK", "UNKNOWN", 20 * time.Minute, false},
		{"fast", "REFUND", "UNKNOWN", 20 * time.Minute, false},
		{"slow", "BOOK", "UNKNOWN", time.Hour, false},
		{"fast", "BOOK", "UNKNOWN", time.Hour, true},
		{"fast", "BOOK", "CONFIRMED", time.Hour, false},
	} {
		intent := "bi_" + string(rune('a'+i))
		if _, err := pool.Exec(ctx, `INSERT INTO booking_intent (tenant_id, booking_intent_id) VALUES ('t1', $1)`, intent); err != nil {
			t.Fatal(err)
		}
		_, err := pool.Exec(ctx, `INSERT INTO booking_attempt (id, tenant_id, booking_intent_id, operation, subject,
			operation_version, idempotency_key, provider, status, first_event_at, window_start, unknown_since, deadline_done)
			VALUES ($1, 't1', $2, $3, $2, 1, $4, $5, $6, now(), now(), now() - $7::interval, $8)`,
			uuid.New(), intent, a.op, strings.ToLower(a.op)+":"+intent+":v1", a.provider, a.status,
			a.age.String(), a.done)
		if err != nil {
			t.Fatal(err)
		}
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(lag.New(lag.Config{Admin: adm, Groups: []string{group}, Pool: pool, Providers: m}))
	got := map[string]float64{}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, mt := range mf.GetMetric() {
			k := mf.GetName()
			for _, l := range mt.GetLabel() {
				if l.GetName() == "partition" || l.GetName() == "source" {
					k += "/" + l.GetValue()
				}
			}
			got[k] = mt.GetGauge().GetValue() + mt.GetCounter().GetValue()
		}
	}
	want := map[string]float64{
		"bookrecon_consumer_lag_records/0": 3, "bookrecon_consumer_lag_records/1": 0, "bookrecon_consumer_lag_records/2": 2,
		"bookrecon_outbox_backlog_records": 3, "bookrecon_outbox_set_aside_records": 1, "bookrecon_unknown_overdue_records": 1,
		"bookrecon_lag_errors_total/kafka": 0, "bookrecon_lag_errors_total/outbox": 0, "bookrecon_lag_errors_total/overdue": 0,
	}
	for k, w := range want {
		if g, ok := got[k]; !ok || g != w {
			t.Errorf("%s = %v (present %v), want %v", k, g, ok, w)
		}
	}
	if age := got["bookrecon_outbox_oldest_age_seconds"]; age < 89 || age > 150 {
		t.Errorf("bookrecon_outbox_oldest_age_seconds = %v, want about 90", age)
	}
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
	// The group label carries the group, the topic label the topic.
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP bookrecon_consumer_lag_records Records of a partition that the consumer group has not committed yet (log end offset minus committed offset), from kadm.
# TYPE bookrecon_consumer_lag_records gauge
bookrecon_consumer_lag_records{group="`+group+`",partition="0",topic="`+topic+`"} 3
bookrecon_consumer_lag_records{group="`+group+`",partition="1",topic="`+topic+`"} 0
bookrecon_consumer_lag_records{group="`+group+`",partition="2",topic="`+topic+`"} 2
`), "bookrecon_consumer_lag_records"); err != nil {
		t.Error(err)
	}
}

// TestCollectorSourceDown checks that a failing source leaves its series out and counts an
// error, and that a result is reused within MinInterval.
func TestCollectorSourceDown(t *testing.T) {
	t.Parallel()
	cl, err := kgo.NewClient(kgo.SeedBrokers("127.0.0.1:1"), kgo.RetryTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	c := lag.New(lag.Config{Admin: kadm.NewClient(cl), Groups: []string{"g"}, Timeout: 300 * time.Millisecond, MinInterval: time.Hour})
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	for range 2 {
		if n := testutil.CollectAndCount(c, "bookrecon_consumer_lag_records"); n != 0 {
			t.Fatalf("%d lag series with the broker down, want 0", n)
		}
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP bookrecon_lag_errors_total Failed lag, backlog or overdue collections, by source (kafka, outbox, overdue).
# TYPE bookrecon_lag_errors_total counter
bookrecon_lag_errors_total{source="kafka"} 1
bookrecon_lag_errors_total{source="outbox"} 0
bookrecon_lag_errors_total{source="overdue"} 0
`), "bookrecon_lag_errors_total"); err != nil {
		t.Error(err)
	}
}
