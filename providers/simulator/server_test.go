package simulator_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/bookrecon/bookrecon/events"
	"github.com/bookrecon/bookrecon/providers"
	"github.com/bookrecon/bookrecon/providers/simulator"
)

// The sample's first record is at epoch; the tests rebase it to replayStart, as the demo does.
var (
	epoch       = at("2026-11-30T09:00:00Z")
	replayStart = at("2031-01-01T00:00:00Z")
	shift       = replayStart.Sub(epoch)
)

// clock is a controllable clock shared by the simulator and the adapter.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Set(t time.Time) {
	c.mu.Lock()
	c.now = t
	c.mu.Unlock()
}

func (c *clock) Advance(d time.Duration) { c.Set(c.Now().Add(d)) }

type bundle struct {
	sim   *simulator.Server
	srv   *httptest.Server
	p     providers.Provider
	clock *clock
}

// setup starts the simulator on the sample truth and map, shifted so that the sample starts at
// replayStart, with the clock 2 minutes into the replay (every sample record visible).
func setup(t *testing.T, configure ...func(*simulator.Config)) *bundle {
	t.Helper()
	truth, err := simulator.LoadTruth(sampleTruth)
	if err != nil {
		t.Fatal(err)
	}
	m, err := providers.LoadMap(sampleMap)
	if err != nil {
		t.Fatal(err)
	}
	c := &clock{now: replayStart.Add(2 * time.Minute)}
	cfg := simulator.Config{Truth: truth, Map: m, Shift: shift, Now: c.Now, Seed: 1}
	for _, f := range configure {
		f(&cfg)
	}
	b := &bundle{sim: simulator.New(cfg), clock: c}
	b.srv = httptest.NewServer(b.sim)
	t.Cleanup(b.srv.Close)
	b.p = providers.NewHTTP(b.srv.URL, b.srv.Client(), providers.WithClock(c.Now))
	return b
}

func (b *bundle) lookup(t *testing.T, provider string, kind providers.LookupKind, value string) ([]providers.Record, error) {
	t.Helper()
	return b.p.Lookup(t.Context(), providers.Query{Provider: provider, Operation: events.OpBook, Kind: kind, Value: value})
}

func refs(recs []providers.Record) []string {
	out := []string{}
	for _, r := range recs {
		out = append(out, r.ProviderReference)
	}
	return out
}

func TestSampleHotelClientReference(t *testing.T) {
	t.Parallel()
	b := setup(t)
	got, err := b.lookup(t, "sim-hotels", providers.LookupClientReference, "cr_sc03")
	if err != nil {
		t.Fatal(err)
	}
	want := []providers.Record{{
		ProviderReference: "HTL-30303", ClientReference: "cr_sc03", Status: providers.StatusConfirmed,
		CreatedAt: replayStart.Add(6 * time.Second), // 09:00:06 in the sample, shifted
		Fingerprint: events.Fingerprint(events.OpBook, &events.Request{TravellerRef: "tr_0004",
			Stay: &events.Stay{PropertyID: "h_3001", CheckIn: "2027-01-20", CheckOut: "2027-01-22"}}),
	}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("records mismatch (-want +got):\n%s", diff)
	}

	got, err = b.lookup(t, "sim-hotels", providers.LookupProviderReference, "HTL-22222")
	if err != nil || len(got) != 1 || got[0].Status != providers.StatusRejected {
		t.Errorf("HTL-22222 = %+v, %v; want one REJECTED record", got, err)
	}
	got, err = b.lookup(t, "sim-hotels", providers.LookupClientReference, "cr_sc12_v3")
	if err != nil || len(got) != 0 {
		t.Errorf("cr_sc12_v3 = %+v, %v; want not found", got, err)
	}
}

