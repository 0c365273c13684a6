// Package auth authenticates and authorizes bookrecon's public HTTP routes (docs/api.md;
// docs/design.md, "Part 2"): every /v1 route requires `Authorization: Bearer
// <token>`; the token's SHA-256 is looked up, in constant time, in the tokens file (File:
// hash → tenant, principal, scopes), which Tokens re-reads on SIGHUP and whenever it changes
// (Watch). A route then needs its scope and, when its pattern has a {tenant} wildcard, the
// token's tenant.
//
// Authorization comes first — before the route validates anything and before any
// Idempotency-Key look-up: Require (or Authorize, for handlers that write their own answers)
// runs before the handler, and the handler, or the Idempotency-Key middleware inside Require,
// reads the caller with FromContext. Answers are RFC 9457 problem details (internal/problem):
//
//	401 unauthenticated  no Authorization header, not "Bearer <token>", or a token not in the file
//	403 forbidden        a token of another tenant, or without the route's scope
//
// The 403 for another tenant is decided from the path alone, so it is the same whether or not
// anything exists there. Tokens are never logged: logs name the principal and the token id (the
// first 12 hex digits of its hash), as `bookrecon tokens list` does.
//
// What it leaves to others: the admin endpoints (/metrics, /livez, /readyz, pprof) are served
// on the admin address without authentication (internal/telemetry); managing the file is
// `bookrecon tokens`.
package auth

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/bookrecon/bookrecon/internal/problem"
)

// Principal is an authenticated caller: the token's entry in the tokens file.
type Principal struct {
	// Tenant is the one tenant the token acts for.
	Tenant string
	// Name is the calling service (Entry.Principal): with Tenant, the scope of its
	// Idempotency-Keys.
	Name string
	// Scopes are the permissions the token grants.
	Scopes []Scope
	// TokenID is the first 12 hex digits of the token's hash: safe to log, as shown by
	// `bookrecon tokens list` and accepted by `bookrecon tokens revoke --hash`.
	TokenID string
}

// Has reports whether p was granted s.
func (p Principal) Has(s Scope) bool { return slices.Contains(p.Scopes, s) }

// TokenIDLen is the length of Principal.TokenID.
const TokenIDLen = 12

type ctxKey struct{}

// NewContext returns ctx carrying p.
func NewContext(ctx context.Context, p Principal) context.Context {
	return context.WithValue(ctx, ctxKey{}, p)
}

// FromContext returns the principal Require (or a handler after Authorize) put in ctx; false
// when the request was not authenticated. The Idempotency-Key middleware scopes keys by
// (Principal.Tenant, Principal.Name).
func FromContext(ctx context.Context) (Principal, bool) {
	p, ok := ctx.Value(ctxKey{}).(Principal)
	return p, ok
}

// Denial reasons: the values of bookrecon_auth_denials_total's reason label.
const (
	ReasonMissing   = "missing"   // no Authorization header
	ReasonMalformed = "malformed" // not "Bearer <token>"
	ReasonUnknown   = "unknown"   // a token not in the file (never issued, mistyped or revoked)
	ReasonTenant    = "tenant"    // a token of another tenant
	ReasonScope     = "scope"     // a token without the route's scope
)

func denialReasons() []string {
	return []string{ReasonMissing, ReasonMalformed, ReasonUnknown, ReasonTenant, ReasonScope}
}

// Reload results: the values of bookrecon_auth_reloads_total's result label.
const (
	ReloadOK        = "ok"        // the file changed and its tokens are in force
	ReloadUnchanged = "unchanged" // the same content as in force
	ReloadError     = "error"     // unreadable or invalid: the tokens in force stay
)

// Metrics are the package's Prometheus series, every label value pre-created.
type Metrics struct {
	// Denials counts refused requests: bookrecon_auth_denials_total{reason}.
	Denials *prometheus.CounterVec
	// Reloads counts re-reads of the tokens file: bookrecon_auth_reloads_total{result}.
	Reloads *prometheus.CounterVec
	// Tokens is how many tokens are in force: bookrecon_auth_tokens.
	Tokens prometheus.Gauge
	// FileInvalid is 1 while the tokens file's last re-read failed, so the file on disk is not
	// what is in force (a revocation in it is not applied): bookrecon_auth_tokens_file_invalid.
	FileInvalid prometheus.Gauge
}

