// Package lag exports how far behind the pipeline is, computed when Prometheus scrapes:
//
//   - bookrecon_consumer_lag_records{group,topic,partition}: records a consumer group has not
//     committed yet, from franz-go's kadm (group description, committed offsets, log start and
//     end offsets);
//   - bookrecon_outbox_backlog_records and bookrecon_outbox_oldest_age_seconds: unpublished
//     outbox rows and the age of the oldest (every service writes the one outbox table, so one
//     service exports it: the ingester);
//   - bookrecon_unknown_overdue_records: UNKNOWN attempts past their escalation deadline (per
//     provider and operation, from the capability map) that the escalator has not judged yet —
//     neither settled nor handed to a person, which promise 3 of docs/design.md#promises forbids.
//     It is exported by the ingester so that it still reports when the escalator is down.
//
// A scrape runs at most one collection at a time, bounded by Config.Timeout; a result younger
// than Config.MinInterval is served again, so several scrapers cost one round of queries. A
// source that fails leaves its series out of that scrape (stale values would mislead) and
// counts bookrecon_lag_errors_total{source}. Series are not pre-created: the partitions come
// from the broker, and a group's series appear once it has joined or committed.
package lag

import (
	"cmp"
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/bookrecon/bookrecon/events"
	"github.com/bookrecon/bookrecon/internal/outbox"
	"github.com/bookrecon/bookrecon/providers"
)

// Sources of bookrecon_lag_errors_total.
const (
	SourceKafka   = "kafka"
	SourceOutbox  = "outbox"
	SourceOverdue = "overdue"
)

// Config says what to measure. Each part is optional: a nil Admin exports no consumer lag, a nil
// Pool no outbox backlog, a nil Pool or Providers no overdue count.
type Config struct {
	Admin     *kadm.Client   // the broker's admin client
	Groups    []string       // consumer groups whose lag is exported
	Pool      *pgxpool.Pool  // the pipeline's database
	Providers *providers.Map // the capability map: escalation deadlines
	// Timeout bounds one collection (default 5s).
	Timeout time.Duration
	// MinInterval is how long a collection's result is served again (default 5s).
	MinInterval time.Duration
}

// Collector is a prometheus.Collector; register it once per process.
type Collector struct {
	cfg    Config
	lag    *prometheus.Desc
	back   *prometheus.Desc
	oldest *prometheus.Desc
	aside  *prometheus.Desc
	over   *prometheus.Desc
	errs   *prometheus.CounterVec

	mu   sync.Mutex
	at   time.Time
	last []prometheus.Metric
}

// New returns a collector for cfg.
func New(cfg Config) *Collector {
	cfg.Timeout = cmp.Or(cfg.Timeout, 5*time.Second)
	cfg.MinInterval = cmp.Or(cfg.MinInterval, 5*time.Second)
	c := &Collector{
		cfg: cfg,
		lag: prometheus.NewDesc("bookrecon_consumer_lag_records",
			"Records of a partition that the consumer group has not committed yet (log end offset minus committed offset), from kadm.",
			[]string{"group", "topic", "partition"}, nil),
		back: prometheus.NewDesc("bookrecon_outbox_backlog_records",
			"Outbox rows not yet published to Kafka.", nil, nil),
		aside: prometheus.NewDesc("bookrecon_outbox_set_aside_records",
			"Outbox rows the relay set aside after a record error (MESSAGE_TOO_LARGE, RECORD_LIST_TOO_LARGE, INVALID_RECORD), waiting for `bookrecon outbox retry` or `discard`; their keys' later rows wait.", nil, nil),
		oldest: prometheus.NewDesc("bookrecon_outbox_oldest_age_seconds",
			"Age in seconds of the oldest unpublished outbox row (0 when none).", nil, nil),
		over: prometheus.NewDesc("bookrecon_unknown_overdue_records",
			"UNKNOWN attempts past their escalation deadline that the escalator has not judged yet (neither settled nor handed to a person).", nil, nil),
		errs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "bookrecon_lag_errors_total",
			Help: "Failed lag, backlog or overdue collections, by source (kafka, outbox, overdue)."}, []string{"source"}),
	}
	for _, s := range []string{SourceKafka, SourceOutbox, SourceOverdue} {
		c.errs.WithLabelValues(s)
	}
	return c
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.lag
	ch <- c.back
	ch <- c.oldest
	ch <- c.aside
	ch <- c.over
	c.errs.Describe(ch)
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	if c.last == nil || time.Since(c.at) >= c.cfg.MinInterval {
		ctx, cancel := context.WithTimeout(context.Background(), c.cfg.Timeout)
		c.last = c.collect(ctx)
		c.at = time.Now()
		cancel()
	}
	ms := c.last
	c.mu.Unlock()
	for _, m := range ms {
		ch <- m
	}
	c.errs.Collect(ch)
}