func TestSampleAirFingerprintFindsTwo(t *testing.T) {
	t.Parallel()
	b := setup(t)
	started := replayStart.Add(11 * time.Second) // sc07's attempt.started
	q := providers.Query{
		Provider: "sim-air", Operation: events.OpBook, Kind: providers.LookupFingerprint, Value: tr0008,
		From: started.Add(-10 * time.Minute), To: started.Add(10 * time.Minute),
	}
	got, err := b.p.Lookup(t.Context(), q)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"AIR-7AAAAA", "AIR-7BBBBB"}, refs(got)); diff != "" {
		t.Errorf("references mismatch (-want +got):\n%s", diff)
	}
	if r := providers.ResultOf(got, err); r != providers.ResultSeveral {
		t.Errorf("ResultOf = %q, want several", r)
	}
	for _, r := range got {
		if r.Fingerprint != tr0008 || r.Status != providers.StatusConfirmed {
			t.Errorf("record %+v", r)
		}
	}

	// A window that ends before the second record sees only the first.
	q.To = replayStart.Add(12 * time.Second)
	got, err = b.p.Lookup(t.Context(), q)
	if err != nil || cmp.Diff([]string{"AIR-7AAAAA"}, refs(got)) != "" {
		t.Errorf("narrow window = %v, %v; want [AIR-7AAAAA]", refs(got), err)
	}
}

func TestSampleLegacyHasNoLookups(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, k := range providers.LookupKinds() {
		q := providers.Query{Provider: "sim-legacy", Operation: events.OpBook, Kind: k, Value: "anything",
			From: replayStart, To: replayStart.Add(time.Minute)}
		got, err := b.p.Lookup(t.Context(), q)
		if c, _ := providers.ClassOf(err); c != providers.ClassContract || !errors.Is(err, providers.ErrUnsupportedLookup) || got != nil {
			t.Errorf("sim-legacy %s = %v, %v; want a contract error wrapping ErrUnsupportedLookup", k, got, err)
		}
	}
}

func TestSamplePayVisibleAfterItsWindow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	created := replayStart.Add(34 * time.Second)
	for _, step := range []struct {
		now  time.Time
		want []string
	}{
		{created, []string{}},
		{created.Add(2*time.Second - time.Nanosecond), []string{}},
		{created.Add(2 * time.Second), []string{"PAY-C-1414"}},
		{created.Add(time.Hour), []string{"PAY-C-1414"}},
	} {
		b.clock.Set(step.now)
		for _, k := range []struct {
			kind  providers.LookupKind
			value string
		}{{providers.LookupProviderReference, "PAY-C-1414"}, {providers.LookupClientReference, "cr_sc14_cap"}} {
			got, err := b.lookup(t, "sim-pay", k.kind, k.value)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(step.want, refs(got)); diff != "" {
				t.Errorf("at created+%s by %s (-want +got):\n%s", step.now.Sub(created), k.kind, diff)
			}
		}
	}
}

func TestUnknownProviderAndBadQueries(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.lookup(t, "sim-trains", providers.LookupProviderReference, "X")
	var pe *providers.Error
	if !errors.As(err, &pe) || pe.Class != providers.ClassContract || pe.StatusCode != 404 || !errors.Is(err, providers.ErrUnknownProvider) {
		t.Errorf("unknown provider = %v; want a 404 contract error wrapping ErrUnknownProvider", err)
	}
	for _, rawQuery := range []string{
		"kind=booking_id&value=X",
		"kind=provider_reference",
		"kind=fingerprint&value=F&from=2031-01-01T00:00:00Z",
		"kind=fingerprint&value=F&from=yesterday&to=2031-01-01T00:00:00Z",
	} {
		provider := "sim-hotels"
		if strings.Contains(rawQuery, "fingerprint") {
			provider = "sim-air"
		}
		resp, err := b.srv.Client().Get(b.srv.URL + "/v1/providers/" + provider + "/records?" + rawQuery)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 400 || !strings.Contains(string(body), `"code":"invalid_query"`) {
			t.Errorf("%s: %d %s; want 400 invalid_query", rawQuery, resp.StatusCode, body)
		}
	}
}