// NewMetrics registers the metrics on reg (nil: a private registry).
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	m := &Metrics{
		Denials: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "bookrecon_auth_denials_total",
			Help: "Requests refused by authentication (401) or authorization (403), by reason."}, []string{"reason"}),
		Reloads: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "bookrecon_auth_reloads_total",
			Help: "Re-reads of the tokens file (on SIGHUP or a change), by result: ok, unchanged, error (the tokens in force stay)."}, []string{"result"}),
		Tokens: prometheus.NewGauge(prometheus.GaugeOpts{Name: "bookrecon_auth_tokens",
			Help: "Tokens in force, from the tokens file last read successfully."}),
		FileInvalid: prometheus.NewGauge(prometheus.GaugeOpts{Name: "bookrecon_auth_tokens_file_invalid",
			Help: "1 while the tokens file's last re-read failed: the tokens in force are older than the file (a revocation in it is not applied)."}),
	}
	for _, c := range []prometheus.Collector{m.Denials, m.Reloads, m.Tokens, m.FileInvalid} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	for _, r := range denialReasons() {
		m.Denials.WithLabelValues(r)
	}
	for _, r := range []string{ReloadOK, ReloadUnchanged, ReloadError} {
		m.Reloads.WithLabelValues(r)
	}
	return m, nil
}

// Tokens are the tokens in force, read from the tokens file; safe for concurrent use.
type Tokens struct {
	path    string
	log     *slog.Logger
	metrics *Metrics
	set     atomic.Pointer[tokenSet]
	mu      sync.Mutex  // one reload at a time
	invalid atomic.Bool // the last re-read failed (FileInvalid)
	// eq compares hashes: subtle.ConstantTimeCompare (an internal test counts the calls).
	eq func(x, y []byte) int
}

type tokenSet struct {
	digest  [sha256.Size]byte // of the file's content
	entries []entry
}

type entry struct {
	hash [sha256.Size]byte
	p    Principal
}

// Open reads the tokens file at path (ReadFile: every problem at once, wrapping ErrFile).
// reg receives the metrics (nil: a private registry). Call Watch to follow the file.
func Open(path string, logger *slog.Logger, reg prometheus.Registerer) (*Tokens, error) {
	m, err := NewMetrics(reg)
	if err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.Default()
	}
	t := &Tokens{path: path, log: logger, metrics: m, eq: subtle.ConstantTimeCompare}
	if _, err := t.load(); err != nil {
		return nil, err
	}
	t.warnEmpty()
	return t, nil
}

// Metrics returns the package's metrics.
func (t *Tokens) Metrics() *Metrics { return t.metrics }

// load reads the file and puts its tokens in force; changed is false when its content is the
// one in force.
func (t *Tokens) load() (changed bool, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	data, err := os.ReadFile(t.path)
	if err != nil {
		return false, fmt.Errorf("%w %s: %w", ErrFile, t.path, err)
	}
	digest := sha256.Sum256(data)
	if cur := t.set.Load(); cur != nil && cur.digest == digest {
		return false, nil
	}
	f, err := ParseFile(data)
	if err != nil {
		return false, fmt.Errorf("%s: %w", t.path, err)
	}
	s := &tokenSet{digest: digest, entries: make([]entry, len(f.Tokens))}
	for i, e := range f.Tokens {
		h, _ := hex.DecodeString(e.SHA256) // validated
		s.entries[i] = entry{hash: [sha256.Size]byte(h),
			p: Principal{Tenant: e.Tenant, Name: e.Principal, Scopes: slices.Clone(e.Scopes), TokenID: e.SHA256[:TokenIDLen]}}
	}
	t.set.Store(s)
	t.metrics.Tokens.Set(float64(len(s.entries)))
	return true, nil
}

