package deploytest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/bookrecon/bookrecon/internal/attempt"
	"github.com/bookrecon/bookrecon/internal/auth"
	"github.com/bookrecon/bookrecon/internal/auth/authtest"
	"github.com/bookrecon/bookrecon/internal/escalate"
	"github.com/bookrecon/bookrecon/internal/harness/kafkatest"
	"github.com/bookrecon/bookrecon/internal/harness/logtest"
	"github.com/bookrecon/bookrecon/internal/harness/pipelinetest"
	"github.com/bookrecon/bookrecon/internal/harness/samples"
	"github.com/bookrecon/bookrecon/internal/ingest"
	"github.com/bookrecon/bookrecon/internal/kafka"
	"github.com/bookrecon/bookrecon/internal/publish"
	"github.com/bookrecon/bookrecon/internal/query"
	"github.com/bookrecon/bookrecon/internal/reconcile"
	"github.com/bookrecon/bookrecon/internal/service"
	"github.com/bookrecon/bookrecon/internal/telemetry"
	"github.com/bookrecon/bookrecon/providers"
	"github.com/bookrecon/bookrecon/providers/simulator"
)

// services are the processes Prometheus scrapes (deploy/prometheus/prometheus.yml).
var services = []string{"ingester", "reconciler", "escalator", "query-api"}

// stack is the four services running in-process on the real broker and a fresh database.
type stack struct {
	h     *pipelinetest.Harness
	regs  map[string]*prometheus.Registry
	logs  map[string]*logtest.Buffer
	urls  map[string]string // service → /metrics URL (the ones serving HTTP to the test)
	lines int
}

