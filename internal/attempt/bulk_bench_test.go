package attempt

import (
	"context"
	"testing"
	"time"

	"github.com/bookrecon/bookrecon/events"
	"github.com/bookrecon/bookrecon/internal/harness/loadgen"
)

// BenchmarkBulkApply: the in-memory part of a batch of the happy mix (1,000 intents: starts and
// their outcomes, a tenth failed, redeliveries) — Bulk.Apply of every event on a Bulk that loaded
// nothing (every attempt new), as the ingester's applyFast calls it; no PostgreSQL, no Flush.
// Per batch of gen.Records events.
func BenchmarkBulkApply(b *testing.B) {
	gen := loadgen.Generate(loadgen.Config{Intents: 1000, Seed: 7, Start: time.Now().Add(-time.Hour),
		Mix: loadgen.Mix{Failure: 0.10, Redeliveries: 0.05}})
	var evs []events.Attempt
	var ds []events.Digests
	seen := map[string]bool{}
	for _, raw := range gen.Records {
		a, _, err := events.DecodeAttemptHashed(raw, events.DecodeOptions{})
		if err != nil {
			b.Fatal(err)
		}
		if seen[a.EventID] { // deduplicated before Apply, as processed_event does
			continue
		}
		seen[a.EventID] = true
		d, err := a.Digests()
		if err != nil {
			b.Fatal(err)
		}
		evs, ds = append(evs, a), append(ds, d)
	}
	cfg := &Config{Policies: map[string]Policy{}, FirstCheck: time.Second}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		t := NewTx(nil, cfg)
		bulk, err := t.loadBulk(ctx, false, events.DefaultTransportTimeoutCodes(), nil, nil, nil, nil, nil, nil, nil)
		if err != nil {
			b.Fatal(err)
		}
		for i := range evs {
			if err := bulk.Apply(ctx, evs[i], ds[i]); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(len(evs)), "events/op")
}
