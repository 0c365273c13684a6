// Package simulator is a deterministic HTTP provider simulator: it holds the truth of every
// simulated provider and answers lookups in the HTTP shape that providers.NewHTTP speaks, the way
// the capability map says each provider behaves (supported lookup kinds, consistency window,
// rate limit), with switchable faults (5xx, slow answers, 429 with Retry-After in seconds or as an
// HTTP date, stale not-found, connection reset) drawn from a seeded RNG.
//
// Endpoints:
//
//	GET  /v1/providers/{provider}/records?kind=provider_reference|client_reference&value=X
//	GET  /v1/providers/{provider}/records?kind=fingerprint&value=F&from=RFC3339&to=RFC3339
//	     → 200 {"records":[...]} (empty list: not found); 400 {"error":{"code":"unsupported_lookup"|"invalid_query"}};
//	       404 {"error":{"code":"unknown_provider"}}; 429 with Retry-After; injected 503
//	POST /v1/providers/{provider}/bookings   → 403, counted: nothing may ever call it
//	GET  /admin/faults, PUT /admin/faults    the current [Faults], as JSON
//	POST /admin/truth                        add records at run time (truth file format; times absolute)
//	GET  /admin/stats, GET /admin/calls      [Server.Stats] and [Server.Calls] as JSON
//	GET  /healthz                            200
//
// Every lookup call to a known provider spends a token of that provider's bucket (an unsupported
// kind too), before any fault is drawn. Time comes from an injectable clock ([Config.Now]): record
// visibility, rate limits and Retry-After dates follow it; only a slow answer waits in real time.
// It is a test and demo tool: it keeps every call in memory.
package simulator

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/bookrecon/bookrecon/providers"
)

// Statuses a [Call] records when no HTTP status reached the client.
const (
	// StatusClientClosed: the client went away before a slow answer was given.
	StatusClientClosed = 499
	// StatusNoAnswer: the simulator reset the connection without answering.
	StatusNoAnswer = 0
)

// maxAdminBody bounds the body of admin requests.
const maxAdminBody = 4 << 20

// Config configures a [Server].
type Config struct {
	// Truth is what the providers hold at start. Every createdAt is moved by Shift.
	Truth Truth
	// Map is the capability map the simulator honours; required.
	Map *providers.Map
	// Shift is added to every createdAt of Truth (not to records added at run time): the demo
	// rebases the sample so that its first record is "now". Default 0.
	Shift time.Duration
	// Now is the simulator's clock: visibility, rate limits, Retry-After dates and the call log
	// read it. Default time.Now.
	Now func() time.Time
	// Seed seeds the fault RNG; the same seed and sequence of calls give the same faults.
	Seed int64
	// Faults are the faults switched on at start. Default none.
	Faults Faults
	// Logger receives one debug line per call. Default: discard.
	Logger *slog.Logger
}

// Call is one entry of the call log.
type Call struct {
	// Time is when the call arrived, on the simulator's clock.
	Time time.Time `json:"time"`
	// Provider is the provider named in the path.
	Provider string `json:"provider"`
	// Endpoint is "records" for lookups, "bookings" for create calls.
	Endpoint string `json:"endpoint"`
	// Kind is the lookup kind asked for, as sent ("" for create calls).
	Kind providers.LookupKind `json:"kind,omitempty"`
	// Status is the HTTP status answered; [StatusNoAnswer] for a reset connection,
	// [StatusClientClosed] when the client gave up on a slow answer.
	Status int `json:"status"`
	// RetryAfter is the wait a 429 asked for, exactly as the client reads it from the
	// Retry-After header at Time; 0 otherwise. In JSON: nanoseconds.
	RetryAfter time.Duration `json:"retryAfter,omitempty"`
	// Fault is the fault applied to the call, [FaultNone] when it was answered normally.
	Fault Fault `json:"fault,omitempty"`
}

// CallKey groups lookup calls in [Stats].
type CallKey struct {
	// Provider is the provider named in the path.
	Provider string
	// Kind is the lookup kind asked for, as sent.
	Kind providers.LookupKind
	// Status is the HTTP status answered (or [StatusNoAnswer], [StatusClientClosed]).
	Status int
}

// Stats counts the calls a [Server] received.
type Stats struct {
	// Lookups counts calls to the records endpoint by provider, kind and status.
	Lookups map[CallKey]int
	// Creates counts calls to the bookings (create) endpoint by provider; it must stay empty.
	Creates map[string]int
}

// Server is the simulator; it implements http.Handler and is safe for concurrent use.
type Server struct {
	cfg Config
	now func() time.Time
	log *slog.Logger
	mux *http.ServeMux

	mu      sync.Mutex
	truth   Truth // createdAt already shifted
	buckets map[string]*bucket
	faults  Faults
	rng     *rand.Rand
	calls   []Call
	stats   Stats
}

