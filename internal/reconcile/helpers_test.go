package reconcile_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/bookrecon/bookrecon/events"
	"github.com/bookrecon/bookrecon/internal/attempt"
	"github.com/bookrecon/bookrecon/internal/postgres"
	"github.com/bookrecon/bookrecon/internal/reconcile"
	"github.com/bookrecon/bookrecon/providers"
	"github.com/bookrecon/bookrecon/providers/simulator"
)

// stepClock is the controllable clock shared by the reconcilers, the simulator and the HTTP
// adapter of a test. It only moves forward, and only when the test moves it; Changed lets
// free-running loops wait for the next move instead of sleeping.
type stepClock struct {
	mu      sync.Mutex
	t       time.Time
	changed chan struct{}
}

func newStepClock(t time.Time) *stepClock {
	return &stepClock{t: t, changed: make(chan struct{})}
}

func (c *stepClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Set moves the clock to t; a t before the current time changes nothing.
func (c *stepClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !t.After(c.t) {
		return
	}
	c.t = t
	close(c.changed)
	c.changed = make(chan struct{})
}

func (c *stepClock) Add(d time.Duration) { c.Set(c.Now().Add(d)) }

// Changed returns a channel closed at the clock's next move.
func (c *stepClock) Changed() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.changed
}

// demoConfig is the reconciler configuration that samples/README.md's expected.json assumes:
// first check 1s after UNKNOWN, then 2, 4, 8, 10, 10 … s without jitter.
func demoConfig(m *providers.Map) reconcile.Config {
	return reconcile.Config{Providers: m, InitialInterval: time.Second, Multiplier: 2, MaxInterval: 10 * time.Second,
		NoJitter: true, FirstCheck: time.Second}
}

func storeConfig(m *providers.Map) *attempt.Config {
	return &attempt.Config{Policies: attempt.PoliciesFrom(m), FirstCheck: time.Second}
}

