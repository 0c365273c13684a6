package reconcile

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/bookrecon/bookrecon/internal/attempt"
	"github.com/bookrecon/bookrecon/internal/postgres"
	"github.com/bookrecon/bookrecon/providers"
)

// Metrics are the reconciler's series (docs/design.md#observability), pre-created from the enums
// and the capability map.
type Metrics struct {
	// reg registers OldestUnknown once its first value is computed (see observeOldest).
	reg           prometheus.Registerer
	oldestOnce    sync.Once
	Lookups       *prometheus.CounterVec   // provider, kind, result
	LookupSeconds *prometheus.HistogramVec // provider
	// LookupsInFlight is the checks holding one of a provider's maxInFlight slots, by provider.
	LookupsInFlight *prometheus.GaugeVec
	Claimed         prometheus.Counter
	ClaimSeconds    prometheus.Histogram
	LeaseLost       prometheus.Counter
	Resolutions     *prometheus.CounterVec // source, status
	TimeToTerminal  *prometheus.HistogramVec
	UnknownAge      prometheus.Histogram // seconds UNKNOWN when settled
	OldestUnknown   prometheus.Gauge
	UnknownCreated  *prometheus.CounterVec // timeout_class (stale)
	Escalations     *prometheus.CounterVec // reason
	Contradictions  prometheus.Counter
	// ItemFailures counts items set aside for their own data, by stage (check, stale_sweep, decision)
	// and error_class (attempt.FailureClasses).
	ItemFailures *prometheus.CounterVec
}

// The reconciler's stage labels of bookrecon_item_failures_total.
const (
	StageCheck      = "check"               // a check's verdict write
	StageStaleSweep = "stale_sweep"         // turning a stale IN_PROGRESS attempt UNKNOWN
	StageDecision   = attempt.StageDecision // a kept manual decision applied by a verdict or the sweep
)

// NewMetrics registers the reconciler's metrics on reg.
func NewMetrics(reg prometheus.Registerer, m *providers.Map) *Metrics {
	x := &Metrics{
		Lookups: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "bookrecon_provider_lookups_total",
			Help: "Provider lookups, by provider, lookup kind and result (found, not_found, several, error)."}, []string{"provider", "kind", "result"}),
		LookupSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "bookrecon_provider_lookup_seconds",
			Help: "Provider lookup latency in seconds.", Buckets: prometheus.ExponentialBuckets(0.001, 2, 14)}, []string{"provider"}),
		LookupsInFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "bookrecon_provider_lookups_in_flight",
			Help: "Checks holding one of the provider's lookup slots (at most its maxInFlight), by provider."}, []string{"provider"}),
		Claimed: prometheus.NewCounter(prometheus.CounterOpts{Name: "bookrecon_reconcile_claimed_total",
			Help: "UNKNOWN attempts claimed for a check."}),
		ClaimSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "bookrecon_reconcile_claim_seconds",
			Help: "Latency of the claim statement in seconds.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)}),
		LeaseLost: prometheus.NewCounter(prometheus.CounterOpts{Name: "bookrecon_lease_lost_total",
			Help: "Verdicts not applied because another reconciler took the lease over (lease contention); each is audited."}),
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
		ItemFailures: attempt.NewItemFailures(StageCheck, StageStaleSweep, StageDecision),
	}
	x.reg = reg
	// OldestUnknown is not registered here: a gauge computed from the database is absent until
	// its first computation, never a false 0 (0 also means "none UNKNOWN").
	reg.MustRegister(x.Lookups, x.LookupSeconds, x.LookupsInFlight, x.Claimed, x.ClaimSeconds, x.LeaseLost, x.Resolutions, x.TimeToTerminal,
		x.UnknownAge, x.UnknownCreated, x.Escalations, x.Contradictions, x.ItemFailures)
	for _, name := range m.Names() {
		x.LookupSeconds.WithLabelValues(name)
		x.LookupsInFlight.WithLabelValues(name)
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
	for _, d := range e.DecisionsFailed {
		x.ItemFailures.WithLabelValues(StageDecision, d.Class).Inc()
	}
}

