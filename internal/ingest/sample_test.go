package ingest_test

import (
	"context"
	"encoding/json"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/bookrecon/bookrecon/internal/harness/kafkatest"
	"github.com/bookrecon/bookrecon/internal/harness/pipelinetest"
	"github.com/bookrecon/bookrecon/internal/ingest"
	"github.com/bookrecon/bookrecon/internal/ingest/testsignal"
	"github.com/bookrecon/bookrecon/internal/publish"
	"github.com/bookrecon/bookrecon/internal/telemetry"
)

// startIngester runs the ingester until the test ends.
func startIngester(t *testing.T, cfg ingest.Config, deps ingest.Deps) {
	t.Helper()
	startIngesterSignalled(t, cfg, deps, testsignal.Ingester{})
}

// startIngesterSignalled is startIngester with test signals.
func startIngesterSignalled(t *testing.T, cfg ingest.Config, deps ingest.Deps, sig testsignal.Ingester) {
	t.Helper()
	ctx, cancel := context.WithCancel(testsignal.With(context.Background(), sig))
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := ingest.Run(ctx, cfg, deps); err != nil {
			t.Errorf("ingest.Run: %v", err)
		}
	})
	t.Cleanup(func() { cancel(); wg.Wait() })
}

// TestSampleIngesterOnly feeds the whole of samples/attempts.jsonl through the real broker to
// the ingester alone: every attempt settled by `event` or `not_sent` ends as expected.json
// says, the dead letters match exactly, the anomalies are recorded, and each terminal attempt
// has exactly one resolution.
func TestSampleIngesterOnly(t *testing.T) {
	t.Parallel()
	h := pipelinetest.New(t, 3)
	reg := telemetry.NewRegistry()
	startIngester(t, h.IngestConfig(), ingest.Deps{Logger: discardLogger(), Registry: reg})

	lines := h.SampleLines("attempts.jsonl")
	epoch, _ := publish.Epoch(lines)
	ctx := context.Background()
	if err := publish.Run(ctx, h.Producer, lines, publish.Options{Topic: h.Topics.Attempts, Shift: time.Since(epoch)}); err != nil {
		t.Fatal(err)
	}
	h.WaitFor("62 processed events, 10 dead letters, outbox drained", 60*time.Second, func() bool {
		return h.Scalar(`SELECT count(*) FROM processed_event`) == h.Expected.Counts.UniqueValidEvents &&
			h.Scalar(`SELECT count(*) FROM outbox_fact WHERE topic = $1`, h.Topics.AttemptsDLQ) == h.Expected.Counts.DeadLetters &&
			h.OutboxDrained()
	})

	// Attempts the ingester alone can settle.
	type att struct{ Status, Source, Ref string }
	got := map[string]att{}
	rows, err := h.Pool.Query(ctx, `SELECT tenant_id || '/' || idempotency_key, status, coalesce(resolution_source, ''), coalesce(provider_reference, '') FROM booking_attempt`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var k string
		var a att
		if err := rows.Scan(&k, &a.Status, &a.Source, &a.Ref); err != nil {
			t.Fatal(err)
		}
		got[k] = a
	}
	if len(got) != h.Expected.Counts.Attempts {
		t.Errorf("attempts = %d, want %d", len(got), h.Expected.Counts.Attempts)
	}
	settled := 0
	for _, e := range h.Expected.Attempts {
		if e.ResolutionSource != "event" && e.ResolutionSource != "not_sent" {
			continue
		}
		settled++
		k := e.TenantID + "/" + e.IdempotencyKey
		want := att{e.Status, e.ResolutionSource, e.ProviderReference}
		if got[k] != want {
			t.Errorf("%s = %+v, want %+v", k, got[k], want)
		}
	}
	if settled != 17 {
		t.Errorf("expected.json has %d event/not_sent attempts, test assumes 17", settled)
	}

	// Dead letters: exactly the expected set with their reasons, origin in headers.
	dlq := kafkatest.ReadAll(t, h.Topics.AttemptsDLQ, h.Expected.Counts.DeadLetters, time.Second, 30*time.Second)
	var gotDL, wantDL []string
	offsets := map[string]bool{}
	for _, r := range dlq {
		var v struct {
			EventID *string `json:"eventId"`
		}
		_ = json.Unmarshal(r.Value, &v)
		id := "<none>"
		if v.EventID != nil {
			id = *v.EventID
		}
		gotDL = append(gotDL, id+" "+kafkatest.Header(r, "bookrecon.dlq.reason"))
		if kafkatest.Header(r, "bookrecon.source.topic") != h.Topics.Attempts || kafkatest.Header(r, "bookrecon.source.offset") == "" {
			t.Errorf("dead letter %s lacks its origin headers", id)
		}
		offsets[kafkatest.Header(r, "bookrecon.source.partition")+"/"+kafkatest.Header(r, "bookrecon.source.offset")] = true
	}
	for _, d := range h.Expected.DeadLetters {
		id := "<none>"
		if d.EventID != nil {
			id = *d.EventID
		}
		wantDL = append(wantDL, id+" "+d.Reason)
	}
	sort.Strings(gotDL)
	sort.Strings(wantDL)
	if diff := cmp.Diff(wantDL, gotDL); diff != "" {
		t.Errorf("dead letters (-want +got):\n%s", diff)
	}
	if len(offsets) != 10 {
		t.Errorf("distinct dead-letter source offsets = %d, want 10", len(offsets))
	}

	// Anomalies recorded by the ingester.
	for _, c := range []struct{ key, kind string }{
		{"book:bi_sc10:v1", "key_conflict"},
		{"book:bi_sc12:v2", "blind_retry"},
		{"book:bi_sc13:v1", "contradiction"},
		{"book:bi_sc16a:v1", "duplicate_provider_reference"},
		{"book:bi_sc16b:v1", "duplicate_provider_reference"},
	} {
		n := h.Scalar(`SELECT count(*) FROM escalation e JOIN booking_attempt a ON a.id = e.attempt_id
			WHERE a.idempotency_key = $1 AND e.reason = $2 AND e.state = 'open'`, c.key, c.kind)
		if n != 1 {
			t.Errorf("%s: %d open %s escalations, want 1", c.key, n, c.kind)
		}
	}

	// Exactly one resolution per terminal attempt.
	terminal := h.Scalar(`SELECT count(*) FROM booking_attempt WHERE status IN ('CONFIRMED', 'FAILED')`)
	res := kafkatest.ReadAll(t, h.Topics.Resolutions, terminal, time.Second, 30*time.Second)
	perAttempt := map[string]map[string]bool{}
	for _, r := range res {
		var v struct{ EventID, TenantID, IdempotencyKey, Status string }
		if err := json.Unmarshal(r.Value, &v); err != nil {
			t.Fatal(err)
		}
		k := v.TenantID + "/" + v.IdempotencyKey
		if perAttempt[k] == nil {
			perAttempt[k] = map[string]bool{}
		}
		perAttempt[k][v.EventID] = true
		if kafkatest.Header(r, "ce_type") != "attempt.resolved" || kafkatest.Header(r, "ce_id") != v.EventID || string(r.Key) == "" {
			t.Errorf("resolution %s: ce headers or key wrong", v.EventID)
		}
	}
	if len(perAttempt) != terminal {
		t.Errorf("attempts with a resolution = %d, want %d terminal", len(perAttempt), terminal)
	}
	for k, ids := range perAttempt {
		if len(ids) != 1 {
			t.Errorf("%s: %d distinct resolutions, want 1", k, len(ids))
		}
	}

	// Counters.
	for _, c := range []struct {
		name string
		got  float64
		want int
	}{
		{"duplicate deliveries", metric(t, reg, "bookrecon_duplicate_deliveries_total", "topic", "booking.attempts.v1"), 3},
		{"idempotent repeats", metric(t, reg, "bookrecon_idempotent_repeats_total"), 1},
		{"key conflicts", metric(t, reg, "bookrecon_key_conflicts_total"), 1},
		{"blind retries", metric(t, reg, "bookrecon_blind_retries_total"), 2}, // sc12 v2; sc18 v2 too until the reconciler settles v1
	} {
		if int(c.got) != c.want {
			t.Errorf("%s = %v, want %d", c.name, c.got, c.want)
		}
	}
}