// Reload re-reads the tokens file now. On success its tokens replace the ones in force at once
// (a revoked token is refused from the next request on); on error (unreadable, invalid) the
// tokens in force stay, and the error — which never quotes the file — is returned and logged.
// cause says why, for the log (sighup, change).
func (t *Tokens) Reload(cause string) error {
	changed, err := t.load()
	wasInvalid := t.invalid.Swap(err != nil)
	t.metrics.FileInvalid.Set(0)
	switch {
	case err != nil:
		t.metrics.FileInvalid.Set(1)
		t.metrics.Reloads.WithLabelValues(ReloadError).Inc()
		t.log.Error("tokens file not reloaded: the tokens read before stay in force; fix the file", "path", t.path, "cause", cause, "err", err)
	case changed:
		t.metrics.Reloads.WithLabelValues(ReloadOK).Inc()
		t.log.Info("tokens file reloaded", "path", t.path, "cause", cause, "tokens", len(t.set.Load().entries))
		t.warnEmpty()
	default:
		t.metrics.Reloads.WithLabelValues(ReloadUnchanged).Inc()
		if wasInvalid {
			// Back to the content in force: say so, or the last line would stay the error.
			t.log.Info("tokens file valid again, unchanged from the tokens in force", "path", t.path, "cause", cause)
		}
	}
	return err
}

// warnEmpty logs a tokens file without a token: every request gets 401.
func (t *Tokens) warnEmpty() {
	if len(t.set.Load().entries) == 0 {
		t.log.Warn("the tokens file holds no token: every request gets 401; add one with bookrecon tokens add", "path", t.path)
	}
}

// reloadDelay gathers the events of one write (an editor's truncate and write, a rename) into
// one re-read.
const reloadDelay = 50 * time.Millisecond

// concerns reports whether a change of name in the tokens file's folder may change the file:
// the file itself (written in place or renamed over) or a Kubernetes secret's ".."-prefixed
// entries (..data, swapped to publish a new version). Other files of the folder — a service's
// own log written there, the tokens commands' temporary and lock files — do not trigger a
// re-read (a re-read that logs into the folder would trigger itself).
func (t *Tokens) concerns(name string) bool {
	base := filepath.Base(name)
	return base == filepath.Base(t.path) || strings.HasPrefix(base, "..")
}

// Watch re-reads the tokens file (Reload) on SIGHUP and whenever its folder changes (fsnotify
// on the folder, so an atomic rename over the file and a Kubernetes secret's symlink swap are
// both seen), until ctx ends. It returns once the signal handler and the watch are in place;
// wait blocks until it has stopped. Without Watch, SIGHUP would end the process.
func (t *Tokens) Watch(ctx context.Context) (wait func(), err error) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("auth: watch the tokens file: %w", err)
	}
	if err := w.Add(filepath.Dir(t.path)); err != nil {
		_ = w.Close()
		return nil, fmt.Errorf("auth: watch the tokens file's folder %s: %w", filepath.Dir(t.path), err)
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer signal.Stop(hup)
		defer func() { _ = w.Close() }() // a watch's Close has nothing to report
		timer := time.NewTimer(time.Hour)
		timer.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				_ = t.Reload("sighup")
			case ev, ok := <-w.Events:
				if !ok {
					return
				}
				if t.concerns(ev.Name) {
					timer.Reset(reloadDelay)
				}
			case err, ok := <-w.Errors:
				if !ok {
					return
				}
				t.log.Warn("tokens file watch", "path", t.path, "err", err)
			case <-timer.C:
				_ = t.Reload("change")
			}
		}
	}()
	return func() { <-done }, nil
}

// lookup finds the token whose hash is sum, comparing with every entry in constant time (no
// early exit: the time does not depend on where, or whether, it matches).
func (s *tokenSet) lookup(sum [sha256.Size]byte, eq func(x, y []byte) int) (Principal, bool) {
	found := -1
	for i := range s.entries {
		found = subtle.ConstantTimeSelect(eq(sum[:], s.entries[i].hash[:]), i, found)
	}
	if found < 0 {
		return Principal{}, false
	}
	return s.entries[found].p, true
}

// The answers. Their bodies are part of the API (docs/api.md, "Errors").
var (
	errMissing = problem.New(http.StatusUnauthorized, "unauthenticated",
		"send Authorization: Bearer <token>; the operator issues tokens with bookrecon tokens add").
		With("WWW-Authenticate", `Bearer realm="bookrecon"`)
	errMalformed = problem.New(http.StatusUnauthorized, "unauthenticated",
		"the Authorization header must be Bearer followed by one token").
		With("WWW-Authenticate", `Bearer realm="bookrecon", error="invalid_request"`)
	errUnknown = problem.New(http.StatusUnauthorized, "unauthenticated",
		"the token is not valid (mistyped, revoked, or of another deployment); ask the operator for a token").
		With("WWW-Authenticate", `Bearer realm="bookrecon", error="invalid_token"`)
	errTenant = problem.New(http.StatusForbidden, "forbidden", "the token does not act for this tenant")
)