// New returns a simulator for cfg. It panics when cfg.Map is nil.
func New(cfg Config) *Server {
	if cfg.Map == nil {
		panic("simulator: Config.Map is required")
	}
	s := &Server{
		cfg:     cfg,
		now:     cfg.Now,
		log:     cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler)),
		truth:   make(Truth, len(cfg.Truth)),
		buckets: map[string]*bucket{},
		faults:  cfg.Faults,
		rng:     rand.New(rand.NewPCG(uint64(cfg.Seed), 0x9e3779b97f4a7c15)),
		stats:   Stats{Lookups: map[CallKey]int{}, Creates: map[string]int{}},
	}
	if s.now == nil {
		s.now = time.Now
	}
	for name, recs := range cfg.Truth {
		for _, r := range recs {
			r.CreatedAt = r.CreatedAt.Add(cfg.Shift)
			s.truth[name] = append(s.truth[name], r)
		}
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/providers/{provider}/records", s.handleRecords)
	mux.HandleFunc("POST /v1/providers/{provider}/bookings", s.handleCreate)
	mux.HandleFunc("GET /admin/faults", s.handleGetFaults)
	mux.HandleFunc("PUT /admin/faults", s.handlePutFaults)
	mux.HandleFunc("POST /admin/truth", s.handleAddTruth)
	mux.HandleFunc("GET /admin/stats", s.handleStats)
	mux.HandleFunc("GET /admin/calls", s.handleCalls)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusOK)
	})
	s.mux = mux
	return s
}

// ServeHTTP serves the simulator's endpoints.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// SetFaults replaces the injected faults; an invalid f changes nothing and returns why.
func (s *Server) SetFaults(f Faults) error {
	if err := f.Validate(); err != nil {
		return err
	}
	f.Providers = slices.Clone(f.Providers)
	s.mu.Lock()
	s.faults = f
	s.mu.Unlock()
	return nil
}

// Faults returns the faults in force.
func (s *Server) Faults() Faults {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.faults
	f.Providers = slices.Clone(f.Providers)
	return f
}

// AddTruth adds records at run time. Their createdAt is taken as is (absolute, not shifted).
// Providers must be in the capability map and provider references unique per provider; on any
// problem nothing is added.
func (s *Server) AddTruth(t Truth) error {
	var problems []error
	s.mu.Lock()
	defer s.mu.Unlock()
	for name, recs := range t {
		if !s.cfg.Map.Known(name) {
			problems = append(problems, fmt.Errorf("%s: %w", name, providers.ErrUnknownProvider))
			continue
		}
		for i, r := range recs {
			if slices.ContainsFunc(s.truth[name], func(have providers.Record) bool {
				return have.ProviderReference == r.ProviderReference
			}) {
				problems = append(problems, fmt.Errorf("%s[%d]: providerReference %q already held", name, i, r.ProviderReference))
			}
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w:\n%w", ErrInvalidTruth, errors.Join(problems...))
	}
	for name, recs := range t {
		s.truth[name] = append(s.truth[name], recs...)
	}
	return nil
}

// Calls returns a copy of the call log, in arrival order.
func (s *Server) Calls() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.calls)
}

// Stats returns a copy of the call counters.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := Stats{Lookups: make(map[CallKey]int, len(s.stats.Lookups)), Creates: make(map[string]int, len(s.stats.Creates))}
	for k, v := range s.stats.Lookups {
		out.Lookups[k] = v
	}
	for k, v := range s.stats.Creates {
		out.Creates[k] = v
	}
	return out
}

func (s *Server) record(c Call) {
	s.mu.Lock()
	s.calls = append(s.calls, c)
	switch c.Endpoint {
	case "records":
		s.stats.Lookups[CallKey{Provider: c.Provider, Kind: c.Kind, Status: c.Status}]++
	case "bookings":
		s.stats.Creates[c.Provider]++
	}
	s.mu.Unlock()
	s.log.Debug("provider call", "provider", c.Provider, "endpoint", c.Endpoint, "kind", string(c.Kind),
		"status", c.Status, "fault", string(c.Fault), "retry_after", c.RetryAfter)
}

// admit applies the rate limit and draws a fault for one lookup call to a known provider.
func (s *Server) admit(name string, rl providers.RateLimit, now time.Time) (wait time.Duration, fault Fault, faults Faults) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.buckets[name]
	if !ok {
		b = &bucket{tokens: float64(rl.Burst), last: now}
		s.buckets[name] = b
	}
	if wait := b.take(rl, now); wait > 0 {
		return wait, FaultRateLimit, s.faults
	}
	if s.faults.active() && s.faults.appliesTo(name) {
		return 0, s.faults.pick(s.rng.Float64()), s.faults
	}
	return 0, FaultNone, s.faults
}