// collect runs one round of queries; a failed source counts an error and adds no series.
func (c *Collector) collect(ctx context.Context) []prometheus.Metric {
	ms := []prometheus.Metric{}
	if c.cfg.Admin != nil && len(c.cfg.Groups) > 0 {
		lags, err := ConsumerLag(ctx, c.cfg.Admin, c.cfg.Groups...)
		if err != nil {
			c.errs.WithLabelValues(SourceKafka).Inc()
		}
		for _, l := range lags {
			ms = append(ms, prometheus.MustNewConstMetric(c.lag, prometheus.GaugeValue, float64(l.Lag),
				l.Group, l.Topic, strconv.Itoa(int(l.Partition))))
		}
	}
	if c.cfg.Pool != nil {
		if n, age, err := outbox.Backlog(ctx, c.cfg.Pool); err != nil {
			c.errs.WithLabelValues(SourceOutbox).Inc()
		} else {
			ms = append(ms, prometheus.MustNewConstMetric(c.back, prometheus.GaugeValue, float64(n)),
				prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, age.Seconds()))
		}
		if n, err := outbox.CountSetAside(ctx, c.cfg.Pool); err != nil {
			c.errs.WithLabelValues(SourceOutbox).Inc()
		} else {
			ms = append(ms, prometheus.MustNewConstMetric(c.aside, prometheus.GaugeValue, float64(n)))
		}
	}
	if c.cfg.Pool != nil && c.cfg.Providers != nil {
		if n, err := Overdue(ctx, c.cfg.Pool, c.cfg.Providers); err != nil {
			c.errs.WithLabelValues(SourceOverdue).Inc()
		} else {
			ms = append(ms, prometheus.MustNewConstMetric(c.over, prometheus.GaugeValue, float64(n)))
		}
	}
	return ms
}

// PartitionLag is one partition's lag for one group.
type PartitionLag struct {
	Group     string
	Topic     string
	Partition int32
	Lag       int64
}

// ConsumerLag returns the lag of every partition the groups are assigned or have committed,
// from kadm.Client.Lag. Partitions whose lag cannot be computed are left out, and the first such
// problem is returned with the partitions that could be computed.
func ConsumerLag(ctx context.Context, adm *kadm.Client, groups ...string) ([]PartitionLag, error) {
	described, err := adm.Lag(ctx, groups...)
	if err != nil {
		return nil, fmt.Errorf("lag: describe groups %v: %w", groups, err)
	}
	var out []PartitionLag
	var first error
	for _, g := range described.Sorted() {
		if err := g.Error(); err != nil {
			first = cmp.Or(first, fmt.Errorf("lag: group %s: %w", g.Group, err))
			continue
		}
		for _, l := range g.Lag.Sorted() {
			if l.Err != nil || l.Lag < 0 {
				first = cmp.Or(first, fmt.Errorf("lag: group %s topic %s partition %d: %w", g.Group, l.Topic, l.Partition, l.Err))
				continue
			}
			out = append(out, PartitionLag{Group: g.Group, Topic: l.Topic, Partition: l.Partition, Lag: l.Lag})
		}
	}
	return out, first
}

// Overdue counts UNKNOWN attempts whose escalation deadline (per provider and operation, on the
// database clock, from unknown_since) has passed and whose deadline the escalator has not judged
// (deadline_done). It reads the escalator's partial index booking_attempt_deadline.
func Overdue(ctx context.Context, pool *pgxpool.Pool, m *providers.Map) (int64, error) {
	var provs, ops []string
	var micros []int64
	for _, name := range m.Names() {
		caps, _ := m.Get(name)
		for _, op := range events.Operations() {
			provs = append(provs, name)
			ops = append(ops, string(op))
			micros = append(micros, caps.DeadlineFor(op).Microseconds())
		}
	}
	var n int64
	err := pool.QueryRow(ctx, `SELECT count(*) FROM booking_attempt a
		JOIN unnest($1::text[], $2::text[], $3::bigint[]) AS d(provider, operation, deadline_us)
		  ON d.provider = a.provider AND d.operation = a.operation
		WHERE a.status = 'UNKNOWN' AND NOT a.deadline_done
		  AND a.unknown_since + d.deadline_us * interval '1 microsecond' <= now()`, provs, ops, micros).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("lag: overdue unknown attempts: %w", err)
	}
	return n, nil
}