func parseMap(t testing.TB, yaml string) *providers.Map {
	t.Helper()
	m, err := providers.ParseMap([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// newReconciler builds a reconciler on its own metrics registry.
func newReconciler(t testing.TB, cfg reconcile.Config, pool *pgxpool.Pool, p providers.Provider, clk *stepClock) (*reconcile.Reconciler, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	r, err := reconcile.New(cfg, pool, p, slog.New(slog.DiscardHandler), reg, clk.Now)
	if err != nil {
		t.Fatal(err)
	}
	return r, reg
}

// startSim serves sim over HTTP (handler wraps it when set) and returns an adapter reading
// Retry-After dates on clk.
func startSim(t testing.TB, handler http.Handler, clk *stepClock) providers.Provider {
	t.Helper()
	srv := httptest.NewServer(handler)
	tr := &http.Transport{MaxIdleConns: 64, MaxIdleConnsPerHost: 64}
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		srv.Close()
	})
	return providers.NewHTTP(srv.URL, &http.Client{Transport: tr}, providers.WithClock(clk.Now))
}

// drain calls RunOnce until a round checks nothing; it returns how many checks ran.
func drain(t testing.TB, ctx context.Context, r *reconcile.Reconciler) int {
	t.Helper()
	total := 0
	for range 10_000 {
		n, err := r.RunOnce(ctx)
		if err != nil {
			t.Fatalf("RunOnce: %v", err)
		}
		if n == 0 {
			return total
		}
		total += n
	}
	t.Fatal("RunOnce never went quiet")
	return total
}

// attemptSpec describes one test attempt; events are built from it.
type attemptSpec struct {
	Tenant, Intent, Provider string
	Op                       events.Operation // default BOOK
	ClientRef                string
	Traveller                string
	Stay                     *events.Stay
	Segments                 []events.Segment
}

func (s attemptSpec) op() events.Operation {
	if s.Op == "" {
		return events.OpBook
	}
	return s.Op
}

func (s attemptSpec) Key() string { return s.op().KeyPrefix() + ":" + s.Intent + ":v1" }

func (s attemptSpec) request() *events.Request {
	return &events.Request{OfferVersion: "off_t:1", TravellerRef: s.Traveller, Stay: s.Stay, Segments: s.Segments,
		Amount: &events.Amount{Value: "100.00", Currency: "EUR"}}
}

// Fingerprint is the attempt's fingerprint as the store computes it.
func (s attemptSpec) Fingerprint() string { return events.Fingerprint(s.op(), s.request()) }

func (s attemptSpec) envelope(id, typ string, at time.Time) map[string]any {
	return map[string]any{"specVersion": 1, "eventId": id, "eventType": typ, "occurredAt": at.UTC().Format(time.RFC3339Nano),
		"tenantId": s.Tenant, "bookingIntentId": s.Intent, "operation": string(s.op()), "operationVersion": 1,
		"idempotencyKey": s.Key(), "provider": s.Provider}
}

// Started is the attempt.started record.
func (s attemptSpec) Started(at time.Time) []byte {
	e := s.envelope(s.Intent+"_started", "attempt.started", at)
	e["request"] = s.request()
	if s.ClientRef != "" {
		e["recovery"] = map[string]any{"clientReference": s.ClientRef}
	}
	return mustJSON(e)
}

// Outcome is an attempt.succeeded, attempt.failed or attempt.outcome_unknown record.
func (s attemptSpec) Outcome(suffix, typ string, at time.Time, outcome map[string]any) []byte {
	e := s.envelope(s.Intent+"_"+suffix, typ, at)
	e["outcome"] = outcome
	return mustJSON(e)
}

// Unknown is attempt.outcome_unknown with the timeout class and an optional provider reference.
func (s attemptSpec) Unknown(at time.Time, class, providerRef string) []byte {
	o := map[string]any{"timeoutClass": class, "requestSent": true}
	if providerRef != "" {
		o["providerReference"] = providerRef
	}
	return s.Outcome("unknown", "attempt.outcome_unknown", at, o)
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// applyEvent decodes raw and applies it in its own transaction, as the ingester does after its
// dedup insert.
func applyEvent(t testing.TB, ctx context.Context, pool *pgxpool.Pool, cfg *attempt.Config, raw []byte) attempt.Applied {
	t.Helper()
	out, err := tryApplyEvent(ctx, pool, cfg, raw)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// tryApplyEvent is applyEvent for goroutines other than the test's.
func tryApplyEvent(ctx context.Context, pool *pgxpool.Pool, cfg *attempt.Config, raw []byte) (attempt.Applied, error) {
	ev, err := events.DecodeAttempt(raw, events.DecodeOptions{})
	if err != nil {
		return attempt.Applied{}, fmt.Errorf("decode %s: %w", raw, err)
	}
	var out attempt.Applied
	if err := postgres.WithTx(ctx, pool, func(tx pgx.Tx) error {
		var err error
		out, err = attempt.NewTx(tx, cfg).ApplyEvent(ctx, ev, events.DefaultTransportTimeoutCodes())
		return err
	}); err != nil {
		return out, fmt.Errorf("apply %s: %w", ev.EventID, err)
	}
	return out, nil
}

// row is what the tests read back of a booking_attempt row.
type row struct {
	ID           uuid.UUID
	Status       string
	Source       string
	Ref          string
	FailureCode  string
	TimeoutClass string
	CheckCount   int
	NextCheck    *time.Time
	LastLookup   string
	Token        int64
	LeaseOwner   string
	WindowStart  time.Time
	CreatedAt    time.Time
}

func readRow(t testing.TB, ctx context.Context, pool *pgxpool.Pool, tenant, key string) row {
	t.Helper()
	r, err := tryReadRow(ctx, pool, tenant, key)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// tryReadRow is readRow for goroutines other than the test's.
func tryReadRow(ctx context.Context, pool *pgxpool.Pool, tenant, key string) (row, error) {
	var r row
	err := pool.QueryRow(ctx, `SELECT id, status, coalesce(resolution_source, ''), coalesce(provider_reference, ''),
		coalesce(failure_code, ''), coalesce(timeout_class, ''), check_count, next_check_at, coalesce(last_lookup_result, ''),
		lease_token, coalesce(lease_owner, ''), window_start, created_at
		FROM booking_attempt WHERE tenant_id = $1 AND idempotency_key = $2`, tenant, key).
		Scan(&r.ID, &r.Status, &r.Source, &r.Ref, &r.FailureCode, &r.TimeoutClass, &r.CheckCount, &r.NextCheck,
			&r.LastLookup, &r.Token, &r.LeaseOwner, &r.WindowStart, &r.CreatedAt)
	if err != nil {
		return r, fmt.Errorf("read %s/%s: %w", tenant, key, err)
	}
	return r, nil
}

func count(t testing.TB, ctx context.Context, pool *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(ctx, sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// resolutions returns the attempt.resolved records in the outbox, in id order.
func resolutions(t testing.TB, ctx context.Context, pool *pgxpool.Pool) []events.Resolved {
	t.Helper()
	rows, err := pool.Query(ctx, `SELECT value FROM outbox WHERE topic = $1 ORDER BY id`, events.TopicResolutions)
	if err != nil {
		t.Fatal(err)
	}
	vals, err := pgx.CollectRows(rows, pgx.RowTo[[]byte])
	if err != nil {
		t.Fatal(err)
	}
	out := make([]events.Resolved, 0, len(vals))
	for _, v := range vals {
		var r events.Resolved
		if err := json.Unmarshal(v, &r); err != nil {
			t.Fatal(err)
		}
		if r.EventType != events.EventResolved {
			t.Fatalf("resolutions topic carries %s", r.EventType)
		}
		out = append(out, r)
	}
	return out
}

// escalation is one escalation row with its attempt's identity.
type escalation struct{ Tenant, Key, Reason, State string }

func escalations(t testing.TB, ctx context.Context, pool *pgxpool.Pool) []escalation {
	t.Helper()
	rows, err := pool.Query(ctx, `SELECT a.tenant_id, a.idempotency_key, e.reason, e.state FROM escalation e
		JOIN booking_attempt a ON a.id = e.attempt_id ORDER BY 1, 2, 3`)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (escalation, error) {
		var e escalation
		return e, r.Scan(&e.Tenant, &e.Key, &e.Reason, &e.State)
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// transition is one attempt_transition row.
type transition struct {
	From, To, Cause, Note string
	Lookup                map[string]any
}

func transitions(t testing.TB, ctx context.Context, pool *pgxpool.Pool, id uuid.UUID) []transition {
	t.Helper()
	rows, err := pool.Query(ctx, `SELECT coalesce(from_status, ''), to_status, cause, note, lookup FROM attempt_transition
		WHERE attempt_id = $1 ORDER BY id`, id)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (transition, error) {
		var x transition
		var lookup []byte
		if err := r.Scan(&x.From, &x.To, &x.Cause, &x.Note, &lookup); err != nil {
			return x, err
		}
		if lookup != nil {
			if err := json.Unmarshal(lookup, &x.Lookup); err != nil {
				return x, err
			}
		}
		return x, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// metric returns the sum of every series of the named metric (counter or gauge value,
// histogram sample count).
func metric(t testing.TB, g prometheus.Gatherer, name string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		sum := 0.0
		for _, m := range mf.GetMetric() {
			switch {
			case m.Counter != nil:
				sum += m.GetCounter().GetValue()
			case m.Gauge != nil:
				sum += m.GetGauge().GetValue()
			case m.Histogram != nil:
				sum += float64(m.GetHistogram().GetSampleCount())
			}
		}
		return sum
	}
	t.Fatalf("metric %s not registered", name)
	return 0
}

// metricWith returns the value of the series of name whose labels include every given pair.
func metricWith(t testing.TB, g prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for k, v := range labels {
				if have[k] != v {
					continue series
				}
			}
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}

// record builds one truth record.
func record(ref, clientRef string, status providers.RecordStatus, created time.Time, fingerprint string) providers.Record {
	return providers.Record{ProviderReference: ref, ClientReference: clientRef, Status: status, CreatedAt: created, Fingerprint: fingerprint}
}

func hotelStay(i int) *events.Stay {
	return &events.Stay{PropertyID: fmt.Sprintf("h_%d", i), CheckIn: "2027-01-10", CheckOut: "2027-01-12"}
}

func flight(i int) []events.Segment {
	return []events.Segment{{From: "IST", To: "LHR", Date: "2027-01-14", Flight: fmt.Sprintf("XQ%d", 100+i%9000)}}
}

// simServer is the simulator as the tests use it.
func newSim(truth simulator.Truth, m *providers.Map, clk *stepClock, seed int64, faults simulator.Faults) *simulator.Server {
	return simulator.New(simulator.Config{Truth: truth, Map: m, Now: clk.Now, Seed: seed, Faults: faults})
}
