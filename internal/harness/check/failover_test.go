//go:build faults

package check_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/bookrecon/bookrecon/internal/harness/check"
	"github.com/bookrecon/bookrecon/internal/harness/demo"
	"github.com/bookrecon/bookrecon/internal/harness/kafkatest"
	"github.com/bookrecon/bookrecon/internal/harness/loadgen"
	"github.com/bookrecon/bookrecon/internal/harness/pipelinetest"
	"github.com/bookrecon/bookrecon/internal/relay"
	"github.com/bookrecon/bookrecon/providers"
)

// failoverRate is the publish rate of the failover run (records/s): slow enough that both kills
// and restarts fall inside the publishing (about 50 s of it).
const failoverRate = 1000

// TestLoadBrokerFailover: the load run of TestLoadEndToEnd (about 50,000 events, the default mix,
// ingester, two reconcilers, escalator, provider simulator) on the three-node cluster that
// production runs (scripts/stack.sh cluster: replication factor 3, min.insync.replicas=2,
// acks=all, idempotent producers), published at failoverRate while the node leading most
// partitions of the input topic is killed with SIGKILL and restarted, and then the active
// controller is. Afterwards: zero violations of every invariant; exactly one dedup row per
// unique event and one audit row per applied event (none lost, none applied twice); on the
// resolutions and escalations topics exactly the outbox's facts, one distinct eventId each, and
// no repeated record beyond those the relay counted as unmarked. docs/faults.md has the figures.
//
// It starts three Kafka JVMs (512 MiB heap each) and runs for minutes: `make test-faults`.
func TestLoadBrokerFailover(t *testing.T) {
	c := kafkatest.StartCluster(t) // first, so that its cleanup (stopping the cluster) runs last
	h := pipelinetest.NewOnCluster(t, c)
	m, err := providers.ParseMap([]byte(loadMap))
	if err != nil {
		t.Fatal(err)
	}
	h.Providers = m
	gen := loadgen.Generate(loadgen.Config{Intents: 23500, Seed: 42, Start: time.Now().Add(-10 * time.Minute), Mix: loadgen.DefaultMix})
	ctx := context.Background()
	tp := h.Topics
	all := append(tp.All(), "__consumer_offsets")
	c.WaitFor("full ISR before the run", time.Minute, func(ctx context.Context) (bool, error) { return c.FullISR(ctx, tp.All()...) })

	p := startPipeline(t, h, gen)
	defer p.stop()

	// The publisher: failoverRate records/s in 100 ms steps, each record's send time and time to
	// acknowledgement kept; it holds the last quarter back until the controller is killed, so both
	// kills happen while it publishes.
	var (
		published, failed atomic.Int64
		mu                sync.Mutex
		sends             []send
		controllerKilled  = make(chan struct{})
		pubDone           = make(chan struct{})
	)
	pubCtx, stopPub := context.WithCancel(ctx)
	defer stopPub()
	start := time.Now()
	go func() {
		defer close(pubDone)
		step := failoverRate / 10
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for i := 0; i < len(gen.Records); i += step {
			if i >= len(gen.Records)*3/4 {
				select {
				case <-controllerKilled:
				case <-pubCtx.Done():
					return
				}
			}
			<-tick.C
			for j := i; j < min(i+step, len(gen.Records)); j++ {
				sent := time.Now()
				h.Producer.Produce(pubCtx, &kgo.Record{Topic: tp.Attempts, Key: gen.Keys[j], Value: gen.Records[j]}, func(_ *kgo.Record, err error) {
					if err != nil {
						failed.Add(1)
						return
					}
					s := send{at: sent, took: time.Since(sent)}
					mu.Lock()
					sends = append(sends, s)
					mu.Unlock()
				})
				published.Add(1)
			}
		}
	}()
	waitPublished := func(n int64) {
		for published.Load() < n {
			time.Sleep(50 * time.Millisecond)
		}
	}

	type kill struct {
		what        string
		node        int32
		at          time.Time
		led         []int32       // input partitions the node led
		failover    time.Duration // kill → every input partition led by a live node (and a new controller)
		elected     time.Duration // kill → a new active controller (the controller kill only)
		restartedAt time.Time
		rejoin      time.Duration // restart (JVM start included) → every replica of the pipeline's topics in sync again
	}
	var kills []*kill
	liveLeaders := func(k *kill) func(ctx context.Context) (bool, error) {
		return func(ctx context.Context) (bool, error) {
			ls, err := c.Leaders(ctx, tp.Attempts)
			if err != nil {
				return false, err
			}
			for _, l := range ls {
				if l == k.node || l < 0 {
					return false, nil
				}
			}
			return len(ls) > 0, nil
		}
	}
	restart := func(k *kill) {
		// Restart a few seconds after the failover, once the cluster has moved on without it.
		time.Sleep(3 * time.Second)
		k.restartedAt = time.Now()
		c.Start(k.node)
		c.WaitFor("full ISR after the restart", 3*time.Minute, func(ctx context.Context) (bool, error) { return c.FullISR(ctx, all...) })
		k.rejoin = time.Since(k.restartedAt)
	}

	// Kill 1: the leader of the input partitions, a fifth into the run.
	waitPublished(int64(len(gen.Records) / 5))
	ls, err := c.Leaders(ctx, tp.Attempts)
	if err != nil {
		t.Fatal(err)
	}
	byNode := map[int32][]int32{}
	for part, l := range ls {
		byNode[l] = append(byNode[l], part)
	}
	victim := slices.MaxFunc(slices.Sorted(maps.Keys(byNode)), func(a, b int32) int { return len(byNode[a]) - len(byNode[b]) })
	ctrl, err := c.ActiveController(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("input partition leaders %v, active controller %d: killing node %d", ls, ctrl, victim)
	k1 := &kill{what: "leader of the input partitions", node: victim, led: slices.Sorted(slices.Values(byNode[victim])), at: time.Now()}
	kills = append(kills, k1)
	c.Kill(victim)
	c.WaitFor("new leaders of the input partitions", 2*time.Minute, liveLeaders(k1))
	k1.failover = time.Since(k1.at)
	restart(k1)

	// Kill 2: the active controller.
	ctrl, err = c.ActiveController(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ls, _ = c.Leaders(ctx, tp.Attempts)
	k2 := &kill{what: "active controller", node: ctrl, at: time.Now()}
	for part, l := range ls {
		if l == ctrl {
			k2.led = append(k2.led, part)
		}
	}
	slices.Sort(k2.led)
	kills = append(kills, k2)
	t.Logf("input partition leaders %v: killing the active controller, node %d", ls, ctrl)
	c.Kill(ctrl)
	close(controllerKilled)
	c.WaitFor("a new active controller", 2*time.Minute, func(ctx context.Context) (bool, error) {
		id, err := c.ActiveController(ctx)
		return err == nil && id >= 0 && id != ctrl, err
	})
	k2.elected = time.Since(k2.at)
	c.WaitFor("new leaders of the input partitions", 2*time.Minute, liveLeaders(k2))
	k2.failover = time.Since(k2.at)
	restart(k2)

	<-pubDone
	if err := h.Producer.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	publishedIn := time.Since(start)
	if n := failed.Load(); n > 0 {
		t.Fatalf("%d of %d records failed to publish", n, len(gen.Records))
	}

	h.WaitFor("every unique event processed", 10*time.Minute, func() bool {
		return h.Scalar(`SELECT count(*) FROM processed_event`) == gen.UniqueEvents
	})
	ingested := time.Since(start)
	h.WaitFor("no UNKNOWN left, outbox drained", 10*time.Minute, func() bool {
		return h.Scalar(`SELECT count(*) FROM booking_attempt WHERE status IN ('UNKNOWN', 'IN_PROGRESS')`) == 0 && h.OutboxDrained()
	})
	settled := time.Since(start)
	p.stop() // nothing more to publish; the relay's counters are final

	rep, err := check.Run(ctx, h.Pool, h.Brokers, tp, check.Input{Run: gen, Providers: m, Consumer: p.cfg.Group + "/" + tp.Attempts})
	if err != nil {
		t.Fatal(err)
	}

	// Exact counts beyond the checker's per-event verdicts.
	if got := h.Scalar(`SELECT count(*) FROM processed_event WHERE consumer = $1`, p.cfg.Group+"/"+tp.Attempts); got != gen.UniqueEvents {
		t.Errorf("processed_event has %d rows, want %d (one per unique event)", got, gen.UniqueEvents)
	}
	audited := h.Scalar(`SELECT count(*) FROM attempt_transition WHERE cause = 'event'`)
	if distinct := h.Scalar(`SELECT count(DISTINCT event_id) FROM attempt_transition WHERE cause = 'event'`); audited != distinct {
		t.Errorf("%d event audit rows for %d distinct events: an event applied twice", audited, distinct)
	}
	if audited != gen.UniqueEvents { // every unique event is audited once, key conflicts and repeats included
		t.Errorf("%d event audit rows, want %d (one per unique event)", audited, gen.UniqueEvents)
	}
	if n := h.Scalar(`SELECT count(*) FROM attempt_transition t WHERE cause = 'event' AND NOT EXISTS
		(SELECT 1 FROM processed_event e WHERE e.event_id = t.event_id)`); n != 0 {
		t.Errorf("%d event audit rows without a dedup row", n)
	}
	recs, err := demo.ReadTopics(ctx, h.Brokers, tp.Resolutions, tp.Escalations, tp.AttemptsDLQ)
	if err != nil {
		t.Fatal(err)
	}
	onTopic := map[string]int{}        // records per topic
	ids := map[string]map[string]int{} // topic → eventId → records
	tokens := map[string][]string{}    // eventId → the relay token of each of its records
	for _, r := range recs {
		onTopic[r.Topic]++
		// A dead letter's identity is its source position.
		id := kafkatest.Header(r, "bookrecon.source.partition") + "@" + kafkatest.Header(r, "bookrecon.source.offset")
		if r.Topic != tp.AttemptsDLQ {
			var v struct{ EventID string }
			if err := json.Unmarshal(r.Value, &v); err != nil || v.EventID == "" {
				t.Errorf("%s offset %d: no eventId (%v)", r.Topic, r.Offset, err)
				continue
			}
			id = v.EventID
		}
		tokens[id] = append(tokens[id], kafkatest.Header(r, relay.TokenHeader))
		if ids[r.Topic] == nil {
			ids[r.Topic] = map[string]int{}
		}
		ids[r.Topic][id]++
	}
	repeats := 0
	var facts, repeated []string
	for _, topic := range []string{tp.Resolutions, tp.Escalations, tp.AttemptsDLQ} {
		rows := h.Scalar(`SELECT count(*) FROM outbox_fact WHERE topic = $1`, topic)
		if len(ids[topic]) != rows {
			t.Errorf("%s: %d distinct facts on the topic, %d in the outbox", topic, len(ids[topic]), rows)
		}
		repeats += onTopic[topic] - len(ids[topic])
		for id, n := range ids[topic] {
			if n > 1 && len(repeated) < 5 {
				repeated = append(repeated, fmt.Sprintf("%s ×%d, relay tokens %v", id, n, tokens[id]))
			}
		}
		facts = append(facts, fmt.Sprintf("%s %d records, %d distinct, %d outbox rows", topic, onTopic[topic], len(ids[topic]), rows))
	}
	unmarked := int(gathered(t, p.reg, "bookrecon_outbox_unmarked_total", ""))
	transient := int(gathered(t, p.reg, "bookrecon_outbox_publish_failures_total", "transient"))
	if repeats != unmarked {
		t.Errorf("%d repeated records on the output topics, the relay counted %d unmarked", repeats, unmarked)
	}

	mu.Lock()
	defer mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "failover: %d records (%d unique events) published at %d/s in %s; all applied after %s; all settled after %s\n",
		len(gen.Records), gen.UniqueEvents, failoverRate, publishedIn.Round(time.Millisecond), ingested.Round(time.Millisecond), settled.Round(time.Millisecond))
	for _, k := range kills {
		worst, late := slowest(sends, k.at.Add(-time.Second), k.at.Add(k.failover))
		elected := ""
		if k.elected > 0 {
			elected = fmt.Sprintf(" (new active controller after %s)", k.elected.Round(time.Millisecond))
		}
		fmt.Fprintf(&b, "kill %s, node %d (led input partitions %v) at +%s: failover %s%s; slowest input acknowledgement %s (%d records over 1s); restarted %s after the kill, every replica in sync %s after the restart\n",
			k.what, k.node, k.led, k.at.Sub(start).Round(time.Millisecond), k.failover.Round(time.Millisecond), elected,
			worst.Round(time.Millisecond), late, k.restartedAt.Sub(k.at).Round(time.Millisecond), k.rejoin.Round(time.Millisecond))
	}
	fmt.Fprintf(&b, "outputs: %s; repeats %d %v, relay unmarked %d, relay transient publish failures %d\n",
		strings.Join(facts, "; "), repeats, repeated, unmarked, transient)
	fmt.Fprintf(&b, "audit: %d event audit rows (%d unique events, %d key conflicts)\n%s", audited, gen.UniqueEvents, gen.KeyConflicts, rep)
	t.Log(b.String())
	if !rep.OK() {
		t.Fatalf("invariant violations:\n%s", rep)
	}
	if len(rep.Invariants) != 8 {
		t.Fatalf("checked %d invariants, want 8", len(rep.Invariants))
	}
}

// send is one input record's publish: when it was handed to the producer and how long its
// acknowledgement (acks=all) took.
type send struct {
	at   time.Time
	took time.Duration
}

// slowest returns the longest acknowledgement of the records sent in [from, to] and how many
// took over a second.
func slowest(sends []send, from, to time.Time) (worst time.Duration, late int) {
	for _, s := range sends {
		if s.at.Before(from) || s.at.After(to) {
			continue
		}
		worst = max(worst, s.took)
		if s.took > time.Second {
			late++
		}
	}
	return worst, late
}

// gathered sums the samples of the counter name in reg, only those with a label value class
// when class is not empty.
func gathered(t *testing.T, reg *prometheus.Registry, name, class string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			ok := class == ""
			for _, l := range m.GetLabel() {
				ok = ok || l.GetValue() == class
			}
			if ok {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}