func (s *Server) handleRecords(w http.ResponseWriter, r *http.Request) {
	now := s.now()
	name := r.PathValue("provider")
	q := r.URL.Query()
	call := Call{Time: now, Provider: name, Endpoint: "records", Kind: providers.LookupKind(q.Get("kind"))}

	caps, ok := s.cfg.Map.Get(name)
	if !ok {
		call.Status = writeError(w, http.StatusNotFound, "unknown_provider", fmt.Sprintf("provider %q is not known", name))
		s.record(call)
		return
	}
	wait, fault, faults := s.admit(name, caps.RateLimit, now)
	call.Fault = fault
	switch fault {
	case FaultRateLimit:
		secs := ceilSeconds(wait)
		call.RetryAfter = time.Duration(secs) * time.Second
		w.Header().Set("Retry-After", strconv.FormatInt(secs, 10))
		call.Status = writeError(w, http.StatusTooManyRequests, "rate_limited", "rate limit exceeded")
		s.record(call)
		return
	case FaultServerError:
		call.Status = writeError(w, http.StatusServiceUnavailable, "unavailable", "injected server error")
		s.record(call)
		return
	case FaultRateLimitSeconds, FaultRateLimitDate:
		secs := faults.retryAfterSeconds()
		call.RetryAfter = time.Duration(secs) * time.Second
		if fault == FaultRateLimitSeconds {
			w.Header().Set("Retry-After", strconv.FormatInt(secs, 10))
		} else {
			// An HTTP date has whole seconds: round up, so that no client may come back early.
			at := now.Add(call.RetryAfter)
			if t := at.Truncate(time.Second); !t.Equal(at) {
				at = t.Add(time.Second)
			}
			call.RetryAfter = at.Sub(now)
			w.Header().Set("Retry-After", at.UTC().Format(http.TimeFormat))
		}
		call.Status = writeError(w, http.StatusTooManyRequests, "rate_limited", "injected rate limit")
		s.record(call)
		return
	case FaultConnectionReset:
		call.Status = StatusNoAnswer
		s.record(call)
		resetConnection(w)
		return
	case FaultSlow:
		t := time.NewTimer(faults.slowDelay())
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			call.Status = StatusClientClosed
			s.record(call)
			return
		}
	}

	recs, status, code, msg := s.lookup(caps, q, now)
	if status != http.StatusOK {
		call.Status = writeError(w, status, code, msg)
		s.record(call)
		return
	}
	if fault == FaultStaleNotFound {
		recs = nil
	}
	out := struct {
		Records []wireRecord `json:"records"`
	}{Records: make([]wireRecord, 0, len(recs))}
	for _, rec := range recs {
		out.Records = append(out.Records, toWire(rec))
	}
	call.Status = writeJSON(w, http.StatusOK, out)
	s.record(call)
}

// lookup answers a lookup query against the truth, honouring the capability map.
func (s *Server) lookup(caps providers.Capabilities, q map[string][]string, now time.Time) ([]providers.Record, int, string, string) {
	get := func(k string) string {
		if v := q[k]; len(v) > 0 {
			return v[0]
		}
		return ""
	}
	kind := providers.LookupKind(get("kind"))
	value := get("value")
	switch {
	case !kind.Valid():
		return nil, http.StatusBadRequest, "invalid_query", fmt.Sprintf("kind %q is not one of %v", kind, providers.LookupKinds())
	case !caps.Supports(kind):
		return nil, http.StatusBadRequest, "unsupported_lookup", fmt.Sprintf("provider %q does not support %s lookups", caps.Name, kind)
	case value == "":
		return nil, http.StatusBadRequest, "invalid_query", "value is required"
	}
	var from, to time.Time
	if kind == providers.LookupFingerprint {
		var errF, errT error
		from, errF = time.Parse(time.RFC3339Nano, get("from"))
		to, errT = time.Parse(time.RFC3339Nano, get("to"))
		if errF != nil || errT != nil {
			return nil, http.StatusBadRequest, "invalid_query", "a fingerprint lookup needs from and to as RFC 3339 times"
		}
	}

	s.mu.Lock()
	held := slices.Clone(s.truth[caps.Name])
	s.mu.Unlock()

	var out []providers.Record
	for _, rec := range held {
		if now.Before(rec.CreatedAt.Add(caps.ConsistencyWindow)) {
			continue // not visible yet
		}
		var match bool
		switch kind {
		case providers.LookupProviderReference:
			match = rec.ProviderReference == value
		case providers.LookupClientReference:
			match = rec.ClientReference == value
		case providers.LookupFingerprint:
			match = rec.Fingerprint == value && !rec.CreatedAt.Before(from) && !rec.CreatedAt.After(to)
		}
		if match {
			out = append(out, rec)
		}
	}
	slices.SortFunc(out, func(a, b providers.Record) int {
		return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), cmp.Compare(a.ProviderReference, b.ProviderReference))
	})
	return out, http.StatusOK, "", ""
}