func errScope(s Scope) *problem.Details {
	return problem.New(http.StatusForbidden, "forbidden", "the token lacks the scope "+string(s)).
		With("WWW-Authenticate", `Bearer realm="bookrecon", error="insufficient_scope", scope="`+string(s)+`"`)
}

// bearer returns the token of an "Authorization: Bearer <token>" header (RFC 6750 section
// 2.1: the scheme in any case, one space, a b64token).
func bearer(h http.Header) (string, string) {
	vs := h.Values("Authorization")
	if len(vs) == 0 {
		return "", ReasonMissing
	}
	scheme, tok, ok := strings.Cut(vs[0], " ")
	if len(vs) > 1 || !ok || !strings.EqualFold(scheme, "Bearer") || !b64token(tok) {
		return "", ReasonMalformed
	}
	return tok, ""
}

// b64token reports whether s is an RFC 6750 b64token: 1*( ALPHA / DIGIT / "-" / "." / "_" /
// "~" / "+" / "/" ) *"=".
func b64token(s string) bool {
	body := strings.TrimRight(s, "=")
	if body == "" {
		return false
	}
	for _, c := range []byte(body) {
		if ok := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("-._~+/", c) >= 0; !ok {
			return false
		}
	}
	return true
}

// Authorize authenticates r and checks that the token grants scope and, when the route's
// pattern has a {tenant} wildcard (r.PathValue("tenant") is set), acts for that tenant. It
// returns the principal, or the problem to answer (401 unauthenticated, 403 forbidden; see the
// package comment), counted in bookrecon_auth_denials_total. A route without {tenant} is
// authorized by scope alone — but one whose pattern has a tenants segment with a wildcard of
// another name (/tenants/{tenantId}/…) is denied for every token (misnamedTenant): a typo in a
// pattern fails closed. Call it before reading anything else of the request.
func (t *Tokens) Authorize(r *http.Request, scope Scope) (Principal, *problem.Details) {
	p, reason := t.authorize(r, scope)
	switch reason {
	case "":
		return p, nil
	case ReasonMissing:
		return t.deny(reason, errMissing)
	case ReasonMalformed:
		return t.deny(reason, errMalformed)
	case ReasonUnknown:
		return t.deny(reason, errUnknown)
	case ReasonTenant:
		return t.deny(reason, errTenant)
	default:
		return t.deny(reason, errScope(scope))
	}
}

func (t *Tokens) deny(reason string, d *problem.Details) (Principal, *problem.Details) {
	t.metrics.Denials.WithLabelValues(reason).Inc()
	return Principal{}, d
}

func (t *Tokens) authorize(r *http.Request, scope Scope) (Principal, string) {
	tok, reason := bearer(r.Header)
	if reason != "" {
		return Principal{}, reason
	}
	p, ok := t.set.Load().lookup(sha256.Sum256([]byte(tok)), t.eq)
	if !ok {
		return Principal{}, ReasonUnknown
	}
	if tenant := r.PathValue("tenant"); tenant != "" && tenant != p.Tenant || misnamedTenant(r.Pattern) {
		return Principal{}, ReasonTenant
	}
	if !p.Has(scope) {
		return Principal{}, ReasonScope
	}
	return p, ""
}

// misnamedTenant reports a route pattern whose tenants segment is followed by a wildcard not
// named {tenant} ("/v1/tenants/{tenantId}/…"): Authorize could not see the tenant there, so it
// fails closed and denies every request of such a route, whoever's token, instead of
// authorizing it by scope alone.
func misnamedTenant(pattern string) bool {
	_, rest, ok := strings.Cut(pattern, "/tenants/{")
	return ok && !strings.HasPrefix(rest, "tenant}") && !strings.HasPrefix(rest, "tenant...}")
}

// Require is net/http middleware: next runs only for a request Authorize lets through, with
// the principal in its context (FromContext); any other gets Authorize's problem. Register it
// per route, inside the ServeMux, so the {tenant} wildcard is known, and outside any
// Idempotency-Key middleware.
func (t *Tokens) Require(scope Scope, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, d := t.Authorize(r, scope)
		if d != nil {
			problem.Write(w, d)
			return
		}
		next.ServeHTTP(w, r.WithContext(NewContext(r.Context(), p)))
	})
}
