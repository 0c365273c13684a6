package demo

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// scrape reads a /metrics endpoint into name{labels} → value.
func scrape(ctx context.Context, url string) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("demo: parse %s: %w", url, err)
	}
	out := map[string]float64{}
	for name, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			k := name
			if len(labels) > 0 {
				k += "{" + strings.Join(labels, ",") + "}"
			}
			switch {
			case m.GetCounter() != nil:
				out[k] = m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				out[k] = m.GetGauge().GetValue()
			}
		}
	}
	return out, nil
}

// scrapeCounters fills the counts that expected.json lists from the ingester's /metrics.
func scrapeCounters(ctx context.Context, url string, obs *Observed) error {
	m, err := scrape(ctx, url)
	if err != nil {
		return err
	}
	obs.Counters["duplicateDeliveries.booking.attempts.v1"] = m["bookrecon_duplicate_deliveries_total{topic=booking.attempts.v1}"]
	obs.Counters["duplicateDeliveries.booking.manual-decisions.v1"] = m["bookrecon_duplicate_deliveries_total{topic=booking.manual-decisions.v1}"]
	obs.Counters["idempotentRepeats"] = m["bookrecon_idempotent_repeats_total"]
	obs.Counters["keyConflicts"] = m["bookrecon_key_conflicts_total"]
	obs.Counters["blindRetries"] = m["bookrecon_blind_retries_total"]
	return nil
}

// progress prints one compact status line: in place on a terminal, every 5s otherwise.
func progress(ctx context.Context, o Options, pool *pgxpool.Pool, ingesterURL string, elapsed, total time.Duration) {
	if !o.Live && elapsed%(5*time.Second) >= 500*time.Millisecond {
		return
	}
	m, _ := scrape(ctx, ingesterURL)
	consumed := 0.0
	for k, v := range m {
		if strings.HasPrefix(k, "bookrecon_events_consumed_total") {
			consumed += v
		}
	}
	dead := 0.0
	for k, v := range m {
		if strings.HasPrefix(k, "bookrecon_dead_letters_total") {
			dead += v
		}
	}
	dups := m["bookrecon_duplicate_deliveries_total{topic=booking.attempts.v1}"] + m["bookrecon_duplicate_deliveries_total{topic=booking.manual-decisions.v1}"]
	states := map[string]int{}
	rows, err := pool.Query(ctx, `SELECT status, count(*) FROM booking_attempt GROUP BY status`)
	if err == nil {
		for rows.Next() {
			var s string
			var n int
			if rows.Scan(&s, &n) == nil {
				states[s] = n
			}
		}
		rows.Close()
	}
	var open, closed int
	_ = pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE state = 'open'), count(*) FILTER (WHERE state = 'closed') FROM escalation`).Scan(&open, &closed)
	line := fmt.Sprintf("[%3ds/%ds] consumed %3.0f  duplicates blocked %2.0f  dead letters %2.0f  attempts: in progress %d, unknown %d, confirmed %d, failed %d  escalations: open %d, closed %d",
		int(elapsed.Seconds()), int(total.Seconds()), consumed, dups, dead,
		states["IN_PROGRESS"], states["UNKNOWN"], states["CONFIRMED"], states["FAILED"], open, closed)
	if o.Live {
		fmt.Fprint(o.Out, "\r\033[K"+line)
	} else {
		fmt.Fprintln(o.Out, line)
	}
}