func TestRateLimit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	start := b.clock.Now()
	// sim-air: rps 20, burst 5. Five calls at one instant pass, the sixth is refused.
	for i := range 5 {
		if _, err := b.lookup(t, "sim-air", providers.LookupProviderReference, "AIR-6QX2PL"); err != nil {
			t.Fatalf("call %d: %v", i+1, err)
		}
	}
	_, err := b.lookup(t, "sim-air", providers.LookupProviderReference, "AIR-6QX2PL")
	if c, _ := providers.ClassOf(err); c != providers.ClassRateLimited {
		t.Fatalf("sixth call = %v, want rate_limited", err)
	}
	// One token comes back after 1/20 s; Retry-After is in whole seconds, rounded up.
	if d, ok := providers.RetryAfter(err); !ok || d != time.Second {
		t.Errorf("RetryAfter = %s, %v; want 1s", d, ok)
	}
	// Other providers have their own bucket.
	if _, err := b.lookup(t, "sim-hotels", providers.LookupProviderReference, "HTL-30303"); err != nil {
		t.Errorf("sim-hotels: %v", err)
	}
	b.clock.Advance(49 * time.Millisecond)
	if _, err := b.lookup(t, "sim-air", providers.LookupProviderReference, "AIR-6QX2PL"); !errors.Is(err, providers.ErrRateLimited) {
		t.Errorf("after 49ms = %v, want still rate limited", err)
	}
	b.clock.Advance(time.Millisecond)
	if _, err := b.lookup(t, "sim-air", providers.LookupProviderReference, "AIR-6QX2PL"); err != nil {
		t.Errorf("after 50ms = %v, want a token", err)
	}

	var got []simulator.Call
	for _, c := range b.sim.Calls() {
		if c.Provider == "sim-air" {
			got = append(got, c)
		}
	}
	ok := simulator.Call{Time: start, Provider: "sim-air", Endpoint: "records", Kind: providers.LookupProviderReference, Status: 200}
	limited := ok
	limited.Status, limited.RetryAfter, limited.Fault = 429, time.Second, simulator.FaultRateLimit
	want := []simulator.Call{ok, ok, ok, ok, ok, limited}
	limited.Time = start.Add(49 * time.Millisecond)
	ok.Time = start.Add(50 * time.Millisecond)
	want = append(want, limited, ok)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("call log mismatch (-want +got):\n%s", diff)
	}
	st := b.sim.Stats()
	if n := st.Lookups[simulator.CallKey{Provider: "sim-air", Kind: providers.LookupProviderReference, Status: 429}]; n != 2 {
		t.Errorf("429 count = %d, want 2", n)
	}
}

func TestInjectedRateLimitRetryAfter(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name   string
		faults simulator.Faults
		now    time.Time
		header string
		want   time.Duration
	}{
		{"seconds", simulator.Faults{RateLimitSeconds: 1, RetryAfter: 7 * time.Second}, replayStart, "7", 7 * time.Second},
		{"seconds rounded up", simulator.Faults{RateLimitSeconds: 1, RetryAfter: 2500 * time.Millisecond}, replayStart, "3", 3 * time.Second},
		{"seconds default", simulator.Faults{RateLimitSeconds: 1}, replayStart, "1", time.Second},
		{"HTTP date", simulator.Faults{RateLimitDate: 1, RetryAfter: 7 * time.Second}, replayStart,
			"Wed, 01 Jan 2031 00:00:07 GMT", 7 * time.Second},
		{"HTTP date from a fractional now", simulator.Faults{RateLimitDate: 1, RetryAfter: 7 * time.Second},
			replayStart.Add(250 * time.Millisecond), "Wed, 01 Jan 2031 00:00:08 GMT", 7750 * time.Millisecond},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, func(c *simulator.Config) { c.Faults = tt.faults })
			b.clock.Set(tt.now)

			resp, err := b.srv.Client().Get(b.srv.URL + "/v1/providers/sim-hotels/records?kind=provider_reference&value=HTL-30303")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != tt.header {
				t.Errorf("answer = %d Retry-After %q; want 429 %q", resp.StatusCode, resp.Header.Get("Retry-After"), tt.header)
			}

			_, err = b.lookup(t, "sim-hotels", providers.LookupProviderReference, "HTL-30303")
			var pe *providers.Error
			if !errors.As(err, &pe) || pe.Class != providers.ClassRateLimited || pe.StatusCode != 429 || pe.RetryAfter != tt.want {
				t.Errorf("Lookup = %v; want rate_limited with RetryAfter %s", err, tt.want)
			}
			for _, c := range b.sim.Calls() {
				if c.RetryAfter != tt.want {
					t.Errorf("logged RetryAfter = %s, want %s", c.RetryAfter, tt.want)
				}
			}
		})
	}
}

