package ingest

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/bookrecon/bookrecon/events"
	"github.com/bookrecon/bookrecon/internal/attempt"
)

// Metrics are the ingester's series (docs/design.md#observability); every label combination is
// pre-created from the enums.
type Metrics struct {
	Consumed            *prometheus.CounterVec // topic, event_type
	DuplicateDeliveries *prometheus.CounterVec // topic
	IdempotentRepeats   prometheus.Counter
	KeyConflicts        prometheus.Counter
	BlindRetries        prometheus.Counter
	Contradictions      prometheus.Counter
	UnknownCreated      *prometheus.CounterVec // timeout_class
	Resolutions         *prometheus.CounterVec // source, status
	TimeToTerminal      *prometheus.HistogramVec
	EscalationsOpened   *prometheus.CounterVec // reason
	EscalationsClosed   *prometheus.CounterVec // reason
	DuplicateProvRefs   prometheus.Counter
	DeadLetters         *prometheus.CounterVec // topic, reason
	KeyMismatches       prometheus.Counter
	EventIDCollisions   prometheus.Counter
	ManualDecisions     *prometheus.CounterVec // decision, outcome
	BatchSeconds        prometheus.Histogram
	Paused              prometheus.Counter
	// BatchesRerun: batches the set-based write could not write, rerun record by record (a record
	// the database refused, or one of the answers only the database has: attempt.Bulk).
	BatchesRerun prometheus.Counter
	ItemFailures *prometheus.CounterVec // stage (decision), error_class: kept decisions that failed to apply
}

var consumedTypes = []string{"attempt.started", "attempt.succeeded", "attempt.failed", "attempt.outcome_unknown", "decision.recorded", "invalid"}

