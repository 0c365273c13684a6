package query

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bookrecon/bookrecon/events"
)

// Routes of the API, the bounded values of the route label.
const (
	routeIntentStatus = "intent_status"
	routeRetryGate    = "retry_gate"
	routeOther        = "other"
)

// responseCodes are the status codes the API writes, the bounded values of the code label.
var responseCodes = []int{200, 400, 401, 403, 404, 500}

// Metrics are the query API's Prometheus series, every label combination pre-created.
type Metrics struct {
	// GateAnswers counts every retry-gate answer given, by the retry-gate endpoint and by the
	// status endpoint's canBuyAgain (operation BOOK): bookrecon_retry_gate_answers_total
	// {operation, allowed, reason}.
	GateAnswers *prometheus.CounterVec
	// Requests counts responses: bookrecon_query_requests_total{route, code}.
	Requests *prometheus.CounterVec
	// Duration is the time to answer: bookrecon_query_request_duration_seconds{route}.
	Duration *prometheus.HistogramVec
}

// NewMetrics registers the API's metrics on reg (nil: a private registry, for tests).
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	m := &Metrics{
		GateAnswers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bookrecon_retry_gate_answers_total",
			Help: "Retry-gate answers given by the query API (retry-gate endpoint and canBuyAgain), by operation, allowed and reason.",
		}, []string{"operation", "allowed", "reason"}),
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bookrecon_query_requests_total",
			Help: "Query API responses by route and status code.",
		}, []string{"route", "code"}),
		Duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "bookrecon_query_request_duration_seconds",
			Help:    "Query API response time by route.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}, []string{"route"}),
	}
	for _, c := range []prometheus.Collector{m.GateAnswers, m.Requests, m.Duration} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	for _, op := range events.Operations() {
		for _, r := range GateReasons() {
			m.GateAnswers.WithLabelValues(string(op), strconv.FormatBool(Allows(r)), string(r))
		}
	}
	for _, route := range []string{routeIntentStatus, routeRetryGate, routeOther} {
		m.Duration.WithLabelValues(route)
		for _, code := range responseCodes {
			m.Requests.WithLabelValues(route, strconv.Itoa(code))
		}
	}
	return m, nil
}

func (m *Metrics) gateAnswer(op events.Operation, g GateAnswer) {
	m.GateAnswers.WithLabelValues(string(op), strconv.FormatBool(g.Allowed), string(g.Reason)).Inc()
}
