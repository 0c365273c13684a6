package ingest_test

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bookrecon/bookrecon/events"
	"github.com/bookrecon/bookrecon/internal/harness/kafkatest"
	"github.com/bookrecon/bookrecon/internal/harness/pipelinetest"
	"github.com/bookrecon/bookrecon/internal/ingest"
	"github.com/bookrecon/bookrecon/internal/ingest/testsignal"
	"github.com/bookrecon/bookrecon/internal/telemetry"
)

// ingesterRun is one in-process ingest.Run with its own registry, stoppable by the test.
type ingesterRun struct {
	name   string
	reg    *prometheus.Registry
	cancel context.CancelFunc
	done   chan struct{}

	mu       sync.Mutex
	sessions int // group sessions joined: the initial join plus one per rebalance
	owned    int // partitions assigned over all sessions
}

func startRun(t *testing.T, cfg ingest.Config, name string) *ingesterRun {
	t.Helper()
	r := &ingesterRun{name: name, reg: telemetry.NewRegistry(), done: make(chan struct{})}
	sig := testsignal.Ingester{OnAssigned: func(a map[string][]int32) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.sessions++
		for _, ps := range a {
			r.owned += len(ps)
		}
	}}
	ctx, cancel := context.WithCancel(testsignal.With(context.Background(), sig))
	r.cancel = cancel
	deps := ingest.Deps{Logger: discardLogger(), Registry: r.reg}
	go func() {
		defer close(r.done)
		if err := ingest.Run(ctx, cfg, deps); err != nil {
			t.Errorf("ingester %s: %v", name, err)
		}
	}()
	t.Cleanup(r.stop)
	return r
}

// stop cancels the run and waits until Run returned (batch in hand committed, group left).
func (r *ingesterRun) stop() {
	r.cancel()
	<-r.done
}

func (r *ingesterRun) state() (sessions, owned int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sessions, r.owned
}

func (r *ingesterRun) ownsSome() bool { _, n := r.state(); return n > 0 }

// TestDuplicateStorm delivers 20,000 unique valid events about 70,000 times (each record 1–5
// times, identical bytes and key, per-intent order kept) to a 6-partition topic consumed by two
// ingesters of one group, and forces rebalances while they work: a third ingester joins and
// leaves, and one of the two is stopped and replaced. Every event's effect must be applied
// exactly once — processed_event, attempts and statuses, audit rows and state changes,
// resolutions and escalations exactly as modelled — and every delivery beyond the first of
// each event must be counted as a duplicate delivery, across all ingesters' registries.
func TestDuplicateStorm(t *testing.T) {
	if testing.Short() {
		t.Skip("duplicate storm: 70,000 deliveries through the real broker")
	}
	t.Parallel()
	began := time.Now()
	h := pipelinetest.New(t, 6)
	m := newModel(t, h, "storm", 5000)
	recs := m.deliveries(rand.New(rand.NewPCG(2026, 70000)), []int{1, 2, 3, 4, 5, 2, 4, 5, 4, 5})
	if len(m.events) != 20000 {
		t.Fatalf("generated %d events, want 20000", len(m.events))
	}
	m.checkDeliveries(t, recs)
	t.Logf("generated %d events, %d deliveries", len(m.events), len(recs))
	cfg := h.IngestConfig()
	adm := kafkatest.Admin(t)

	var mu sync.Mutex
	var runs []*ingesterRun
	start := func(name string) *ingesterRun {
		r := startRun(t, cfg, name)
		mu.Lock()
		runs = append(runs, r)
		mu.Unlock()
		return r
	}
	regs := func() []prometheus.Gatherer {
		mu.Lock()
		defer mu.Unlock()
		gs := make([]prometheus.Gatherer, 0, len(runs))
		for _, r := range runs {
			gs = append(gs, r.reg)
		}
		return gs
	}
	consumed := func() int { return int(sumMetric(t, "bookrecon_events_consumed_total", regs()...)) }
	atLeast := func(frac float64) func() bool {
		return func() bool { return consumed() >= int(frac*float64(len(recs))) }
	}
	const bound = 150 * time.Second // a safety bound for each wait, not an assertion

	a, b := start("a"), start("b")
	h.WaitFor("both ingesters to own partitions", bound, func() bool { return a.ownsSome() && b.ownsSome() })
	before, _ := a.state()

	q := len(recs) / 4
	produce(t, h.Producer, h.Topics.Attempts, recs[:q])
	h.WaitFor("10% consumed", bound, atLeast(0.10))
	c := start("c") // rebalance: a third member joins
	h.WaitFor("the third ingester to own partitions", bound, c.ownsSome)
	produce(t, h.Producer, h.Topics.Attempts, recs[q:2*q])
	h.WaitFor("35% consumed", bound, atLeast(0.35))
	c.stop() // rebalance: it leaves
	produce(t, h.Producer, h.Topics.Attempts, recs[2*q:3*q])
	h.WaitFor("60% consumed", bound, atLeast(0.60))
	b.stop() // rebalance: b leaves…
	b2 := start("b2")
	h.WaitFor("the replacement to own partitions", bound, b2.ownsSome) // …and its replacement joins
	produce(t, h.Producer, h.Topics.Attempts, recs[3*q:])
	h.WaitFor("every record committed by the group", 2*bound, func() bool {
		lag, _ := groupLag(t, adm, h.Group, h.Topics.Attempts)
		return lag == 0
	})
	a.stop()
	b2.stop()
	after, _ := a.state()

	// Rebalances seen by a, the one member present throughout (one session per rebalance).
	rebalances := after - before
	t.Logf("rebalances while working: %d", rebalances)
	if rebalances < 3 {
		t.Errorf("rebalances = %d, want ≥ 3", rebalances)
	}

	assertModel(t, h, m)

	gs := regs()
	total := int(sumMetric(t, "bookrecon_events_consumed_total", gs...))
	dups := int(sumMetric(t, "bookrecon_duplicate_deliveries_total", gs...))
	t.Logf("consumed %d (published %d; %d redelivered by rebalances), duplicate deliveries %d", total, len(recs), total-len(recs), dups)
	if total < len(recs) {
		t.Errorf("consumed = %d < published %d: records lost", total, len(recs))
	}
	if want := total - len(m.events); dups != want {
		t.Errorf("duplicate deliveries = %d, want consumed − unique = %d", dups, want)
	}
	for _, r := range runs {
		if d := metric(t, r.reg, "bookrecon_duplicate_deliveries_total", "topic", events.TopicManualDecisions); d != 0 {
			t.Errorf("%s: duplicate manual decisions = %v, want 0", r.name, d)
		}
	}
	for _, c := range []struct {
		name string
		want int
	}{
		{"bookrecon_idempotent_repeats_total", m.repeats},
		{"bookrecon_dead_letters_total", 0},
		{"bookrecon_event_id_collisions_total", 0},
		{"bookrecon_key_conflicts_total", 0},
		{"bookrecon_blind_retries_total", 0},
		{"bookrecon_contradictions_total", 0},
	} {
		if got := int(sumMetric(t, c.name, gs...)); got != c.want {
			t.Errorf("%s = %d, want %d", c.name, got, c.want)
		}
	}
	t.Logf("wall time %s", time.Since(began).Round(time.Millisecond))
}