// NewMetrics registers the ingester's metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Consumed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "bookrecon_events_consumed_total",
			Help: "Records consumed, by topic and event type (invalid: dead-lettered before typing)."}, []string{"topic", "event_type"}),
		DuplicateDeliveries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "bookrecon_duplicate_deliveries_total",
			Help: "Deliveries of an eventId already processed (blocked by processed_event)."}, []string{"topic"}),
		IdempotentRepeats: prometheus.NewCounter(prometheus.CounterOpts{Name: "bookrecon_idempotent_repeats_total",
			Help: "New eventIds that restate an applied fact."}),
		KeyConflicts: prometheus.NewCounter(prometheus.CounterOpts{Name: "bookrecon_key_conflicts_total",
			Help: "Events whose idempotency key exists with another request hash, provider or intent."}),
		BlindRetries: prometheus.NewCounter(prometheus.CounterOpts{Name: "bookrecon_blind_retries_total",
			Help: "Attempt versions started without the safe retry gate's permission."}),
		Contradictions: prometheus.NewCounter(prometheus.CounterOpts{Name: "bookrecon_contradictions_total",
			Help: "Outcome events that contradict a terminal state."}),
		UnknownCreated: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "bookrecon_unknown_created_total",
			Help: "Attempts recorded UNKNOWN, by timeout class."}, []string{"timeout_class"}),
		Resolutions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "bookrecon_resolutions_total",
			Help: "Attempts that reached a terminal state, by resolution source and status."}, []string{"source", "status"}),
		TimeToTerminal: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "bookrecon_time_to_terminal_seconds",
			Help: "Seconds from an attempt's first record to its terminal state.", Buckets: prometheus.ExponentialBuckets(0.5, 2, 14)}, []string{"status"}),
		EscalationsOpened: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "bookrecon_escalations_opened_total",
			Help: "Escalations opened, by reason."}, []string{"reason"}),
		EscalationsClosed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "bookrecon_escalations_closed_total",
			Help: "Escalations closed, by reason."}, []string{"reason"}),
		DuplicateProvRefs: prometheus.NewCounter(prometheus.CounterOpts{Name: "bookrecon_duplicate_provider_references_total",
			Help: "Provider references found on a second attempt."}),
		DeadLetters: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "bookrecon_dead_letters_total",
			Help: "Records dead-lettered, by source topic and reason."}, []string{"topic", "reason"}),
		KeyMismatches: prometheus.NewCounter(prometheus.CounterOpts{Name: "bookrecon_record_key_mismatches_total",
			Help: "Records whose Kafka key differs from their bookingIntentId (processed normally)."}),
		EventIDCollisions: prometheus.NewCounter(prometheus.CounterOpts{Name: "bookrecon_event_id_collisions_total",
			Help: "Records reusing a processed eventId with different content (not applied)."}),
		ManualDecisions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "bookrecon_manual_decisions_total",
			Help: "Manual decisions, by decision and what happened (applied, kept, unchanged, rejected)."}, []string{"decision", "outcome"}),
		BatchSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "bookrecon_ingest_batch_seconds",
			Help: "Seconds per polled batch, from its apply to its offset commit (it is decoded and its stored links read while the batch before it is applied).", Buckets: prometheus.ExponentialBuckets(0.001, 2, 15)}),
		Paused: prometheus.NewCounter(prometheus.CounterOpts{Name: "bookrecon_ingest_pauses_total",
			Help: "Batches (lanes, with BOOKRECON_INGEST_LANES above 1) retried because PostgreSQL or Kafka was unavailable."}),
		BatchesRerun: prometheus.NewCounter(prometheus.CounterOpts{Name: "bookrecon_ingest_batches_rerun_total",
			Help: "Batches (lanes, with BOOKRECON_INGEST_LANES above 1) the set-based write could not write (a record the database refused, or an attempt another transaction created meanwhile), rerun record by record."}),
		ItemFailures: attempt.NewItemFailures(attempt.StageDecision),
	}
	reg.MustRegister(m.Consumed, m.DuplicateDeliveries, m.IdempotentRepeats, m.KeyConflicts, m.BlindRetries, m.Contradictions,
		m.UnknownCreated, m.Resolutions, m.TimeToTerminal, m.EscalationsOpened, m.EscalationsClosed, m.DuplicateProvRefs,
		m.DeadLetters, m.KeyMismatches, m.EventIDCollisions, m.ManualDecisions, m.BatchSeconds, m.Paused, m.BatchesRerun, m.ItemFailures)
	for _, topic := range []string{events.TopicAttempts, events.TopicManualDecisions} {
		m.DuplicateDeliveries.WithLabelValues(topic)
		for _, typ := range consumedTypes {
			m.Consumed.WithLabelValues(topic, typ)
		}
		for _, r := range events.Reasons() {
			m.DeadLetters.WithLabelValues(topic, string(r))
		}
		m.DeadLetters.WithLabelValues(topic, ReasonProcessingFailed)
	}
	for _, c := range events.TimeoutClasses() {
		m.UnknownCreated.WithLabelValues(string(c))
	}
	for _, s := range attempt.Sources() {
		m.Resolutions.WithLabelValues(string(s), string(attempt.StatusConfirmed))
		m.Resolutions.WithLabelValues(string(s), string(attempt.StatusFailed))
	}
	m.TimeToTerminal.WithLabelValues(string(attempt.StatusConfirmed))
	m.TimeToTerminal.WithLabelValues(string(attempt.StatusFailed))
	for _, r := range attempt.Reasons() {
		m.EscalationsOpened.WithLabelValues(string(r))
		m.EscalationsClosed.WithLabelValues(string(r))
	}
	for _, d := range []string{"CONFIRMED", "FAILED"} {
		for _, o := range []string{"applied", "kept", "unchanged", "rejected"} {
			m.ManualDecisions.WithLabelValues(d, o)
		}
	}
	return m
}

// observe adds one committed transaction's effects.
func (m *Metrics) observe(e *attempt.Effects) {
	m.IdempotentRepeats.Add(float64(e.IdempotentRepeats))
	m.KeyConflicts.Add(float64(e.KeyConflicts))
	m.BlindRetries.Add(float64(e.BlindRetries))
	m.Contradictions.Add(float64(e.Contradictions))
	m.DuplicateProvRefs.Add(float64(e.DuplicateProvRefs))
	for c, n := range e.UnknownByClass {
		m.UnknownCreated.WithLabelValues(string(c)).Add(float64(n))
	}
	for k, n := range e.Resolutions {
		m.Resolutions.WithLabelValues(k[0], k[1]).Add(float64(n))
	}
	for _, t := range e.TimeToTerminal {
		m.TimeToTerminal.WithLabelValues(string(t.Status)).Observe(t.Seconds)
	}
	for r, n := range e.EscalationsOpened {
		m.EscalationsOpened.WithLabelValues(string(r)).Add(float64(n))
	}
	for r, n := range e.EscalationsClosed {
		m.EscalationsClosed.WithLabelValues(string(r)).Add(float64(n))
	}
	for _, d := range e.DecisionsFailed {
		m.ItemFailures.WithLabelValues(attempt.StageDecision, d.Class).Inc()
	}
}
