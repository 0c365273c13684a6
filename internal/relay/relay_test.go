package relay_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/bookrecon/bookrecon/internal/harness/kafkatest"
	"github.com/bookrecon/bookrecon/internal/harness/logtest"
	"github.com/bookrecon/bookrecon/internal/harness/pgtest"
	"github.com/bookrecon/bookrecon/internal/outbox"
	"github.com/bookrecon/bookrecon/internal/postgres"
	"github.com/bookrecon/bookrecon/internal/relay"
)

// TestRelaySurvivesBrokerFaults injects produce failures with kfake (the in-process fake
// broker; fault injection is what it is for): while every produce fails, RunOnce reports the
// error and marks nothing published; once the broker recovers, every row is published exactly
// as written (key, value, headers, plus the relay's fencing token), in id order per key, and
// marked.
func TestRelaySurvivesBrokerFaults(t *testing.T) {
	t.Parallel()
	c := kafkatest.Fake(t, 3, "out")
	fault := kafkatest.InjectFault(c, kmsg.Produce, kerr.NotLeaderForPartition.Code)

	pool := pgtest.NewPool(t)
	ctx := context.Background()
	const n = 60
	err := postgres.WithTx(ctx, pool, func(tx pgx.Tx) error {
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
	rl := &relay.Relay{Pool: pool, Client: cl, Logger: slog.New(slog.DiscardHandler)}

	octx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if got, err := rl.RunOnce(octx, 100); err == nil || got != 0 {
		t.Fatalf("RunOnce during the outage = %d, %v; want 0 and an error", got, err)
	}
	if fault.Failed.Load() == 0 {
		t.Fatal("no produce request reached the fault")
	}
	if backlog, _, err := outbox.Backlog(ctx, pool); err != nil || backlog != n {
		t.Fatalf("backlog = %d, %v; want %d unpublished rows", backlog, err, n)
	}

	fault.On.Store(false)
	if got, err := rl.RunOnce(ctx, 100); err != nil || got != n {
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
			if len(r.Headers) != 2 || string(r.Headers[0].Value) != id || kafkatest.Header(r, relay.TokenHeader) != "1" || string(r.Key) != fmt.Sprintf("bi_%d", i%4) {
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

// TestRelayOutageLogsOnChange: during a database outage every round fails and Run tries again
// a second later; it logs "outbox relay paused" when the outage starts (and then only every
// 30 s, with repeats), and "outbox relay resumed" with the rounds not logged once a round
// succeeds again — not one line per round.
func TestRelayOutageLogsOnChange(t *testing.T) {
	t.Parallel()
	c := kafkatest.Fake(t, 1, "out")
	direct := pgtest.NewPool(t)
	ctx := context.Background()
	err := postgres.WithTx(ctx, direct, func(tx pgx.Tx) error {
		return outbox.Insert(ctx, tx, outbox.Message{Topic: "out", Key: []byte("k"), Value: []byte(`{}`), EventID: "e1"})
	})
	if err != nil {
		t.Fatal(err)
	}
	// The relay reaches the database through a proxy that the test cuts.
	cfg := direct.Config()
	px := newProxy(t, net.JoinHostPort(cfg.ConnConfig.Host, strconv.Itoa(int(cfg.ConnConfig.Port))))
	px.down.Store(true)
	host, port, _ := net.SplitHostPort(px.addr())
	p, _ := strconv.Atoi(port)
	cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Fallbacks = host, uint16(p), nil
	cfg.ConnConfig.ConnectTimeout = time.Second
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var buf logtest.Buffer
	rl := &relay.Relay{Pool: pool, Client: cl, Logger: slog.New(slog.NewJSONHandler(&buf, nil))}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = rl.Run(rctx) }()
	defer func() { cancel(); <-done }()

	time.Sleep(3500 * time.Millisecond) // four failed rounds, a second apart
	px.down.Store(false)
	deadline := time.Now().Add(20 * time.Second)
	for backlog := int64(-1); backlog != 0; {
		if time.Now().After(deadline) {
			t.Fatalf("backlog %d 20 s after the database came back", backlog)
		}
		time.Sleep(100 * time.Millisecond)
		backlog, _, _ = outbox.Backlog(ctx, direct)
	}
	cancel()
	<-done
	var paused, resumed []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		switch m["msg"] {
		case "outbox relay paused":
			paused = append(paused, m)
		case "outbox relay resumed":
			resumed = append(resumed, m)
		}
	}
	if len(paused) != 1 || paused[0]["repeats"] != 1.0 || paused[0]["err"] == nil {
		t.Errorf("paused lines = %v, want one with repeats 1 and the error", paused)
	}
	if len(resumed) != 1 || resumed[0]["repeats"].(float64) < 2 {
		t.Errorf("resumed lines = %v, want one counting the 2 or more rounds not logged", resumed)
	}
}

// proxy forwards TCP connections to target; while down it closes every connection.
type proxy struct {
	ln   net.Listener
	down atomic.Bool
}

func newProxy(t *testing.T, target string) *proxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	px := &proxy{ln: ln}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if px.down.Load() {
				c.Close()
				continue
			}
			wg.Go(func() {
				defer c.Close()
				s, err := net.Dial("tcp", target)
				if err != nil {
					return
				}
				defer s.Close()
				stop := make(chan struct{}, 2)
				go func() { _, _ = io.Copy(s, c); stop <- struct{}{} }()
				go func() { _, _ = io.Copy(c, s); stop <- struct{}{} }()
				<-stop
			})
		}
	})
	return px
}

func (px *proxy) addr() string { return px.ln.Addr().String() }