// startStack runs the ingester (ingest.Run), reconciler and escalator (service.Run with their
// loops, as cmd/reconciler and cmd/escalator do) and the query API (query.Run), each with its
// own registry from telemetry.NewRegistry and a JSON log from telemetry.NewLogger, against a
// provider simulator; publishes the sample; and returns once the pipeline has worked on it.
func startStack(t *testing.T) *stack {
	t.Helper()
	h := pipelinetest.New(t, 3)
	s := &stack{h: h, regs: map[string]*prometheus.Registry{}, logs: map[string]*logtest.Buffer{}, urls: map[string]string{}}
	log := func(svc string) *slog.Logger {
		s.logs[svc] = &logtest.Buffer{}
		return telemetry.NewLogger(s.logs[svc], svc, slog.LevelInfo)
	}
	for _, svc := range services {
		s.regs[svc] = telemetry.NewRegistry()
	}
	lines := h.SampleLines("attempts.jsonl")
	s.lines = len(lines)
	epoch, ok := publish.Epoch(lines)
	if !ok {
		t.Fatal("attempts.jsonl has no occurredAt")
	}
	shift := time.Since(epoch)
	truthPath, err := samples.Path("provider-truth.json")
	if err != nil {
		t.Fatal(err)
	}
	truth, err := simulator.LoadTruth(truthPath)
	if err != nil {
		t.Fatal(err)
	}
	sim := httptest.NewServer(simulator.New(simulator.Config{Truth: truth, Map: h.Providers, Shift: shift}))
	t.Cleanup(sim.Close)

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	store := attempt.Config{ResolutionsTopic: h.Topics.Resolutions, EscalationsTopic: h.Topics.Escalations}
	started := make(chan [2]string, 2)
	report := func(svc string) func(string) {
		return func(a string) { started <- [2]string{svc, "http://" + a + "/metrics"} }
	}
	run := func(svc string, f func() error) {
		wg.Go(func() {
			if err := f(); err != nil && ctx.Err() == nil {
				t.Errorf("%s stopped: %v", svc, err)
			}
		})
	}
	ingLog := log("ingester")
	run("ingester", func() error {
		return ingest.Run(ctx, h.IngestConfig(), ingest.Deps{Logger: ingLog, Registry: s.regs["ingester"], AdminStarted: report("ingester")})
	})
	infra := service.Infra{Brokers: kafkatest.Brokers(), DatabaseURL: h.DBURL, AdminAddr: "127.0.0.1:0"}
	recLog, escLog, qLog := log("reconciler"), log("escalator"), log("query-api")
	run("reconciler", func() error {
		return reconcile.Run(ctx, reconcile.Config{Infra: infra, Provider: providers.NewHTTP(sim.URL, sim.Client()),
			Providers: h.Providers, Poll: 100 * time.Millisecond, InitialInterval: time.Second, MaxInterval: 10 * time.Second,
			NoJitter: true, CallTimeout: 2 * time.Second, Store: store},
			reconcile.Deps{Logger: recLog, Registry: s.regs["reconciler"]})
	})
	run("escalator", func() error {
		return escalate.Run(ctx, escalate.Config{Infra: infra, Providers: h.Providers, Poll: 100 * time.Millisecond,
			Store: attempt.Config{Policies: attempt.PoliciesFrom(h.Providers), ResolutionsTopic: h.Topics.Resolutions, EscalationsTopic: h.Topics.Escalations}},
			escalate.Deps{Logger: escLog, Registry: s.regs["escalator"]})
	})
	tokensPath, toks := authtest.File(t, authtest.Reader("t_globetrek", "deploytest"))
	tokens, err := auth.Open(tokensPath, qLog, s.regs["query-api"])
	if err != nil {
		t.Fatal(err)
	}
	apiAddr := make(chan string, 1)
	run("query-api", func() error {
		return query.Run(ctx, query.Config{Infra: service.Infra{DatabaseURL: h.DBURL, AdminAddr: "127.0.0.1:0"}, Addr: "127.0.0.1:0",
			Started: func(a string) { apiAddr <- "http://" + a }, Providers: h.Providers, Tokens: tokens},
			query.Deps{Logger: qLog, Registry: s.regs["query-api"], AdminStarted: report("query-api")})
	})
	for range 2 {
		select {
		case a := <-started:
			s.urls[a[0]] = a[1]
		case <-time.After(60 * time.Second):
			t.Fatal("the ingester or the query API did not start within 60s")
		}
	}
	api := <-apiAddr

	if err := publish.Run(ctx, h.Producer, lines, publish.Options{Topic: h.Topics.Attempts, Shift: shift}); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/v1/tenants/t_globetrek/intents/bi_sc01", "/v1/tenants/t_globetrek/intents/bi_sc01/operations/BOOK/retry-gate"} {
		req, _ := http.NewRequest(http.MethodGet, api+path, nil)
		req.Header.Set("Authorization", "Bearer "+toks[0])
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
	}
	// Worked on: every record consumed and committed (lag series present, all 0), the outbox
	// drained, and the reconciler has asked a provider.
	h.WaitFor("the pipeline to work the sample off", 90*time.Second, func() bool {
		ing := s.gather(t, "ingester")
		rec := s.gather(t, "reconciler")
		lagSeries, lag := count(ing["bookrecon_consumer_lag_records"])
		_, consumed := count(ing["bookrecon_events_consumed_total"])
		_, lookups := count(rec["bookrecon_provider_lookups_total"])
		return lagSeries > 0 && lag == 0 && consumed >= float64(s.lines) && lookups > 0 && h.OutboxDrained()
	})
	return s
}

// count returns how many series a family has and the sum of their values.
func count(mf *dto.MetricFamily) (int, float64) {
	if mf == nil {
		return 0, 0
	}
	sum := 0.0
	for _, m := range mf.GetMetric() {
		sum += m.GetCounter().GetValue() + m.GetGauge().GetValue() + m.GetUntyped().GetValue()
	}
	return len(mf.GetMetric()), sum
}

