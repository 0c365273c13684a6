package idempotency

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// hold makes a handler wait: it signals entered, then waits for release.
type hold struct {
	entered chan struct{}
	release chan struct{}
}

func newHold() *hold { return &hold{entered: make(chan struct{}, 1), release: make(chan struct{})} }

// twoPhase is a two-phase handler whose external effect is counted in f.execs; answer writes
// its answer (nil: 201 created with Location for run n).
func (f *fixture) twoPhase(h *hold, answer func(w http.ResponseWriter, r *http.Request, run int64)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := f.execs.Add(1)
		if h != nil {
			h.entered <- struct{}{}
			<-h.release
		}
		if answer != nil {
			answer(w, r, n)
			return
		}
		created(w, n, n)
	})
}

// twoPhaseConfig: a 5 s handler bound and a 6 s lease.
var twoPhaseConfig = Config{RequestTimeout: 5 * time.Second, LeaseMargin: time.Second}

const route2 = "POST /v1/things"

// row is idempotency_key's row of (t_a, svc_1, key) as text, to compare before and after.
func (f *fixture) row(key string) string {
	f.t.Helper()
	var s string
	err := f.pool.QueryRow(context.Background(), `SELECT k::text FROM idempotency_key k
		WHERE tenant_id = 't_a' AND principal = 'svc_1' AND idem_key = $1`, key).Scan(&s)
	if err != nil {
		return "none: " + err.Error()
	}
	return s
}