func TestInjectedFaults(t *testing.T) {
	t.Parallel()
	t.Run("5xx", func(t *testing.T) {
		t.Parallel()
		b := setup(t, func(c *simulator.Config) { c.Faults = simulator.Faults{ServerError: 1} })
		_, err := b.lookup(t, "sim-hotels", providers.LookupClientReference, "cr_sc03")
		var pe *providers.Error
		if !errors.As(err, &pe) || pe.Class != providers.ClassServer || pe.StatusCode != 503 {
			t.Errorf("Lookup = %v, want a 503 server error", err)
		}
	})
	t.Run("stale not found", func(t *testing.T) {
		t.Parallel()
		b := setup(t, func(c *simulator.Config) { c.Faults = simulator.Faults{StaleNotFound: 1} })
		got, err := b.lookup(t, "sim-hotels", providers.LookupClientReference, "cr_sc03")
		if err != nil || len(got) != 0 {
			t.Errorf("Lookup = %v, %v; want an empty answer", got, err)
		}
	})
	t.Run("connection reset", func(t *testing.T) {
		t.Parallel()
		b := setup(t, func(c *simulator.Config) { c.Faults = simulator.Faults{ConnectionReset: 1} })
		_, err := b.lookup(t, "sim-hotels", providers.LookupClientReference, "cr_sc03")
		var pe *providers.Error
		if !errors.As(err, &pe) || pe.Class != providers.ClassTimeout || pe.StatusCode != 0 {
			t.Errorf("Lookup = %v, want a timeout with no status", err)
		}
		for _, c := range b.sim.Calls() {
			if c.Fault != simulator.FaultConnectionReset || c.Status != simulator.StatusNoAnswer {
				t.Errorf("call %+v", c)
			}
		}
	})
	t.Run("slow answer the client gives up on", func(t *testing.T) {
		t.Parallel()
		b := setup(t, func(c *simulator.Config) { c.Faults = simulator.Faults{Slow: 1, SlowDelay: time.Hour} })
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
		defer cancel()
		_, err := b.p.Lookup(ctx, providers.Query{Provider: "sim-hotels", Operation: events.OpBook, Kind: providers.LookupClientReference, Value: "cr_sc03"})
		if c, _ := providers.ClassOf(err); c != providers.ClassTimeout || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Lookup = %v, want a timeout on the context deadline", err)
		}
		b.srv.Close() // waits for the handler to notice
		if calls := b.sim.Calls(); len(calls) != 1 || calls[0].Status != simulator.StatusClientClosed || calls[0].Fault != simulator.FaultSlow {
			t.Errorf("calls = %+v", calls)
		}
	})
	t.Run("slow answer that arrives", func(t *testing.T) {
		t.Parallel()
		b := setup(t, func(c *simulator.Config) { c.Faults = simulator.Faults{Slow: 1, SlowDelay: time.Millisecond} })
		got, err := b.lookup(t, "sim-hotels", providers.LookupClientReference, "cr_sc03")
		if err != nil || cmp.Diff([]string{"HTL-30303"}, refs(got)) != "" {
			t.Errorf("Lookup = %v, %v; want HTL-30303", refs(got), err)
		}
	})
	t.Run("only the providers named", func(t *testing.T) {
		t.Parallel()
		b := setup(t, func(c *simulator.Config) {
			c.Faults = simulator.Faults{ServerError: 1, Providers: []string{"sim-air"}}
		})
		if _, err := b.lookup(t, "sim-hotels", providers.LookupClientReference, "cr_sc03"); err != nil {
			t.Errorf("sim-hotels: %v", err)
		}
		if _, err := b.lookup(t, "sim-air", providers.LookupProviderReference, "AIR-6QX2PL"); !errors.Is(err, providers.ErrServer) {
			t.Errorf("sim-air: %v, want 5xx", err)
		}
	})
}

// faultSequence makes n calls to sim-hotels, one second apart, and returns the faults applied.
func faultSequence(t *testing.T, seed int64, n int) []simulator.Fault {
	t.Helper()
	b := setup(t, func(c *simulator.Config) {
		c.Seed = seed
		c.Faults = simulator.Faults{ServerError: 0.25, StaleNotFound: 0.25, RateLimitSeconds: 0.25}
	})
	for range n {
		_, _ = b.lookup(t, "sim-hotels", providers.LookupClientReference, "cr_sc03")
		b.clock.Advance(time.Second)
	}
	var out []simulator.Fault
	for _, c := range b.sim.Calls() {
		out = append(out, c.Fault)
	}
	return out
}