// gather returns a service's exposition: scraped over HTTP from /metrics where the test knows
// the address (ingester, query API), otherwise gathered from its registry.
func (s *stack) gather(t *testing.T, svc string) map[string]*dto.MetricFamily {
	t.Helper()
	if u, ok := s.urls[svc]; ok {
		resp, err := http.Get(u)
		if err != nil {
			t.Fatalf("scrape %s: %v", svc, err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("scrape %s: %d %v", svc, resp.StatusCode, err)
		}
		p := expfmt.NewTextParser(model.UTF8Validation)
		mfs, err := p.TextToMetricFamilies(bytes.NewReader(body))
		if err != nil {
			t.Fatalf("scrape %s: exposition does not parse: %v", svc, err)
		}
		return mfs
	}
	got, err := s.regs[svc].Gather()
	if err != nil {
		t.Fatalf("gather %s: %v", svc, err)
	}
	mfs := map[string]*dto.MetricFamily{}
	for _, mf := range got {
		mfs[mf.GetName()] = mf
	}
	return mfs
}

// metricInfo is one catalogue entry.
type metricInfo struct {
	Name, Type, Help string
	Labels           []string
	Services         []string
	Kprom            bool // a franz-go client metric (kprom), possibly not yet observed
}

// recorder is a Registerer that remembers what is registered on it.
type recorder struct {
	prometheus.Registerer
	mu sync.Mutex
	cs []prometheus.Collector
}

func (r *recorder) Register(c prometheus.Collector) error {
	r.mu.Lock()
	r.cs = append(r.cs, c)
	r.mu.Unlock()
	return r.Registerer.Register(c)
}

func (r *recorder) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

var (
	descNameRE   = regexp.MustCompile(`fqName: "([^"]*)"`)
	descHelpRE   = regexp.MustCompile(`help: ("(?:[^"\\]|\\.)*")`)
	descLabelsRE = regexp.MustCompile(`variableLabels: \{([^}]*)\}`)
)

// kpromObserved are the kprom metrics that internal/kafka.Options's configuration (kprom's
// defaults: uncompressed bytes by node and topic, no histograms) ever records. kprom registers
// more (batch and record counts, compressed bytes, latency histograms) that stay empty unless
// kprom.FetchAndProduceDetail or kprom.Histograms enable them; when internal/kafka does, the
// catalogue test fails on the newly exported names until they are added here.
var kpromObserved = map[string]bool{
	"connects_total": true, "connect_errors_total": true, "disconnects_total": true,
	"write_bytes_total": true, "write_errors_total": true, "read_bytes_total": true, "read_errors_total": true,
	"fetch_bytes_total": true, "produce_bytes_total": true,
	"buffered_fetch_bytes": true, "buffered_fetch_records_total": true,
	"buffered_produce_bytes": true, "buffered_produce_records_total": true,
}

// kpromMetrics returns the kprom metrics a service's client exports (kpromObserved), built
// through internal/kafka.Options as the services build theirs, whether or not they have been
// observed in this run (connect errors, for one).
func kpromMetrics(t *testing.T, svc string) []metricInfo {
	t.Helper()
	rec := &recorder{Registerer: prometheus.NewRegistry()}
	cl, err := kgo.NewClient(kafka.Options([]string{"127.0.0.1:1"}, nil, rec, svc)...)
	if err != nil {
		t.Fatal(err)
	}
	cl.Close()
	var out []metricInfo
	for _, c := range rec.cs {
		typ := ""
		switch c.(type) {
		case *prometheus.CounterVec:
			typ = "counter"
		case *prometheus.HistogramVec:
			typ = "histogram"
		case prometheus.GaugeFunc:
			typ = "gauge"
		default:
			t.Fatalf("kprom collector of unknown kind %T", c)
		}
		ch := make(chan *prometheus.Desc, 16)
		c.Describe(ch)
		close(ch)
		for d := range ch {
			ds := d.String()
			name := descNameRE.FindStringSubmatch(ds)
			help := descHelpRE.FindStringSubmatch(ds)
			labels := descLabelsRE.FindStringSubmatch(ds)
			if name == nil || help == nil || labels == nil {
				t.Fatalf("cannot read %s", ds)
			}
			h, err := strconv.Unquote(help[1])
			if err != nil {
				t.Fatal(err)
			}
			var ls []string
			if labels[1] != "" {
				ls = strings.Split(labels[1], ",")
			}
			if !kpromObserved[strings.TrimPrefix(name[1], "bookrecon_kafka_"+svc+"_")] {
				continue
			}
			out = append(out, metricInfo{Name: name[1], Type: typ, Help: h, Labels: ls, Services: []string{svc}, Kprom: true})
		}
	}
	if len(out) == 0 {
		t.Fatalf("kprom registered nothing for %s", svc)
	}
	return out
}

func typeName(t dto.MetricType) string {
	return strings.ToLower(t.String())
}

func (m metricInfo) String() string { return fmt.Sprintf("%s (%s)", m.Name, m.Type) }
