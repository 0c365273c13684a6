package outbox_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/bookrecon/bookrecon/internal/kafkatest"
	"github.com/bookrecon/bookrecon/internal/outbox"
	"github.com/bookrecon/bookrecon/internal/pgtest"
	"github.com/bookrecon/bookrecon/internal/postgres"
)

// TestRelaySurvivesBrokerFaults injects produce failures with kfake (the in-process fake
// broker; fault injection is what it is for): while every produce fails, RunOnce reports the
// error and marks nothing published; once the broker recovers, every row is published exactly
// as written (key, value, headers, plus the relay's fencing token), in id order per key, and
// marked.
func TestRelaySurvivesBrokerFaults(t *testing.T) {
	t.Parallel()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fault := kafkatest.InjectFault(c, kmsg.Produce, kerr.NotLeaderForPartition.Code)

	pool := pgtest.NewPool(t)
	ctx := context.Background()
	const n = 60
	err = postgres.WithTx(ctx, pool, func(tx pgx.Tx) error {
		for i := range n {
			m := outbox.Message{Topic: "out", Key: []byte(fmt.Sprintf("bi_%d", i%4)), Value: []byte(fmt.Sprintf(`{"n":%d}`, i)),
				EventID: fmt.Sprintf("e%02d", i), Headers: []outbox.Header{{Key: "ce_id", Value: fmt.Sprintf("e%02d", i)}}}
			if err := outbox.Insert(ctx, tx, m); err != nil {
				return err
			}
			if err := outbox.Insert(ctx, tx, m); err != nil { // a re-derived fact: a no-op
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// Idempotence off so the delivery timeout is enforced and the outage surfaces as an error
	// (an idempotent producer keeps retrying, which pauses the relay instead).
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DisableIdempotentWrite(), kgo.RecordDeliveryTimeout(time.Second),
		kgo.RecordRetries(3), kgo.RetryBackoffFn(func(int) time.Duration { return 50 * time.Millisecond }))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	relay := &outbox.Relay{Pool: pool, Client: cl, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}

	octx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if got, err := relay.RunOnce(octx, 100); err == nil || got != 0 {
		t.Fatalf("RunOnce during the outage = %d, %v; want 0 and an error", got, err)
	}
	if fault.Failed.Load() == 0 {
		t.Fatal("no produce request reached the fault")
	}
	if backlog, _, err := outbox.Backlog(ctx, pool); err != nil || backlog != n {
		t.Fatalf("backlog = %d, %v; want %d unpublished rows", backlog, err, n)
	}

	fault.On.Store(false)
	if got, err := relay.RunOnce(ctx, 100); err != nil || got != n {
		t.Fatalf("RunOnce after recovery = %d, %v; want %d", got, err, n)
	}
	if backlog, _, _ := outbox.Backlog(ctx, pool); backlog != 0 {
		t.Fatalf("backlog after recovery = %d, want 0", backlog)
	}

	cons, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics("out"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	seen := map[string]bool{}
	last := map[string]int{}
	deadline := time.Now().Add(10 * time.Second)
	for len(seen) < n && time.Now().Before(deadline) {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		fs := cons.PollFetches(pctx)
		cancel()
		fs.EachRecord(func(r *kgo.Record) {
			var i int
			_, _ = fmt.Sscanf(string(r.Value), `{"n":%d}`, &i)
			id := fmt.Sprintf("e%02d", i)
			if len(r.Headers) != 2 || string(r.Headers[0].Value) != id || kafkatest.Header(r, outbox.TokenHeader) != "1" || string(r.Key) != fmt.Sprintf("bi_%d", i%4) {
				t.Errorf("record %s: key %q headers %v", id, r.Key, r.Headers)
			}
			if prev, ok := last[string(r.Key)]; ok && i < prev {
				t.Errorf("key %s: %d after %d", r.Key, i, prev)
			}
			last[string(r.Key)] = i
			seen[id] = true
		})
	}
	if len(seen) != n {
		t.Fatalf("consumed %d distinct records, want %d", len(seen), n)
	}
}