func (s *Server) handleCreate(w http.ResponseWriter, r *http.Request) {
	call := Call{Time: s.now(), Provider: r.PathValue("provider"), Endpoint: "bookings"}
	call.Status = writeError(w, http.StatusForbidden, "forbidden", "bookrecon must never create bookings")
	s.record(call)
	s.log.Warn("create endpoint called", "provider", call.Provider)
}

func (s *Server) handleGetFaults(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, s.Faults())
}

func (s *Server) handlePutFaults(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxAdminBody))
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_faults", err.Error())
		return
	}
	var f Faults
	if err := json.Unmarshal(body, &f); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_faults", err.Error())
		return
	}
	if err := s.SetFaults(f); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_faults", err.Error())
		return
	}
	s.log.Info("faults set", "faults", string(body))
	writeJSON(w, http.StatusOK, s.Faults())
}

func (s *Server) handleAddTruth(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxAdminBody))
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_truth", err.Error())
		return
	}
	t, err := parseTruth(body, s.now())
	if err == nil {
		err = s.AddTruth(t)
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_truth", err.Error())
		return
	}
	n := 0
	for _, recs := range t {
		n += len(recs)
	}
	writeJSON(w, http.StatusCreated, map[string]int{"added": n})
}

func (s *Server) handleStats(w http.ResponseWriter, _ *http.Request) {
	st := s.Stats()
	type lookupCount struct {
		Provider string               `json:"provider"`
		Kind     providers.LookupKind `json:"kind"`
		Status   int                  `json:"status"`
		Count    int                  `json:"count"`
	}
	out := struct {
		Lookups []lookupCount  `json:"lookups"`
		Creates map[string]int `json:"creates"`
	}{Lookups: []lookupCount{}, Creates: st.Creates}
	for k, v := range st.Lookups {
		out.Lookups = append(out.Lookups, lookupCount{k.Provider, k.Kind, k.Status, v})
	}
	slices.SortFunc(out.Lookups, func(a, b lookupCount) int {
		return cmp.Or(cmp.Compare(a.Provider, b.Provider), cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Status, b.Status))
	})
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) handleCalls(w http.ResponseWriter, _ *http.Request) {
	calls := s.Calls()
	if calls == nil {
		calls = []Call{}
	}
	writeJSON(w, http.StatusOK, calls)
}

// bucket is a token bucket on the simulator's clock.
type bucket struct {
	tokens float64
	last   time.Time
}

// take spends one token at now, or returns how long until one is available.
func (b *bucket) take(rl providers.RateLimit, now time.Time) time.Duration {
	if now.After(b.last) {
		b.tokens = min(float64(rl.Burst), b.tokens+now.Sub(b.last).Seconds()*rl.RPS)
		b.last = now
	}
	if b.tokens >= 1 {
		b.tokens--
		return 0
	}
	return time.Duration((1 - b.tokens) / rl.RPS * float64(time.Second))
}

// resetConnection closes the client's connection without an answer (a TCP reset where possible).
func resetConnection(w http.ResponseWriter) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		panic(http.ErrAbortHandler)
	}
	conn, _, err := hj.Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0) // close with RST, not FIN
	}
	_ = conn.Close()
}

// wireRecord is a record as the HTTP lookup shape carries it.
type wireRecord struct {
	ProviderReference string  `json:"providerReference"`
	ClientReference   *string `json:"clientReference"`
	Status            string  `json:"status"`
	CreatedAt         string  `json:"createdAt"`
	Fingerprint       *string `json:"fingerprint"`
}

func toWire(r providers.Record) wireRecord {
	w := wireRecord{
		ProviderReference: r.ProviderReference,
		Status:            string(r.Status),
		CreatedAt:         r.CreatedAt.UTC().Format(time.RFC3339Nano),
	}
	if r.ClientReference != "" {
		w.ClientReference = &r.ClientReference
	}
	if r.Fingerprint != "" {
		w.Fingerprint = &r.Fingerprint
	}
	return w
}

func writeError(w http.ResponseWriter, status int, code, msg string) int {
	var body struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	body.Error.Code, body.Error.Message = code, msg
	return writeJSON(w, status, body)
}

func writeJSON(w http.ResponseWriter, status int, v any) int {
	data, err := json.Marshal(v)
	if err != nil {
		http.Error(w, "encode: "+err.Error(), http.StatusInternalServerError)
		return http.StatusInternalServerError
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(data, '\n'))
	return status
}

func strictUnmarshal(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("data after the JSON value")
	}
	return nil
}