// TestTwoPhaseTable walks docs/design.md's Idempotency-Key table row by row through real HTTP in
// the two-phase mode.
func TestTwoPhaseTable(t *testing.T) {
	t.Parallel()

	t.Run("none/any: execute", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		srv := serve(t, f.guard(twoPhaseConfig).TwoPhase(route2, f.twoPhase(nil, nil)))
		wantCreated(t, f.do(srv, req{Key: "k1", Body: `{"a":1}`}), 1)
		var state string
		var token, lease bool
		if err := f.pool.QueryRow(context.Background(), `SELECT state, token IS NOT NULL, lease_expires_at IS NOT NULL
			FROM idempotency_key`).Scan(&state, &token, &lease); err != nil {
			t.Fatal(err)
		}
		if state != "completed" || !token || !lease || f.execs.Load() != 1 || f.records() != 1 {
			t.Fatalf("state %s token %v lease %v execs %d records %d, want completed with token and lease, 1, 1", state, token, lease, f.execs.Load(), f.records())
		}
		if f.requests(route2, ResultExecuted) != 1 {
			t.Fatalf("executed = %d, want 1", f.requests(route2, ResultExecuted))
		}
	})

	t.Run("in flight, lease valid/same: 409 request_in_progress with Retry-After", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		h := newHold()
		srv := serve(t, f.guard(twoPhaseConfig).TwoPhase(route2, f.twoPhase(h, nil)))
		first := make(chan resp)
		go func() { first <- f.do(srv, req{Key: "k1", Body: `{"a":1}`}) }()
		<-h.entered
		f.clock.Advance(5 * time.Second) // still under the 6 s lease
		dup := f.do(srv, req{Key: "k1", Body: `{"a":1}`})
		wantProblem(t, dup, http.StatusConflict, CodeInProgress)
		if dup.Header.Get("Retry-After") != "1" {
			t.Fatalf("Retry-After %q, want 1", dup.Header.Get("Retry-After"))
		}
		close(h.release)
		wantCreated(t, <-first, 1)
		wantReplay(t, f.do(srv, req{Key: "k1", Body: `{"a":1}`}), 1)
		if f.execs.Load() != 1 || f.requests(route2, ResultInProgress) != 1 || f.requests(route2, ResultReplayed) != 1 {
			t.Fatalf("execs %d in_progress %d replayed %d, want 1 1 1", f.execs.Load(), f.requests(route2, ResultInProgress), f.requests(route2, ResultReplayed))
		}
	})

	t.Run("in flight, lease expired/same: 409 request_outcome_unknown, never re-executed; the late completion is stored", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		h := newHold()
		srv := serve(t, f.guard(twoPhaseConfig).TwoPhase(route2, f.twoPhase(h, nil)))
		first := make(chan resp)
		go func() { first <- f.do(srv, req{Key: "k1", Body: `{"a":1}`}) }()
		<-h.entered
		f.clock.Advance(6 * time.Second) // the lease ends
		for range 2 {
			dup := f.do(srv, req{Key: "k1", Body: `{"a":1}`})
			wantProblem(t, dup, http.StatusConflict, CodeOutcomeUnknown)
			if dup.Header.Get("Retry-After") != "" {
				t.Fatalf("outcome unknown carries Retry-After %q", dup.Header.Get("Retry-After"))
			}
		}
		close(h.release) // the completion arrives after the lease: its token still owns the row
		wantCreated(t, <-first, 1)
		wantReplay(t, f.do(srv, req{Key: "k1", Body: `{"a":1}`}), 1)
		if f.execs.Load() != 1 || f.requests(route2, ResultOutcomeUnknown) != 2 {
			t.Fatalf("execs %d outcome_unknown %d, want 1 2", f.execs.Load(), f.requests(route2, ResultOutcomeUnknown))
		}
	})

	t.Run("completed/same: the stored status, headers and body with Idempotent-Replayed", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		srv := serve(t, f.guard(twoPhaseConfig).TwoPhase(route2, f.twoPhase(nil, nil)))
		firstAnswer := f.do(srv, req{Key: "k1", Body: `{"a":1}`})
		wantCreated(t, firstAnswer, 1)
		if firstAnswer.Header.Get("X-Run") != "1" {
			t.Fatalf("first answer X-Run %q, want 1", firstAnswer.Header.Get("X-Run"))
		}
		f.clock.Advance(DefaultTTL - time.Second) // replayed for the whole TTL
		for range 2 {
			wantReplay(t, f.do(srv, req{Key: "k1", Body: `{ "a" : 1 }`}), 1) // same JSON, other layout
		}
		// A quoted key is the same key.
		wantReplay(t, f.do(srv, req{Key: `"k1"`, Body: `{"a":1}`}), 1)
		if f.execs.Load() != 1 || f.requests(route2, ResultReplayed) != 3 {
			t.Fatalf("execs %d replayed %d, want 1 3", f.execs.Load(), f.requests(route2, ResultReplayed))
		}
	})

	t.Run("any/other fingerprint: 422, nothing executed, the record unchanged", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		h := newHold()
		srv := serve(t, f.guard(twoPhaseConfig).TwoPhase(route2, f.twoPhase(h, nil)))
		first := make(chan resp)
		go func() { first <- f.do(srv, req{Key: "k1", Body: `{"a":1}`}) }()
		<-h.entered
		inFlight := f.row("k1")
		for _, q := range []req{{Key: "k1", Body: `{"a":2}`}, {Key: "k1", Body: `{"a":1}`, Path: "/v1/other"}} {
			wantProblem(t, f.do(srv, q), http.StatusUnprocessableEntity, CodeKeyReused)
		}
		if got := f.row("k1"); got != inFlight {
			t.Fatalf("the in-flight record changed:\n%s\nwant\n%s", got, inFlight)
		}
		close(h.release)
		wantCreated(t, <-first, 1)
		completed := f.row("k1")
		wantProblem(t, f.do(srv, req{Key: "k1", Body: `{"a":2}`}), http.StatusUnprocessableEntity, CodeKeyReused)
		if got := f.row("k1"); got != completed {
			t.Fatalf("the completed record changed:\n%s\nwant\n%s", got, completed)
		}
		if f.execs.Load() != 1 || f.requests(route2, ResultKeyReused) != 3 {
			t.Fatalf("execs %d key_reused %d, want 1 3", f.execs.Load(), f.requests(route2, ResultKeyReused))
		}
	})

	t.Run("no key: 400 idempotency_key_missing", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		srv := serve(t, f.guard(twoPhaseConfig).TwoPhase(route2, f.twoPhase(nil, nil)))
		wantProblem(t, f.do(srv, req{Key: "-", Body: `{"a":1}`}), http.StatusBadRequest, CodeKeyMissing)
		if f.execs.Load() != 0 || f.records() != 0 {
			t.Fatalf("execs %d records %d, want 0 0", f.execs.Load(), f.records())
		}
	})

	t.Run("stored: 2xx and a kept key_conflict", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		srv := serve(t, f.guard(twoPhaseConfig).TwoPhase(route2, f.twoPhase(nil, func(w http.ResponseWriter, r *http.Request, _ int64) {
			KeepAnswer(r.Context())
			problem(w, http.StatusConflict, "key_conflict", "the operation exists with another request", 0)
		})))
		for i, wantReplayed := range []string{"", "true"} {
			got := f.do(srv, req{Key: "k1", Body: `{"a":1}`})
			if got.Status != 409 || problemCode(got.Body) != "key_conflict" || got.Header.Get(HeaderReplayed) != wantReplayed ||
				got.Header.Get("Content-Type") != "application/problem+json" {
				t.Fatalf("answer %d: %d %q %q replayed %q, want 409 key_conflict replayed %q", i, got.Status, got.Body,
					got.Header.Get("Content-Type"), got.Header.Get(HeaderReplayed), wantReplayed)
			}
		}
		if f.execs.Load() != 1 {
			t.Fatalf("execs %d, want 1", f.execs.Load())
		}
	})

	t.Run("rolled back with the claim: 404, gate_refused, a 5xx marked ReleaseClaim; the retry is processed afresh", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		answers := []int{http.StatusNotFound, http.StatusConflict, http.StatusServiceUnavailable}
		srv := serve(t, f.guard(twoPhaseConfig).TwoPhase(route2, f.twoPhase(nil, func(w http.ResponseWriter, r *http.Request, n int64) {
			if int(n) <= len(answers) {
				if answers[n-1] >= 500 {
					ReleaseClaim(r.Context()) // failed before the external call began
				}
				problem(w, answers[n-1], "rolled_back", "", 0)
				return
			}
			created(w, n, n)
		})))
		for i, want := range answers {
			got := f.do(srv, req{Key: "k1", Body: `{"a":1}`})
			if got.Status != want || got.Header.Get(HeaderReplayed) != "" {
				t.Fatalf("answer %d: %d replayed %q, want %d not replayed", i, got.Status, got.Header.Get(HeaderReplayed), want)
			}
			if f.records() != 0 {
				t.Fatalf("after a %d the claim is still there", want)
			}
		}
		wantCreated(t, f.do(srv, req{Key: "k1", Body: `{"a":1}`}), 4)
		if f.execs.Load() != 4 || f.requests(route2, ResultExecuted) != 4 {
			t.Fatalf("execs %d executed %d, want 4 4", f.execs.Load(), f.requests(route2, ResultExecuted))
		}
	})

	t.Run("a 5xx after the external call began: the claim stays in flight, never a second call", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		// The provider booked, then the handler gave up waiting for its answer (504), as a
		// handler bounded by its own timeout does.
		srv := serve(t, f.guard(twoPhaseConfig).TwoPhase(route2, f.twoPhase(nil, func(w http.ResponseWriter, r *http.Request, n int64) {
			problem(w, http.StatusGatewayTimeout, "provider_timeout", "", 0)
		})))
		got := f.do(srv, req{Key: "k1", Body: `{"a":1}`})
		if got.Status != http.StatusGatewayTimeout || got.Header.Get(HeaderReplayed) != "" {
			t.Fatalf("first answer %d replayed %q, want 504 not replayed", got.Status, got.Header.Get(HeaderReplayed))
		}
		var state string
		if err := f.pool.QueryRow(context.Background(), `SELECT state FROM idempotency_key`).Scan(&state); err != nil || state != "in_flight" {
			t.Fatalf("record state %q (%v), want in_flight", state, err)
		}
		wantProblem(t, f.do(srv, req{Key: "k1", Body: `{"a":1}`}), http.StatusConflict, CodeInProgress)
		f.clock.Advance(twoPhaseConfig.RequestTimeout + twoPhaseConfig.LeaseMargin) // the lease ends
		wantProblem(t, f.do(srv, req{Key: "k1", Body: `{"a":1}`}), http.StatusConflict, CodeOutcomeUnknown)
		if f.execs.Load() != 1 || f.records() != 1 || f.requests(route2, ResultExecuted) != 1 {
			t.Fatalf("execs %d records %d executed %d, want 1 1 1", f.execs.Load(), f.records(), f.requests(route2, ResultExecuted))
		}
		if !strings.Contains(f.log.String(), "a 5xx answer leaves its claim in flight") {
			t.Fatalf("log %q lacks the in-flight warning", f.log.String())
		}
	})

	t.Run("never claimed: 400, 401, 413", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		g := f.guard(Config{RequestTimeout: 5 * time.Second, LeaseMargin: time.Second, MaxBody: 16})
		refuse := WithFingerprint(func(r *http.Request, route string, body []byte) (Fingerprint, error) {
			if strings.Contains(string(body), "bad") {
				return Fingerprint{}, fmt.Errorf("not a thing")
			}
			return DefaultFingerprint(r, route, body)
		})
		srv := serve(t, g.TwoPhase(route2, f.twoPhase(nil, nil), refuse))
		wantProblem(t, f.do(srv, req{Key: "a b", Body: `{}`}), http.StatusBadRequest, CodeKeyInvalid)
		wantProblem(t, f.do(srv, req{Key: strings.Repeat("k", 256), Body: `{}`}), http.StatusBadRequest, CodeKeyInvalid)
		wantProblem(t, f.do(srv, req{Key: "k1", Body: `{"bad":1}`}), http.StatusBadRequest, CodeInvalidRequest)
		wantProblem(t, f.do(srv, req{Key: "k1", Body: `{"a":"more than 16 bytes"}`}), http.StatusRequestEntityTooLarge, CodeBodyTooLarge)
		noScope, err := newRequest(context.Background(), srv.URL, req{Key: "k1", Body: `{}`})
		if err != nil {
			t.Fatal(err)
		}
		noScope.Header.Del(hdrTenant)
		res, err := srv.Client().Do(noScope)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusUnauthorized {
			t.Fatalf("without a scope: %d, want 401", res.StatusCode)
		}
		if f.execs.Load() != 0 || f.records() != 0 {
			t.Fatalf("execs %d records %d, want 0 0", f.execs.Load(), f.records())
		}
		// Each was never claimed: the same key then runs.
		wantCreated(t, f.do(srv, req{Key: "k1", Body: `{}`}), 1)
	})
}
