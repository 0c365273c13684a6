package reconcile_test

import (
	"context"
	"encoding/json"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/bookrecon/bookrecon/events"
	"github.com/bookrecon/bookrecon/internal/harness/pgtest"
	"github.com/bookrecon/bookrecon/internal/harness/samples"
	"github.com/bookrecon/bookrecon/internal/publish"
	"github.com/bookrecon/bookrecon/providers/simulator"
)

// expectedAttempt is one entry of samples/expected.json "attempts".
type expectedAttempt struct {
	TenantID          string `json:"tenantId"`
	IdempotencyKey    string `json:"idempotencyKey"`
	Status            string `json:"status"`
	ResolutionSource  string `json:"resolutionSource"`
	ProviderReference string `json:"providerReference"`
}

type attemptID struct{ tenant, key string }

// TestSampleLookupsSettleAsExpected is the fast, clock-driven version of the sample run for the
// reconciler alone: the events of every sample attempt that expected.json settles by a lookup
// (client_reference, provider_reference, fingerprint, authoritative_not_found), plus sc07
// (ambiguous) and sc08 (fingerprint not found, never authoritative), are applied at their
// shifted times on a controllable clock, against the simulator loaded with the sample truth and
// capability map under the same shift. The clock moves in 250 ms steps to 150 s after the first
// record (samples/README.md asserts between 120 s and 180 s).
func TestSampleLookupsSettleAsExpected(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	m := mapPath(t)

	var exp struct {
		Attempts []expectedAttempt `json:"attempts"`
	}
	readJSON(t, "expected.json", &exp)
	byLookup := map[string]bool{"client_reference": true, "provider_reference": true, "fingerprint": true, "authoritative_not_found": true}
	want := map[attemptID]expectedAttempt{}
	for _, a := range exp.Attempts {
		if byLookup[a.ResolutionSource] {
			want[attemptID{a.TenantID, a.IdempotencyKey}] = a
		}
	}
	sc07 := attemptID{"t_globetrek", "book:bi_sc07:v1"}
	sc08 := attemptID{"t_globetrek", "book:bi_sc08:v1"}
	for _, id := range []attemptID{sc07, sc08} {
		want[id] = expectedAttempt{TenantID: id.tenant, IdempotencyKey: id.key, Status: "UNKNOWN"}
	}
	// The scenarios the brief names must be among them, exactly as expected.json has them.
	for id, w := range map[attemptID]expectedAttempt{
		{"t_globetrek", "book:bi_sc04:v1"}: {Status: "FAILED", ResolutionSource: "authoritative_not_found"},
		{"t_globetrek", "book:bi_sc18:v1"}: {Status: "FAILED", ResolutionSource: "authoritative_not_found"},
		{"t_globetrek", "book:bi_sc06:v1"}: {Status: "CONFIRMED", ResolutionSource: "fingerprint", ProviderReference: "AIR-6QX2PL"},
		{"t_globetrek", "book:bi_sc22:v1"}: {Status: "FAILED", ResolutionSource: "client_reference", ProviderReference: "HTL-22222"},
	} {
		got := want[id]
		if got.Status != w.Status || got.ResolutionSource != w.ResolutionSource || got.ProviderReference != w.ProviderReference {
			t.Fatalf("expected.json %v = %+v; the brief says %+v", id, got, w)
		}
	}
	if len(want) != 10 {
		t.Fatalf("%d attempts selected from expected.json, want 10 (8 settled by lookup, sc07, sc08)", len(want))
	}

	// The events of those attempts, in file order, shifted so the first record is "now";
	// redeliveries (same eventId) are applied once, as the ingester's dedup would.
	path, err := samples.Path("attempts.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	lines, err := publish.ReadLines(path)
	if err != nil {
		t.Fatal(err)
	}
	epoch, ok := publish.Epoch(lines)
	if !ok {
		t.Fatal("attempts.jsonl has no occurredAt")
	}
	start := time.Now().UTC().Truncate(time.Millisecond)
	shift := start.Sub(epoch)
	type timed struct {
		at  time.Time
		raw []byte
	}
	var evs []timed
	seen := map[string]bool{}
	for _, l := range lines {
		var env struct{ EventID, TenantID, IdempotencyKey string }
		if json.Unmarshal(l, &env) != nil {
			continue // the invalid records are the ingester's
		}
		if _, ok := want[attemptID{env.TenantID, env.IdempotencyKey}]; !ok || seen[env.EventID] {
			continue
		}
		seen[env.EventID] = true
		s := publish.Shift(l, shift)
		at, _ := publish.OccurredAt(s)
		evs = append(evs, timed{at, s})
	}

	truthPath, err := samples.Path("provider-truth.json")
	if err != nil {
		t.Fatal(err)
	}
	truth, err := simulator.LoadTruth(truthPath)
	if err != nil {
		t.Fatal(err)
	}
	clk := newStepClock(start)
	sim := simulator.New(simulator.Config{Truth: truth, Map: m, Shift: shift, Now: clk.Now})
	prov := startSim(t, sim, clk)
	// inProgressTimeout stays at its 15 min default: created_at is PostgreSQL's clock, which
	// this test outruns, so the demo's 60 s would turn sc22 stale before its outcome arrives.
	rec, reg := newReconciler(t, demoConfig(m), pool, prov, clk)
	scfg := storeConfig(m)

	next := 0
	for end := start.Add(150 * time.Second); clk.Now().Before(end); clk.Add(250 * time.Millisecond) {
		for next < len(evs) && !evs[next].at.After(clk.Now()) {
			applyEvent(t, ctx, pool, scfg, evs[next].raw)
			next++
		}
		drain(t, ctx, rec)
	}
	if next != len(evs) {
		t.Fatalf("applied %d of %d events", next, len(evs))
	}

	res := resolutions(t, ctx, pool)
	for id, w := range want {
		got := readRow(t, ctx, pool, id.tenant, id.key)
		if got.Status != w.Status || got.Source != w.ResolutionSource || got.Ref != w.ProviderReference {
			t.Errorf("%s: status/source/ref = %s/%s/%q, want %s/%s/%q", id.key, got.Status, got.Source, got.Ref,
				w.Status, w.ResolutionSource, w.ProviderReference)
		}
		var mine []events.Resolved
		for _, r := range res {
			if r.TenantID == id.tenant && r.IdempotencyKey == id.key {
				mine = append(mine, r)
			}
		}
		tr := transitions(t, ctx, pool, got.ID)
		if w.Status == "UNKNOWN" {
			if len(mine) != 0 {
				t.Errorf("%s: %d resolutions, want none", id.key, len(mine))
			}
			continue
		}
		if len(mine) != 1 {
			t.Fatalf("%s: %d attempt.resolved records, want 1", id.key, len(mine))
		}
		r := mine[0]
		wantCode := map[string]string{"authoritative_not_found": "NOT_FOUND", "client_reference": "REJECTED"}[w.ResolutionSource]
		if w.Status == "CONFIRMED" {
			wantCode = ""
		}
		if r.Status != w.Status || r.ResolutionSource != w.ResolutionSource || deref(r.ProviderReference) != w.ProviderReference ||
			deref(r.FailureCode) != wantCode {
			t.Errorf("%s: attempt.resolved = %s/%s/%q/%q, want %s/%s/%q/%q", id.key, r.Status, r.ResolutionSource,
				deref(r.ProviderReference), deref(r.FailureCode), w.Status, w.ResolutionSource, w.ProviderReference, wantCode)
		}
		// The audit trail names the lookup that settled it: exactly one UNKNOWN → terminal row.
		var settled []transition
		for _, x := range tr {
			if x.From == "UNKNOWN" && x.To == w.Status {
				settled = append(settled, x)
			}
		}
		if len(settled) != 1 || settled[0].Cause != "lookup" {
			t.Errorf("%s: settling transitions %+v, want one caused by a lookup", id.key, settled)
			continue
		}
		kind := settled[0].Lookup["kind"]
		wantKind := w.ResolutionSource
		if wantKind == "authoritative_not_found" {
			wantKind = "client_reference"
		}
		if kind != wantKind {
			t.Errorf("%s: settled by a %v lookup, want %s", id.key, kind, wantKind)
		}
	}
	if len(res) != 8 {
		t.Errorf("%d attempt.resolved records, want 8", len(res))
	}

	// sc07: two fingerprint matches → never guess: UNKNOWN, ambiguous_match, checks go on.
	got07 := readRow(t, ctx, pool, sc07.tenant, sc07.key)
	if got07.LastLookup != "several" || got07.CheckCount < 2 || got07.NextCheck == nil {
		t.Errorf("sc07: last lookup %q after %d checks, next %v; want several, ≥ 2 checks, a next check", got07.LastLookup,
			got07.CheckCount, got07.NextCheck)
	}
	// sc08: a fingerprint not-found is never authoritative; its deadline is the escalator's.
	got08 := readRow(t, ctx, pool, sc08.tenant, sc08.key)
	if got08.LastLookup != "not_found" || got08.CheckCount < 5 {
		t.Errorf("sc08: last lookup %q after %d checks; want not_found, ≥ 5 checks", got08.LastLookup, got08.CheckCount)
	}
	wantEsc := []escalation{{"t_globetrek", "book:bi_sc07:v1", "ambiguous_match", "open"}}
	if got := escalations(t, ctx, pool); !slices.Equal(got, wantEsc) {
		t.Errorf("escalations = %+v, want %+v", got, wantEsc)
	}
	if n := count(t, ctx, pool, `SELECT count(*) FROM outbox WHERE topic = $1`, events.TopicEscalations); n != 1 {
		t.Errorf("%d escalation records in the outbox, want 1 (sc07 ambiguous_match opened once)", n)
	}
	if n := metric(t, reg, "bookrecon_lease_lost_total"); n != 0 {
		t.Errorf("lease lost %v times with one reconciler", n)
	}
	if st := sim.Stats(); len(st.Creates) != 0 {
		t.Errorf("provider create calls: %v", st.Creates)
	}
}

func readJSON(t testing.TB, name string, v any) {
	t.Helper()
	p, err := samples.Path(name)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatal(err)
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