func TestFaultsAreDeterministicForASeed(t *testing.T) {
	t.Parallel()
	first := faultSequence(t, 42, 40)
	second := faultSequence(t, 42, 40)
	if diff := cmp.Diff(first, second); diff != "" {
		t.Errorf("same seed, different faults (-first +second):\n%s", diff)
	}
	seen := map[simulator.Fault]int{}
	for _, f := range first {
		seen[f]++
	}
	for _, f := range []simulator.Fault{simulator.FaultNone, simulator.FaultServerError, simulator.FaultStaleNotFound, simulator.FaultRateLimitSeconds} {
		if seen[f] == 0 {
			t.Errorf("fault %q never drawn in 40 calls: %v", f, seen)
		}
	}
	if other := faultSequence(t, 7, 40); cmp.Equal(first, other) {
		t.Error("seeds 42 and 7 gave the same 40 faults")
	}
}

func do(t *testing.T, b *bundle, method, path, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, b.srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := b.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(out)
}

func TestAdminFaults(t *testing.T) {
	t.Parallel()
	b := setup(t)
	status, body := do(t, b, http.MethodPut, "/admin/faults",
		`{"providers":["sim-pay"],"serverError":0.1,"slow":0.2,"slowDelay":"1500ms","rateLimitDate":0.3,"retryAfter":"4s","connectionReset":0.05}`)
	if status != 200 {
		t.Fatalf("PUT /admin/faults = %d %s", status, body)
	}
	want := simulator.Faults{Providers: []string{"sim-pay"}, ServerError: 0.1, Slow: 0.2, SlowDelay: 1500 * time.Millisecond,
		RateLimitDate: 0.3, RetryAfter: 4 * time.Second, ConnectionReset: 0.05}
	if diff := cmp.Diff(want, b.sim.Faults()); diff != "" {
		t.Errorf("Faults() mismatch (-want +got):\n%s", diff)
	}
	status, body = do(t, b, http.MethodGet, "/admin/faults", "")
	var got simulator.Faults
	if err := json.Unmarshal([]byte(body), &got); status != 200 || err != nil {
		t.Fatalf("GET /admin/faults = %d %s (%v)", status, body, err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("GET /admin/faults mismatch (-want +got):\n%s", diff)
	}

	for _, bad := range []string{
		`{"serverError":1.5}`,
		`{"serverError":0.6,"slow":0.6}`,
		`{"slowDelay":"soon"}`,
		`{"retryAfter":"-1s"}`,
		`{"explode":1}`,
		`not json`,
	} {
		if status, body := do(t, b, http.MethodPut, "/admin/faults", bad); status != 400 || !strings.Contains(body, "invalid_faults") {
			t.Errorf("PUT %s = %d %s; want 400", bad, status, body)
		}
	}
	if diff := cmp.Diff(want, b.sim.Faults()); diff != "" {
		t.Errorf("a rejected PUT changed the faults (-want +got):\n%s", diff)
	}
	if err := b.sim.SetFaults(simulator.Faults{}); err != nil {
		t.Fatal(err)
	}
	if err := b.sim.SetFaults(simulator.Faults{StaleNotFound: -0.1}); err == nil {
		t.Error("SetFaults accepted a negative probability")
	}
}

func TestFaultsValidateReportsEveryProblem(t *testing.T) {
	t.Parallel()
	err := simulator.Faults{ServerError: 2, Slow: 0.9, ConnectionReset: 0.9, SlowDelay: -time.Second, RetryAfter: -time.Second}.Validate()
	want := "simulator: invalid faults: serverError: probability 2 outside [0, 1]\n" +
		"probabilities add up to 1.8, more than 1\nslowDelay: negative -1s\nretryAfter: negative -1s"
	if err == nil || err.Error() != want {
		t.Errorf("Validate() = %v, want %q", err, want)
	}
}

func TestAdminTruth(t *testing.T) {
	t.Parallel()
	b := setup(t)
	now := b.clock.Now()
	// Records added at run time keep their absolute createdAt (no shift); a missing one is now.
	status, body := do(t, b, http.MethodPost, "/admin/truth", fmt.Sprintf(`{
		"sim-air": [{"providerReference":"AIR-NEW001","clientReference":null,"status":"PENDING","createdAt":%q,
		             "fingerprint":{"travellerRef":"tr_0008","segments":[{"from":"SAW","to":"AMS","date":"2027-02-02","flight":"XQ310"}]}}],
		"sim-hotels": [{"providerReference":"HTL-NEW","clientReference":"cr_new","status":"CONFIRMED","fingerprint":null}]
	}`, now.Format(time.RFC3339)))
	if status != 201 || !strings.Contains(body, `"added":2`) {
		t.Fatalf("POST /admin/truth = %d %s", status, body)
	}
	got, err := b.lookup(t, "sim-hotels", providers.LookupClientReference, "cr_new")
	want := []providers.Record{{ProviderReference: "HTL-NEW", ClientReference: "cr_new", Status: providers.StatusConfirmed, CreatedAt: now}}
	if diff := cmp.Diff(want, got); err != nil || diff != "" {
		t.Errorf("HTL-NEW (%v) mismatch (-want +got):\n%s", err, diff)
	}
	// sim-air's 3 s consistency window applies to it too.
	if got, err := b.lookup(t, "sim-air", providers.LookupProviderReference, "AIR-NEW001"); err != nil || len(got) != 0 {
		t.Errorf("AIR-NEW001 before its window = %v, %v; want not found", refs(got), err)
	}
	b.clock.Advance(3 * time.Second)
	got, err = b.p.Lookup(t.Context(), providers.Query{Provider: "sim-air", Operation: events.OpBook, Kind: providers.LookupFingerprint,
		Value: tr0008, From: now.Add(-time.Minute), To: now.Add(time.Minute)})
	if err != nil || cmp.Diff([]string{"AIR-NEW001"}, refs(got)) != "" {
		t.Errorf("fingerprint after the window = %v, %v; want [AIR-NEW001]", refs(got), err)
	}

	for _, bad := range []string{
		`{"sim-trains":[{"providerReference":"T-1","status":"PENDING"}]}`,
		`{"sim-hotels":[{"providerReference":"HTL-30303","status":"PENDING"}]}`,
		`{"sim-hotels":[{"providerReference":"HTL-X","status":"MAYBE"}]}`,
	} {
		if status, body := do(t, b, http.MethodPost, "/admin/truth", bad); status != 400 || !strings.Contains(body, "invalid_truth") {
			t.Errorf("POST %s = %d %s; want 400", bad, status, body)
		}
	}
}

func TestCreateEndpointIsForbiddenAndCounted(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if status, _ := do(t, b, http.MethodPost, "/v1/providers/sim-hotels/bookings", `{}`); status != 403 {
		t.Errorf("POST bookings = %d, want 403", status)
	}
	if _, err := b.lookup(t, "sim-hotels", providers.LookupClientReference, "cr_sc03"); err != nil {
		t.Fatal(err)
	}
	want := simulator.Stats{
		Lookups: map[simulator.CallKey]int{{Provider: "sim-hotels", Kind: providers.LookupClientReference, Status: 200}: 1},
		Creates: map[string]int{"sim-hotels": 1},
	}
	if diff := cmp.Diff(want, b.sim.Stats()); diff != "" {
		t.Errorf("Stats() mismatch (-want +got):\n%s", diff)
	}

	status, body := do(t, b, http.MethodGet, "/admin/stats", "")
	if status != 200 || body != `{"lookups":[{"provider":"sim-hotels","kind":"client_reference","status":200,"count":1}],"creates":{"sim-hotels":1}}`+"\n" {
		t.Errorf("GET /admin/stats = %d %s", status, body)
	}
	status, body = do(t, b, http.MethodGet, "/admin/calls", "")
	var calls []simulator.Call
	if err := json.Unmarshal([]byte(body), &calls); status != 200 || err != nil || len(calls) != 2 || calls[0].Endpoint != "bookings" {
		t.Errorf("GET /admin/calls = %d %s", status, body)
	}
	if status, _ := do(t, b, http.MethodGet, "/healthz", ""); status != 200 {
		t.Errorf("GET /healthz = %d", status)
	}
}

func TestNewRequiresAMap(t *testing.T) {
	t.Parallel()
	defer func() {
		if recover() == nil {
			t.Error("New without a Map did not panic")
		}
	}()
	simulator.New(simulator.Config{})
}

func TestShiftLeavesTheTruthUntouched(t *testing.T) {
	t.Parallel()
	truth, err := simulator.LoadTruth(sampleTruth)
	if err != nil {
		t.Fatal(err)
	}
	m, err := providers.LoadMap(sampleMap)
	if err != nil {
		t.Fatal(err)
	}
	simulator.New(simulator.Config{Truth: truth, Map: m, Shift: time.Hour})
	if got := truth["sim-pay"][0].CreatedAt; !got.Equal(at("2026-11-30T09:00:34Z")) {
		t.Errorf("New moved the caller's truth: %s", got)
	}
}
