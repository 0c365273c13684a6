package check_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/bookrecon/bookrecon/internal/attempt"
	"github.com/bookrecon/bookrecon/internal/escalate"
	"github.com/bookrecon/bookrecon/internal/harness/check"
	"github.com/bookrecon/bookrecon/internal/harness/loadgen"
	"github.com/bookrecon/bookrecon/internal/harness/pipelinetest"
	"github.com/bookrecon/bookrecon/internal/ingest"
	"github.com/bookrecon/bookrecon/internal/reconcile"
	"github.com/bookrecon/bookrecon/internal/telemetry"
	"github.com/bookrecon/bookrecon/providers"
	"github.com/bookrecon/bookrecon/providers/simulator"
)

// loadMap is the capability map of the load run: one authoritative hotel provider whose rate
// limit does not throttle the run, a deadline the run never reaches.
const loadMap = `providers:
  sim-hotels:
    lookups: [provider_reference, client_reference]
    authoritativeNotFound: true
    maxProcessingTime: 1s
    rateLimit: {rps: 5000, burst: 1000}
    deadline: 10m
`

// TestLoadEndToEnd: about 50,000 generated events (every kind of the default mix, 5%
// redeliveries) published as fast as the producer goes through the real broker to the whole
// pipeline; the checker must report zero violations of every invariant.
func TestLoadEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("load run")
	}
	t.Parallel()
	h := pipelinetest.New(t, 6)
	m, err := providers.ParseMap([]byte(loadMap))
	if err != nil {
		t.Fatal(err)
	}
	h.Providers = m
	gen := loadgen.Generate(loadgen.Config{Intents: 23500, Seed: 42, Start: time.Now().Add(-10 * time.Minute), Mix: loadgen.DefaultMix})
	p := startPipeline(t, h, gen)
	defer p.stop()
	cfg := p.cfg

	ctx := context.Background()
	start := time.Now()
	for i, r := range gen.Records {
		h.Producer.Produce(ctx, &kgo.Record{Topic: h.Topics.Attempts, Key: gen.Keys[i], Value: r}, nil)
	}
	if err := h.Producer.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	published := time.Since(start)
	h.WaitFor("every unique event processed", 10*time.Minute, func() bool {
		return h.Scalar(`SELECT count(*) FROM processed_event`) == gen.UniqueEvents
	})
	ingested := time.Since(start)
	h.WaitFor("no UNKNOWN left, outbox drained", 10*time.Minute, func() bool {
		return h.Scalar(`SELECT count(*) FROM booking_attempt WHERE status IN ('UNKNOWN', 'IN_PROGRESS')`) == 0 && h.OutboxDrained()
	})
	settled := time.Since(start)
	var p50, p99 float64
	if err := h.Pool.QueryRow(ctx, `SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY s), percentile_cont(0.99) WITHIN GROUP (ORDER BY s)
		FROM (SELECT extract(epoch FROM terminal_at - unknown_since) AS s FROM booking_attempt WHERE unknown_since IS NOT NULL AND terminal_at IS NOT NULL) x`).Scan(&p50, &p99); err != nil {
		t.Fatal(err)
	}
	rep, err := check.Run(ctx, h.Pool, h.Brokers, h.Topics, check.Input{Run: gen, Providers: m, Consumer: cfg.Group + "/" + h.Topics.Attempts})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("load: %d records (%d unique) published in %s; all applied after %s (%.0f events/s end to end); all settled after %s; UNKNOWN→resolution p50 %.2fs p99 %.2fs\n%s",
		len(gen.Records), gen.UniqueEvents, published.Round(time.Millisecond), ingested.Round(time.Millisecond),
		float64(gen.UniqueEvents)/ingested.Seconds(), settled.Round(time.Millisecond), p50, p99, rep)
	if !rep.OK() {
		t.Fatalf("invariant violations:\n%s", rep)
	}
	if len(rep.Invariants) != 8 {
		t.Fatalf("checked %d invariants, want 8", len(rep.Invariants))
	}
}

// pipeline is the load run's services, running until stop.
type pipeline struct {
	cfg  ingest.Config
	reg  *prometheus.Registry // the ingester's (its relay publishes every output)
	stop func()               // cancels the services and waits for them
}

// startPipeline starts the provider simulator on gen's truth, the ingester (and its outbox
// relay), two reconcilers and the escalator on h, with h.Providers as the capability map.
func startPipeline(t *testing.T, h *pipelinetest.Harness, gen loadgen.Output) *pipeline {
	t.Helper()
	m := h.Providers
	srv := httptest.NewServer(simulator.New(simulator.Config{Truth: gen.Truth, Map: m}))
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	p := &pipeline{cfg: h.IngestConfig(), reg: telemetry.NewRegistry()}
	var once sync.Once
	p.stop = func() {
		once.Do(func() {
			cancel()
			wg.Wait()
			srv.Close()
		})
	}
	t.Cleanup(p.stop)
	log := slog.New(slog.DiscardHandler)
	wg.Go(func() {
		if err := ingest.Run(ctx, p.cfg, ingest.Deps{Logger: log, Registry: p.reg}); err != nil {
			t.Errorf("ingest: %v", err)
		}
	})
	store := attempt.Config{ResolutionsTopic: h.Topics.Resolutions, EscalationsTopic: h.Topics.Escalations}
	for i := range 2 {
		rec, err := reconcile.New(reconcile.Config{Owner: fmt.Sprint("r", i), Providers: m, Poll: 100 * time.Millisecond,
			InitialInterval: 200 * time.Millisecond, MaxInterval: 2 * time.Second, NoJitter: true, Batch: 200, Workers: 16, Store: store},
			h.Pool, providers.NewHTTP(srv.URL, nil), log, nil, nil)
		if err != nil {
			p.stop()
			t.Fatal(err)
		}
		wg.Go(func() { _ = rec.Run(ctx) })
	}
	esc, err := escalate.New(escalate.Config{Providers: m, Store: store}, h.Pool, log, nil)
	if err != nil {
		p.stop()
		t.Fatal(err)
	}
	wg.Go(func() { _ = esc.Run(ctx) })
	return p
}
