package ingest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/bookrecon/bookrecon/events"
	"github.com/bookrecon/bookrecon/internal/harness/loadgen"
	"github.com/bookrecon/bookrecon/internal/harness/pgtest"
	"github.com/bookrecon/bookrecon/internal/harness/samples"
	"github.com/bookrecon/bookrecon/internal/ingest"
)

// TestBatchSizeInvariance is the oracle of the one write path (attempt.Bulk): the realistic mix
// (loadgen.DefaultMix, redeliveries included) with manual decisions woven in — one before every
// 20th intent's first event (kept: no attempt yet), one after every 20th outcome_unknown
// (applied in the batch), the kept ones sharing one provider reference and the applied ones
// another, so their claims conflict — applied through the ingester's own batch code in one batch, in
// batches of 7 and one record per batch, and in lanes applied at once as the ingester applies a
// poll (the whole in 2 and in 3 lanes, batches of 100 in 2), and in batches read ahead as the
// ingester reads the next poll while one is applied (batches of 100 in 2 lanes, of 23 in 3, each
// one's stored links read before the one before it is applied: Applier.ApplyPolls), leaves the
// same database: every row of booking_attempt,
// attempt_transition, escalation, anomaly, outbox, provider_reference_claim, pending_decision
// and processed_event, compared without the columns a transaction's clock or a random id fills
// in (dumpTables).
func TestBatchSizeInvariance(t *testing.T) {
	if testing.Short() {
		t.Skip("needs PostgreSQL")
	}
	t.Parallel()
	ctx := context.Background()
	gen := loadgen.Generate(loadgen.Config{Intents: 240, Seed: 12, Start: time.Now().Add(-time.Hour), Mix: loadgen.DefaultMix})
	var recs []*kgo.Record
	firsts, unknowns := map[string]bool{}, 0
	for i, raw := range gen.Records {
		var a struct {
			EventID, EventType, TenantID, BookingIntentID, IdempotencyKey string
		}
		if err := json.Unmarshal(raw, &a); err != nil {
			t.Fatal(err)
		}
		decide := func(n int, verdict string) *kgo.Record {
			d := fmt.Sprintf(`{"specVersion":1,"eventId":"dec-%s-%d","eventType":"decision.recorded","occurredAt":%q,"tenantId":%q,
				"bookingIntentId":%q,"idempotencyKey":%q,"decision":%q,"providerReference":"M-%d","actor":"ops.1","reason":"checked"}`,
				a.EventID, n, time.Now().UTC().Format(time.RFC3339Nano), a.TenantID, a.BookingIntentID, a.IdempotencyKey, verdict, n)
			return &kgo.Record{Topic: events.TopicManualDecisions, Key: []byte(a.BookingIntentID), Value: []byte(d)}
		}
		if !firsts[a.BookingIntentID] {
			if firsts[a.BookingIntentID] = true; len(firsts)%20 == 0 {
				recs = append(recs, decide(0, "FAILED"))
			}
		}
		recs = append(recs, &kgo.Record{Topic: events.TopicAttempts, Key: gen.Keys[i], Value: raw})
		if a.EventType == "attempt.outcome_unknown" {
			if unknowns++; unknowns%20 == 0 {
				recs = append(recs, decide(1, "CONFIRMED"))
			}
		}
	}
	for i, r := range recs {
		r.Offset = int64(i)
	}
	m, err := samples.Providers()
	if err != nil {
		t.Fatal(err)
	}
	// run applies recs in batches of size, each in one transaction (lanes 0) or split into that
	// many lanes applied at once (Applier.ApplyLanes, as the ingester applies a poll); with ahead,
	// each batch's stored links read before the batch before it is applied (Applier.ApplyPolls,
	// as the ingester reads the next poll while one is applied).
	run := func(size, lanes int, ahead bool) []string {
		pool := pgtest.NewPool(t)
		ap, err := ingest.NewApplier(ingest.Config{Providers: m, Lanes: lanes}, pool, ingest.Deps{Logger: discardLogger()})
		if err != nil {
			t.Fatal(err)
		}
		var polls []ingest.Batch
		for lo := 0; lo < len(recs); lo += size {
			polls = append(polls, ap.Decode(recs[lo:min(lo+size, len(recs))]))
		}
		if ahead {
			if err := ap.ApplyPolls(ctx, polls...); err != nil {
				t.Fatal(err)
			}
			return dumpTables(t, pool)
		}
		for _, b := range polls {
			if lanes == 0 {
				err = ap.Apply(ctx, b)
			} else {
				err = ap.ApplyLanes(ctx, b)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		return dumpTables(t, pool)
	}
	whole := run(len(recs), 0, false)
	// The workload is what the oracle claims: attempts in every shape, decisions kept and applied.
	joined := strings.Join(whole, "\n")
	for _, want := range []string{"|UNKNOWN|", "|CONFIRMED|manual|", "|FAILED|not_sent|", "|key_conflict|open|", "|blind_retry|open|",
		"|duplicate_provider_reference|", "|ops.1|checked|", "|f|t|"} {
		if !strings.Contains(joined, want) {
			t.Errorf("the workload leaves no row with %q", want)
		}
	}
	for _, c := range []struct {
		size, lanes int
		ahead       bool
	}{{7, 0, false}, {1, 0, false}, {len(recs), 2, false}, {len(recs), 3, false}, {100, 2, false}, {100, 2, true}, {23, 3, true}} {
		got := run(c.size, c.lanes, c.ahead)
		name := fmt.Sprintf("batches of %d", c.size)
		if c.lanes > 0 {
			name += fmt.Sprintf(" in %d lanes", c.lanes)
		}
		if c.ahead {
			name += ", each one's links read before the one before it is applied"
		}
		if len(got) != len(whole) {
			t.Errorf("%s: %d rows, one batch %d", name, len(got), len(whole))
		}
		for i := range min(len(got), len(whole)) {
			if got[i] != whole[i] {
				t.Errorf("%s, row %d:\n%s\none batch:\n%s", name, i, got[i], whole[i])
			}
		}
	}
}
