package relay_test

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/bookrecon/bookrecon/internal/harness/kafkatest"
	"github.com/bookrecon/bookrecon/internal/harness/pgtest"
	"github.com/bookrecon/bookrecon/internal/outbox"
	"github.com/bookrecon/bookrecon/internal/postgres"
	"github.com/bookrecon/bookrecon/internal/relay"
)

// TestRelayElectionCannotSplit runs two relays on one outbox while rows keep arriving. Mid-run
// the holder's backends are terminated (pg_terminate_backend), then its lease is lapsed twice: once
// between a produce and its mark (its renewal delayed past the lease), once inside the renewal.
// A consumer of the topic finds every outbox eventId at least once, first occurrences in id order
// per key, the fencing token never decreasing within a partition, and repeats only for rows whose
// mark was fenced off or failed (bookrecon_outbox_unmarked_total).
func TestRelayElectionCannotSplit(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	topic := "election." + kafkatest.Suffix()
	kafkatest.CreateTopics(t, 3, topic)
	adm := kafkatest.Admin(t)
	waitTopics(t, adm, topic)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	writer, err := postgres.Open(ctx, url, 2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(writer.Close)

	type relayRun struct {
		name    string
		relay   *relay.Relay
		metrics *relay.Metrics
		lapse   atomic.Int32 // 1: lapse the lease before the next mark; 2: inside the next renewal
	}
	const ttl = 800 * time.Millisecond
	var relays []*relayRun
	for _, name := range []string{"relay_a", "relay_b"} {
		cfg, err := pgxpool.ParseConfig(url)
		if err != nil {
			t.Fatal(err)
		}
		cfg.ConnConfig.RuntimeParams["application_name"] = name
		cfg.MaxConns = 3
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		cl, err := kgo.NewClient(kgo.SeedBrokers(kafkatest.Brokers()...), kgo.RequiredAcks(kgo.AllISRAcks()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Close)
		rr := &relayRun{name: name, metrics: relay.NewMetrics(nil, []string{topic})}
		rr.relay = &relay.Relay{Pool: pool, Client: cl, Metrics: rr.metrics, Logger: slog.New(slog.DiscardHandler),
			Config: relay.Config{Holder: name, LeaseTTL: ttl, Batch: 50, Interval: 10 * time.Millisecond}}
		relay.SetTestSignals(rr.relay,
			func() {
				if rr.lapse.CompareAndSwap(2, 0) {
					time.Sleep(2 * ttl) // a renewal delayed past the lease (a GC pause, a stalled host)
				}
			},
			func() {
				if rr.lapse.CompareAndSwap(1, 0) {
					time.Sleep(2 * ttl) // the lease lapses between the produce and the mark
				}
			})
		relays = append(relays, rr)
	}
	var wg sync.WaitGroup
	for _, rr := range relays {
		wg.Go(func() { _ = rr.relay.Run(ctx) })
	}

	// Rows keep arriving: 40 transactions of 25 rows over 20 keys.
	const total = 1000
	var produced atomic.Int32
	wg.Go(func() {
		for i := 0; i < total; i += 25 {
			err := postgres.WithTx(ctx, writer, func(tx pgx.Tx) error {
				for j := i; j < i+25; j++ {
					m := outbox.Message{Topic: topic, Key: []byte(fmt.Sprintf("k%02d", j%20)), Value: []byte(strconv.Itoa(j)),
						EventID: fmt.Sprintf("e%04d", j), Headers: []outbox.Header{{Key: "ce_id", Value: fmt.Sprintf("e%04d", j)}}}
					if err := outbox.Insert(ctx, tx, m); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				t.Errorf("insert: %v", err)
				return
			}
			produced.Add(25)
			time.Sleep(40 * time.Millisecond)
		}
	})

	holder := func() *relayRun {
		var name string
		_ = writer.QueryRow(ctx, `SELECT holder FROM outbox_lease WHERE expires_at > now()`).Scan(&name)
		for _, rr := range relays {
			if rr.name == name {
				return rr
			}
		}
		return nil
	}
	published := func() int {
		var n int
		_ = writer.QueryRow(ctx, `SELECT count(*) FROM outbox_fact f WHERE NOT EXISTS (SELECT 1 FROM outbox o WHERE o.topic = f.topic AND o.event_id = f.event_id)`).Scan(&n)
		return n
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitFor("100 rows published", func() bool { return published() >= 100 && holder() != nil })
	h := holder()
	var killed int
	if err := writer.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1`, h.name).Scan(&killed); err != nil || killed == 0 {
		t.Fatalf("terminated %d backends of %s (%v), want some", killed, h.name, err)
	}
	waitFor("300 rows published after the termination", func() bool { return published() >= 300 })
	h = holder()
	h.lapse.Store(1)
	waitFor("the lease moved after a lapse before a mark", func() bool { x := holder(); return x != nil && x != h && h.lapse.Load() == 0 })
	waitFor("600 rows published", func() bool { return published() >= 600 })
	h = holder()
	h.lapse.Store(2)
	waitFor("the lease moved after a delayed renewal", func() bool { x := holder(); return x != nil && x != h && h.lapse.Load() == 0 })
	waitFor("every row published", func() bool { return produced.Load() == total && published() == total })
	cancel()
	wg.Wait()

	unmarked := 0.0
	for _, rr := range relays {
		unmarked += testutil.ToFloat64(rr.metrics.Unmarked)
	}
	if unmarked == 0 {
		t.Error("no mark was fenced off: the lapse before a mark did not happen")
	}
	var tokens int64
	_ = writer.QueryRow(context.Background(), `SELECT token FROM outbox_lease`).Scan(&tokens)
	if tokens < 3 {
		t.Errorf("lease token = %d, want at least 3 (first holder, two takeovers)", tokens)
	}

	recs := kafkatest.ReadAll(t, topic, total+int(unmarked), 2*time.Second, 60*time.Second)
	seen := map[string]bool{}
	lastID := map[string]string{}  // key → last first-occurrence eventId
	lastToken := map[int32]int64{} // partition → last token
	repeats := 0
	for _, r := range recs {
		id := kafkatest.Header(r, "ce_id")
		tok, err := strconv.ParseInt(kafkatest.Header(r, relay.TokenHeader), 10, 64)
		if err != nil || tok < 1 {
			t.Fatalf("record %s: token header %q", id, kafkatest.Header(r, relay.TokenHeader))
		}
		if tok < lastToken[r.Partition] {
			t.Errorf("partition %d: token %d after %d (record %s): two relays published at once", r.Partition, tok, lastToken[r.Partition], id)
		}
		lastToken[r.Partition] = tok
		if seen[id] {
			repeats++
			continue
		}
		seen[id] = true
		k := string(r.Key)
		if p, ok := lastID[k]; ok && id < p {
			t.Errorf("key %s: %s first seen after %s", k, id, p)
		}
		lastID[k] = id
	}
	if len(seen) != total {
		t.Errorf("distinct eventIds on the topic = %d, want %d", len(seen), total)
	}
	// A mark whose connection was terminated may have committed before the error: such a row
	// counts as unmarked without being repeated, so repeats are at most the unmarked rows.
	if repeats == 0 || float64(repeats) > unmarked {
		t.Errorf("repeats = %d, want 1..%v (only rows whose mark was fenced off or failed repeat)", repeats, unmarked)
	}
}
