package reconcile

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/bookrecon/bookrecon/internal/attempt"
	"github.com/bookrecon/bookrecon/internal/postgres"
	"github.com/bookrecon/bookrecon/providers"
)

// Metrics are the reconciler's series (DESIGN.md "Observability"), pre-created from the enums
// and the capability map.
type Metrics struct {
	Lookups        *prometheus.CounterVec   // provider, kind, result
	LookupSeconds  *prometheus.HistogramVec // provider
	Claimed        prometheus.Counter
	ClaimSeconds   prometheus.Histogram
	LeaseLost      prometheus.Counter
	Resolutions    *prometheus.CounterVec // source, status
	TimeToTerminal *prometheus.HistogramVec
	UnknownAge     prometheus.Histogram // seconds UNKNOWN when settled
	OldestUnknown  prometheus.Gauge
	UnknownCreated *prometheus.CounterVec // timeout_class (stale)
	Escalations    *prometheus.CounterVec // reason
	Contradictions prometheus.Counter
}

// NewMetrics registers the reconciler's metrics on reg.
func NewMetrics(reg prometheus.Registerer, m *providers.Map) *Metrics {
	x := &Metrics{
		Lookups: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "bookrecon_provider_lookups_total",
			Help: "Provider lookups, by provider, lookup kind and result (found, not_found, several, error)."}, []string{"provider", "kind", "result"}),
		LookupSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "bookrecon_provider_lookup_seconds",
			Help: "Provider lookup latency in seconds.", Buckets: prometheus.ExponentialBuckets(0.001, 2, 14)}, []string{"provider"}),
		Claimed: prometheus.NewCounter(prometheus.CounterOpts{Name: "bookrecon_reconcile_claimed_total",
			Help: "UNKNOWN attempts claimed for a check."}),
		ClaimSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "bookrecon_reconcile_claim_seconds",
			Help: "Latency of the claim statement in seconds.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)}),
		LeaseLost: prometheus.NewCounter(prometheus.CounterOpts{Name: "bookrecon_lease_lost_total",
			Help: "Verdicts dropped because the reconciler's lease was taken over (lease contention)."}),
		Resolutions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "bookrecon_resolutions_total",
			Help: "Attempts that reached a terminal state, by resolution source and status."}, []string{"source", "status"}),
		TimeToTerminal: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "bookrecon_time_to_terminal_seconds",
			Help: "Seconds from an attempt's first record to its terminal state.", Buckets: prometheus.ExponentialBuckets(0.5, 2, 14)}, []string{"status"}),
		UnknownAge: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "bookrecon_unknown_age_seconds",
			Help: "Seconds an attempt spent UNKNOWN before a lookup settled it.", Buckets: prometheus.ExponentialBuckets(0.5, 2, 14)}),
		OldestUnknown: prometheus.NewGauge(prometheus.GaugeOpts{Name: "bookrecon_unknown_oldest_age_seconds",
			Help: "Age in seconds of the oldest UNKNOWN attempt (0 when none)."}),
		UnknownCreated: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "bookrecon_unknown_created_total",
			Help: "Attempts recorded UNKNOWN, by timeout class (the reconciler records `stale`)."}, []string{"timeout_class"}),
		Escalations: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "bookrecon_escalations_opened_total",
			Help: "Escalations opened, by reason."}, []string{"reason"}),
		Contradictions: prometheus.NewCounter(prometheus.CounterOpts{Name: "bookrecon_contradictions_total",
			Help: "Lookups that contradict a terminal state."}),
	}
	reg.MustRegister(x.Lookups, x.LookupSeconds, x.Claimed, x.ClaimSeconds, x.LeaseLost, x.Resolutions, x.TimeToTerminal,
		x.UnknownAge, x.OldestUnknown, x.UnknownCreated, x.Escalations, x.Contradictions)
	for _, name := range m.Names() {
		x.LookupSeconds.WithLabelValues(name)
		for _, k := range providers.LookupKinds() {
			for _, r := range providers.Results() {
				x.Lookups.WithLabelValues(name, string(k), string(r))
			}
		}
	}
	for _, s := range attempt.Sources() {
		x.Resolutions.WithLabelValues(string(s), string(attempt.StatusConfirmed))
		x.Resolutions.WithLabelValues(string(s), string(attempt.StatusFailed))
	}
	x.TimeToTerminal.WithLabelValues(string(attempt.StatusConfirmed))
	x.TimeToTerminal.WithLabelValues(string(attempt.StatusFailed))
	x.UnknownCreated.WithLabelValues("stale")
	for _, r := range attempt.Reasons() {
		x.Escalations.WithLabelValues(string(r))
	}
	return x
}