// observe adds one committed transaction's effects to the metrics and logs, at error level, the
// kept decisions it marked failed.
func (r *Reconciler) observe(e *attempt.Effects) {
	r.metrics.observe(e)
	for _, d := range e.DecisionsFailed {
		r.log.Error("kept manual decision failed to apply; marked failed, the attempt's own transition committed", d.LogArgs()...)
	}
}

// observeOldest sets the oldest-UNKNOWN gauge, registering it on its first computation.
func (r *Reconciler) observeOldest(ctx context.Context) error {
	var age *float64
	err := r.pool.QueryRow(ctx, statements.SQL("booking_attempt_oldest_unknown_age"), r.now(), string(attempt.StatusUnknown)).Scan(&age)
	if err != nil {
		return fmt.Errorf("reconcile: oldest unknown: %w", err)
	}
	if age == nil {
		r.metrics.OldestUnknown.Set(0)
	} else {
		r.metrics.OldestUnknown.Set(*age)
	}
	r.metrics.oldestOnce.Do(func() { r.metrics.reg.MustRegister(r.metrics.OldestUnknown) })
	return nil
}

// sweepStale turns attempts IN_PROGRESS for longer than InProgressTimeout (from when they were
// recorded) UNKNOWN, each in its own transaction that locks the intent and re-checks.
func (r *Reconciler) sweepStale(ctx context.Context) error {
	now := r.now()
	cutoff := now.Add(-r.cfg.InProgressTimeout)
	// next_check_at of an IN_PROGRESS attempt is the retry of a sweep that failed for the
	// attempt's own data (setAside): until then the attempt is skipped.
	rows, err := r.pool.Query(ctx, statements.SQL("booking_attempt_stale_candidates"), cutoff, r.cfg.Batch, now, string(attempt.StatusInProgress))
	if err != nil {
		return fmt.Errorf("reconcile: stale scan: %w", err)
	}
	type cand struct {
		id                  uuid.UUID
		tenant, intent, key string
		token               int64
	}
	cands, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (cand, error) {
		var c cand
		return c, row.Scan(&c.id, &c.tenant, &c.intent, &c.key, &c.token)
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
			_, err = at.MarkStale(ctx, a, now, r.cfg.InProgressTimeout) // unchanged when settled or restarted meanwhile
			return err
		})
		if class := attempt.FailureClass(err); class != "" && ctx.Err() == nil {
			f := failedItem{stage: StageStaleSweep, id: c.id, tenant: c.tenant, key: c.key, token: c.token, status: attempt.StatusInProgress}
			if err := r.setAside(ctx, f, class, err); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return err
		}
		r.observe(eff)
	}
	return nil
}

// failedItem is the attempt a stage failed on, as the stage saw it: the record is fenced by its
// lease token and status, so an attempt that moved on meanwhile is not recorded.
type failedItem struct {
	stage       string
	id          uuid.UUID
	tenant, key string
	token       int64
	status      attempt.Status
}

// setAside records a failure for the attempt's own data, in a short transaction of its own after
// the failed one rolled back: check_failures + 1, check_error, the lease released, and
// next_check_at moved on by the backoff (interval(failures)) — the check's schedule, or the stale
// sweep's retry. It counts and logs it at error level. An error here is the database's.
func (r *Reconciler) setAside(ctx context.Context, f failedItem, class string, cause error) error {
	var failures int
	var next time.Time
	recorded := false
	err := postgres.WithTx(ctx, r.pool, func(tx pgx.Tx) error {
		var err error
		failures, next, recorded, err = attempt.NewTx(tx, &r.cfg.Store).RecordCheckFailure(ctx, f.id, f.token, f.status, cause,
			func(n int) time.Time { return r.now().Add(r.interval(n)) })
		return err
	})
	if err != nil {
		return fmt.Errorf("reconcile: record the failure of %s/%s: %w", f.tenant, f.key, err)
	}
	if !recorded {
		r.log.Info("failed attempt moved on meanwhile; failure not recorded", "stage", f.stage, "attempt_id", f.id, "err", cause)
		return nil
	}
	r.metrics.ItemFailures.WithLabelValues(f.stage, class).Inc()
	r.log.Error("attempt failed for its own data; set aside, retried with backoff", "stage", f.stage,
		"attempt_id", f.id, "tenant_id", f.tenant, "idempotency_key", f.key, "failures", failures,
		"error_class", class, "next_check_at", next.UTC(), "err", cause)
	return nil
}
