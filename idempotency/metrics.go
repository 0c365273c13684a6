package idempotency

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Result is the value of the result label of bookrecon_idempotency_requests_total.
type Result string

const (
	// ResultExecuted: the handler ran (its answer stored or rolled back).
	ResultExecuted Result = "executed"
	// ResultReplayed: a stored answer was replayed.
	ResultReplayed Result = "replayed"
	// ResultInProgress: 409 request_in_progress (a live claim, a Redis lock or lock_timeout).
	ResultInProgress Result = "in_progress"
	// ResultOutcomeUnknown: 409 request_outcome_unknown (a two-phase claim whose lease expired).
	ResultOutcomeUnknown Result = "outcome_unknown"
	// ResultKeyReused: 422 idempotency_key_reused (another fingerprint).
	ResultKeyReused Result = "key_reused"
)

// Results returns every Result.
func Results() []Result {
	return []Result{ResultExecuted, ResultReplayed, ResultInProgress, ResultOutcomeUnknown, ResultKeyReused}
}

// LimiterResult is the value of the result label of bookrecon_idempotency_limiter_total.
type LimiterResult string

const (
	// LimiterAcquired: the Redis lock was taken.
	LimiterAcquired LimiterResult = "acquired"
	// LimiterContended: another request holds the lock: 409 without a database round trip.
	LimiterContended LimiterResult = "contended"
	// LimiterRedisError: Redis failed or was slower than Limiter's timeout: the request went on
	// to PostgreSQL alone (fail-open).
	LimiterRedisError LimiterResult = "redis_error"
)

// LimiterResults returns every LimiterResult.
func LimiterResults() []LimiterResult {
	return []LimiterResult{LimiterAcquired, LimiterContended, LimiterRedisError}
}

// Metrics are the package's Prometheus series (docs/design.md Part 2 "Idempotency-Key semantics").
// Labels are bounded: route is the template a route was registered with (Guard.Transactional,
// Guard.TwoPhase), whose series are pre-created then; result is a Result or LimiterResult.
type Metrics struct {
	// Requests: bookrecon_idempotency_requests_total{route, result}.
	Requests *prometheus.CounterVec
	// Limiter: bookrecon_idempotency_limiter_total{result}, every Redis lock attempt.
	Limiter *prometheus.CounterVec
	// CommandDuration: bookrecon_command_duration_seconds{route}, the handler's run (claim to
	// answer, seconds); size a two-phase lease from its p99 (doc.go).
	CommandDuration *prometheus.HistogramVec
}

// NewMetrics registers the metrics on reg (nil: a private registry, for tests). Register them
// once per process: a Guard and a Limiter share one Metrics.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	m := &Metrics{
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bookrecon_idempotency_requests_total",
			Help: "Requests carrying a valid Idempotency-Key, by route and result (executed, replayed, in_progress, outcome_unknown, key_reused).",
		}, []string{"route", "result"}),
		Limiter: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bookrecon_idempotency_limiter_total",
			Help: "Redis in-flight lock attempts by result (acquired, contended, redis_error: fell open to PostgreSQL alone).",
		}, []string{"result"}),
		CommandDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "bookrecon_command_duration_seconds",
			Help:    "Time an idempotent command's handler ran, by route (size two-phase leases from its p99).",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"route"}),
	}
	for _, c := range []prometheus.Collector{m.Requests, m.Limiter, m.CommandDuration} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	for _, r := range LimiterResults() {
		m.Limiter.WithLabelValues(string(r))
	}
	return m, nil
}

// route pre-creates route's series.
func (m *Metrics) route(route string) {
	for _, r := range Results() {
		m.Requests.WithLabelValues(route, string(r))
	}
	m.CommandDuration.WithLabelValues(route)
}