func (x *Metrics) observe(e *attempt.Effects) {
	for k, n := range e.Resolutions {
		x.Resolutions.WithLabelValues(k[0], k[1]).Add(float64(n))
	}
	for _, t := range e.TimeToTerminal {
		x.TimeToTerminal.WithLabelValues(string(t.Status)).Observe(t.Seconds)
	}
	for _, s := range e.UnknownAges {
		x.UnknownAge.Observe(s)
	}
	for c, n := range e.UnknownByClass {
		x.UnknownCreated.WithLabelValues(string(c)).Add(float64(n))
	}
	for r, n := range e.EscalationsOpened {
		x.Escalations.WithLabelValues(string(r)).Add(float64(n))
	}
	x.Contradictions.Add(float64(e.Contradictions))
}

// observeOldest sets the oldest-UNKNOWN gauge.
func (r *Reconciler) observeOldest(ctx context.Context) error {
	var age *float64
	err := r.pool.QueryRow(ctx, `SELECT extract(epoch FROM $1 - min(unknown_since))::float8 FROM booking_attempt WHERE status = 'UNKNOWN'`, r.now()).Scan(&age)
	if err != nil {
		return fmt.Errorf("reconcile: oldest unknown: %w", err)
	}
	if age == nil {
		r.metrics.OldestUnknown.Set(0)
	} else {
		r.metrics.OldestUnknown.Set(*age)
	}
	return nil
}

// sweepStale turns attempts IN_PROGRESS for longer than InProgressTimeout (from when they were
// recorded) UNKNOWN, each in its own transaction that locks the intent and re-checks.
func (r *Reconciler) sweepStale(ctx context.Context) error {
	cutoff := r.now().Add(-r.cfg.InProgressTimeout)
	rows, err := r.pool.Query(ctx, `SELECT id, tenant_id, booking_intent_id FROM booking_attempt
		WHERE status = 'IN_PROGRESS' AND created_at < $1 ORDER BY created_at LIMIT $2`, cutoff, r.cfg.Batch)
	if err != nil {
		return fmt.Errorf("reconcile: stale scan: %w", err)
	}
	type cand struct {
		id             uuid.UUID
		tenant, intent string
	}
	cands, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (cand, error) {
		var c cand
		return c, row.Scan(&c.id, &c.tenant, &c.intent)
	})
	if err != nil {
		return fmt.Errorf("reconcile: stale scan: %w", err)
	}
	for _, c := range cands {
		var eff *attempt.Effects
		err := postgres.WithTx(ctx, r.pool, func(tx pgx.Tx) error {
			at := attempt.NewTx(tx, &r.cfg.Store)
			eff = &at.Effects
			if err := at.LockIntent(ctx, c.tenant, c.intent); err != nil {
				return err
			}
			a, err := at.ByID(ctx, c.id)
			if err != nil {
				return err
			}
			if a.Status != attempt.StatusInProgress || !a.CreatedAt.Before(cutoff) {
				return nil // settled or restarted meanwhile
			}
			_, err = at.MarkStale(ctx, a)
			return err
		})
		if err != nil {
			return err
		}
		r.metrics.observe(eff)
	}
	return nil
}
