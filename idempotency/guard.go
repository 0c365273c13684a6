package idempotency

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Defaults of Config.
const (
	DefaultTTL            = 30 * 24 * time.Hour // Stripe's v2 window (docs/design.md idempotencyTTL)
	DefaultRequestTimeout = 30 * time.Second
	DefaultLeaseMargin    = 5 * time.Second
	DefaultLockTimeout    = 2 * time.Second
	DefaultRetryAfter     = 1 * time.Second
	DefaultMaxBody        = 64 << 10 // bytes, as the Producer API's 64 KiB
	// settleTimeout bounds storing or rolling back an answer after the handler returned,
	// whatever time the handler took.
	settleTimeout = 5 * time.Second
	// claimAttempts bounds the claims of one request whose conflicting record vanished between
	// the insert and the read (rolled back by its owner, or expired and deleted).
	claimAttempts = 3
)

// Scope is whose key it is: docs/design.md scopes a key by (tenant, principal, Idempotency-Key), so
// the same key from two tenants, or from two principals of one tenant, names two requests.
type Scope struct {
	Tenant    string // non-empty
	Principal string // non-empty: one per calling service, shared by its instances
}

// ScopeFunc returns the authenticated tenant and principal of r. In production it reads what the
// authentication middleware (internal/auth, which runs before the Guard) put in r's context:
// the tenant and principal of the bearer token (auth.FromContext: Scope{Tenant: p.Tenant,
// Principal: p.Name}). Never take them from a request header or the path alone: any caller
// could then claim, or replay, another tenant's keys. An error, or an empty tenant or principal,
// answers 401 unauthenticated (nothing claimed); its text is not shown.
type ScopeFunc func(r *http.Request) (Scope, error)

// TxHandler serves a transactional route inside the transaction that holds its idempotency
// record: its writes go through tx, and they commit together with the stored answer, or roll
// back with the claim. It must not commit or roll tx back. r's context is detached from the
// client's connection and bounded by Config.RequestTimeout.
type TxHandler func(w http.ResponseWriter, r *http.Request, tx pgx.Tx)

// Config configures New. Zero durations take the defaults.
type Config struct {
	// DB is the PostgreSQL pool holding idempotency_key (migration 00007). Required.
	DB *pgxpool.Pool
	// Scope gives each request's tenant and principal. Required; there is no default (see
	// ScopeFunc).
	Scope ScopeFunc
	// Limiter is the optional Redis in-flight limiter (nil: PostgreSQL alone).
	Limiter *Limiter
	// Metrics (nil: a private set, not exported).
	Metrics *Metrics
	// Logger (nil: slog.Default()).
	Logger *slog.Logger
	// TTL is how long an answer is replayed (default DefaultTTL); a key used again after it is a
	// new request, replacing the old record atomically.
	TTL time.Duration
	// RequestTimeout bounds a handler's run, which is detached from the client's connection
	// (default DefaultRequestTimeout). Keep the http.Server's WriteTimeout above it.
	RequestTimeout time.Duration
	// LeaseMargin is what a two-phase lease and a transactional Redis lock add to
	// RequestTimeout (default DefaultLeaseMargin).
	LeaseMargin time.Duration
	// Lease is a two-phase claim's lease and Redis lock (default RequestTimeout + LeaseMargin;
	// shorter is refused). Size RequestTimeout from the p99 of bookrecon_command_duration_seconds.
	Lease time.Duration
	// LockTimeout bounds a transactional request's wait on a concurrent one's uncommitted record
	// (default DefaultLockTimeout; under RequestTimeout): then 409 request_in_progress.
	LockTimeout time.Duration
	// RetryAfter is the Retry-After of 409 request_in_progress and 503 (default
	// DefaultRetryAfter; rounded up to whole seconds).
	RetryAfter time.Duration
	// MaxBody is the largest request body read, in bytes (default DefaultMaxBody); larger is 413.
	MaxBody int64

	test testSignals
}

// testSignals are the tests' hooks (STYLE.md habit 25).
type testSignals struct {
	now func() time.Time // the clock (nil: time.Now)
}

// Guard applies the Idempotency-Key contract to the routes it wraps (doc.go). Safe for
// concurrent use.
type Guard struct {
	cfg Config
}

// New validates cfg, fills its defaults and returns a Guard. Every problem is reported at once.
func New(cfg Config) (*Guard, error) {
	cfg.TTL = cmp.Or(cfg.TTL, DefaultTTL)
	cfg.RequestTimeout = cmp.Or(cfg.RequestTimeout, DefaultRequestTimeout)
	cfg.LeaseMargin = cmp.Or(cfg.LeaseMargin, DefaultLeaseMargin)
	cfg.Lease = cmp.Or(cfg.Lease, cfg.RequestTimeout+cfg.LeaseMargin)
	cfg.LockTimeout = cmp.Or(cfg.LockTimeout, DefaultLockTimeout)
	cfg.RetryAfter = cmp.Or(cfg.RetryAfter, DefaultRetryAfter)
	cfg.MaxBody = cmp.Or(cfg.MaxBody, DefaultMaxBody)
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	var errs []error
	if cfg.DB == nil {
		errs = append(errs, errors.New("idempotency: Config.DB is required"))
	}
	if cfg.Scope == nil {
		errs = append(errs, errors.New("idempotency: Config.Scope is required: pass the authenticated tenant and principal (never a request header)"))
	}
	for name, d := range map[string]time.Duration{"TTL": cfg.TTL, "RequestTimeout": cfg.RequestTimeout,
		"LeaseMargin": cfg.LeaseMargin, "Lease": cfg.Lease, "LockTimeout": cfg.LockTimeout, "RetryAfter": cfg.RetryAfter} {
		if d < 0 {
			errs = append(errs, fmt.Errorf("idempotency: Config.%s %v is negative", name, d))
		}
	}
	if cfg.Lease < cfg.RequestTimeout+cfg.LeaseMargin {
		errs = append(errs, fmt.Errorf("idempotency: Config.Lease %v is shorter than RequestTimeout %v + LeaseMargin %v: a request still running would lose its claim",
			cfg.Lease, cfg.RequestTimeout, cfg.LeaseMargin))
	}
	if cfg.LockTimeout >= cfg.RequestTimeout {
		errs = append(errs, fmt.Errorf("idempotency: Config.LockTimeout %v must be under RequestTimeout %v", cfg.LockTimeout, cfg.RequestTimeout))
	}
	if cfg.MaxBody < 0 {
		errs = append(errs, fmt.Errorf("idempotency: Config.MaxBody %d is negative", cfg.MaxBody))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if cfg.Metrics == nil {
		cfg.Metrics, _ = NewMetrics(nil) // a fresh registry: cannot collide
	}
	return &Guard{cfg: cfg}, nil
}

func (g *Guard) now() time.Time {
	if g.cfg.test.now != nil {
		return g.cfg.test.now()
	}
	return time.Now()
}

// RouteOption configures one route.
type RouteOption func(*route)

// WithFingerprint sets the route's fingerprint (default DefaultFingerprint).
func WithFingerprint(f FingerprintFunc) RouteOption { return func(r *route) { r.fingerprint = f } }

// Transactional guards h in the transactional mode, for a handler whose effect is a write to
// the same database: the record is inserted first in the transaction h writes in, and stored
// or rolled back with it. A concurrent request with the same key waits on the primary key up to
// Config.LockTimeout (then 409 request_in_progress), replays when the first commits, runs when
// it rolls back. route is the route's template ("POST /v1/tenants/{tenant}/attempts"): part of
// the fingerprint and the metrics' route label, whose series are created now.
func (g *Guard) Transactional(route string, h TxHandler, opts ...RouteOption) http.Handler {
	return g.newRoute(route, h, nil, g.cfg.RequestTimeout+g.cfg.LeaseMargin, opts)
}

// TwoPhase guards h in the two-phase mode, for a handler whose effect is an external call: the
// claim commits first with Config.Lease and a random token, h runs, and its answer is stored by
// an update fenced by the token, even after the lease expired. A duplicate meanwhile gets 409
// request_in_progress; after the lease, 409 request_outcome_unknown, never a second run. An
// answer below 500 that is not stored deletes the claim (fenced the same way), so a retry runs
// afresh; a 5xx answer leaves the claim in flight — the external effect may have happened —
// unless the handler called ReleaseClaim. route: as Transactional.
func (g *Guard) TwoPhase(route string, h http.Handler, opts ...RouteOption) http.Handler {
	return g.newRoute(route, nil, h, g.cfg.Lease, opts)
}

func (g *Guard) newRoute(name string, tx TxHandler, h http.Handler, lockTTL time.Duration, opts []RouteOption) *route {
	r := &route{g: g, name: name, tx: tx, h: h, lockTTL: lockTTL, fingerprint: DefaultFingerprint}
	for _, o := range opts {
		o(r)
	}
	g.cfg.Metrics.route(name)
	return r
}

// DeleteExpired deletes at most limit records whose retention ended, oldest first, and returns
// how many it deleted: one bounded batch of expiry, for a maintenance loop that calls it until
// it returns less than limit. An expired record that is still there is replaced atomically by
// the next request with its key, so expiry is housekeeping, not correctness.
func (g *Guard) DeleteExpired(ctx context.Context, limit int) (int64, error) {
	tag, err := g.cfg.DB.Exec(ctx, stmts.SQL("idempotency_key_delete_expired"), g.now(), limit)
	if err != nil {
		return 0, fmt.Errorf("idempotency: delete expired: %w", err)
	}
	return tag.RowsAffected(), nil
}

// route is one guarded handler.
type route struct {
	g           *Guard
	name        string
	tx          TxHandler    // transactional mode
	h           http.Handler // two-phase mode
	lockTTL     time.Duration
	fingerprint FingerprintFunc
}

// reply writes an answer to the client.
type reply func(w http.ResponseWriter)

func (rt *route) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	cfg := &rt.g.cfg
	scope, err := cfg.Scope(r)
	if err != nil || scope.Tenant == "" || scope.Principal == "" {
		problem(w, http.StatusUnauthorized, CodeUnauthenticated, "this request carries no authenticated tenant and principal", 0)
		return
	}
	key, err := ParseKey(r.Header)
	switch {
	case errors.Is(err, ErrKeyMissing):
		problem(w, http.StatusBadRequest, CodeKeyMissing, "send an Idempotency-Key header: a key of your own (a UUID) per operation, the same on every retry of it", 0)
		return
	case err != nil:
		problem(w, http.StatusBadRequest, CodeKeyInvalid, "the Idempotency-Key must be sent once, 1-255 visible ASCII characters (a quoted string has its quotes stripped)", 0)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, cfg.MaxBody))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			problem(w, http.StatusRequestEntityTooLarge, CodeBodyTooLarge, fmt.Sprintf("the body is larger than %d bytes", cfg.MaxBody), 0)
		} else {
			problem(w, http.StatusBadRequest, CodeInvalidRequest, "the request body could not be read", 0)
		}
		return
	}
	fp, err := rt.fingerprint(r, rt.name, body)
	if err != nil {
		problem(w, http.StatusBadRequest, CodeInvalidRequest, "the request body is not one this route accepts", 0)
		return
	}
	id := keyID{Scope: scope, Key: key}
	// From here on nothing depends on the client's connection: a client that hangs up does not
	// cancel the claim, the handler or the recording of its answer.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), cfg.RequestTimeout)
	defer cancel()
	r = r.WithContext(ctx)
	r.Body = io.NopCloser(bytes.NewReader(body))
	release := func() {}
	if cfg.Limiter != nil {
		unlock, ok := cfg.Limiter.Acquire(ctx, id, rt.lockTTL)
		if !ok {
			rt.inProgress()(w)
			return
		}
		var once sync.Once
		release = func() { once.Do(unlock) }
		defer release() // also when the handler panics
	}
	var answer reply
	if rt.tx != nil {
		answer = rt.serveTx(ctx, r, id, fp)
	} else {
		answer = rt.serveTwoPhase(ctx, r, id, fp)
	}
	release()
	answer(w)
}

func (rt *route) count(r Result) {
	rt.g.cfg.Metrics.Requests.WithLabelValues(rt.name, string(r)).Inc()
}

func (rt *route) inProgress() reply {
	rt.count(ResultInProgress)
	return func(w http.ResponseWriter) {
		problem(w, http.StatusConflict, CodeInProgress, "a request with this Idempotency-Key is being processed: retry it after Retry-After", rt.g.cfg.RetryAfter)
	}
}

func (rt *route) unavailable(err error, what string) reply {
	rt.g.cfg.Logger.Error("idempotency: "+what, "route", rt.name, "error", err.Error())
	return func(w http.ResponseWriter) {
		problem(w, http.StatusServiceUnavailable, CodeUnavailable, "the database failed before the answer was recorded; nothing was kept: retry with the same Idempotency-Key", rt.g.cfg.RetryAfter)
	}
}

// decide answers from the live record rec that holds the key (docs/design.md's table).
func (rt *route) decide(rec *record, fp Fingerprint, now time.Time) reply {
	switch {
	case !bytes.Equal(rec.Fingerprint, fp[:]):
		rt.count(ResultKeyReused)
		return func(w http.ResponseWriter) {
			problem(w, http.StatusUnprocessableEntity, CodeKeyReused, "this Idempotency-Key was used for another request (another route, path or body): a new request needs a new key", 0)
		}
	case rec.State == StateCompleted:
		rt.count(ResultReplayed)
		return func(w http.ResponseWriter) {
			h := w.Header()
			if rec.ContentType != nil {
				h.Set("Content-Type", *rec.ContentType)
			}
			if rec.Location != nil {
				h.Set("Location", *rec.Location)
			}
			h.Set(HeaderReplayed, "true")
			w.WriteHeader(int(*rec.Status))
			_, _ = w.Write(rec.Body)
		}
	case rec.LeaseExpires != nil && !now.Before(*rec.LeaseExpires):
		rt.count(ResultOutcomeUnknown)
		return func(w http.ResponseWriter) {
			problem(w, http.StatusConflict, CodeOutcomeUnknown, "the first request with this Idempotency-Key ran past its lease with no answer recorded (it stopped, or is still waiting on its external call); it is not run again: look the resource up (its outcome is being reconciled)", 0)
		}
	default:
		return rt.inProgress()
	}
}

// serveTx is the transactional mode.
func (rt *route) serveTx(ctx context.Context, r *http.Request, id keyID, fp Fingerprint) reply {
	cfg := &rt.g.cfg
	for range claimAttempts {
		now := rt.g.now()
		tx, err := cfg.DB.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
		if err != nil {
			return rt.unavailable(err, "begin")
		}
		defer rollback(ctx, tx) // a handler that panics must not keep the connection (after Commit: a no-op)
		claimed, existing, err := claimRow(ctx, tx, claim{keyID: id, Route: rt.name, Fingerprint: fp, Now: now,
			ExpiresAt: now.Add(cfg.TTL)}, cfg.LockTimeout)
		if !claimed || err != nil {
			rollback(ctx, tx)
			if answer := rt.unclaimed(err, existing, fp, now); answer != nil {
				return answer
			}
			continue // the record was replaced meanwhile (its TTL passed): claim again
		}
		rec := rt.run(func(rec *recorder, r *http.Request) { rt.tx(rec, r, tx) }, r)
		if !rec.storable() {
			rollback(ctx, tx)
			return rec.reply
		}
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
		defer cancel()
		if _, err := completeRow(sctx, tx, id, nil, rec.answer(), rt.g.now()); err != nil {
			rollback(sctx, tx)
			return rt.unavailable(err, "store answer")
		}
		if err := tx.Commit(sctx); err != nil {
			return rt.unavailable(err, "commit")
		}
		return rec.reply
	}
	return rt.inProgress()
}

// unclaimed answers a claim that did not take the key: 409 request_in_progress when the first
// request held its row past lock_timeout, 503 when the claim failed, else the existing record's
// answer (decide); nil when there was no record left to answer with, so the caller claims again.
func (rt *route) unclaimed(err error, existing *record, fp Fingerprint, now time.Time) reply {
	switch {
	case errors.Is(err, errLockTimeout):
		return rt.inProgress()
	case err != nil:
		return rt.unavailable(err, "claim")
	case existing == nil:
		return nil
	}
	return rt.decide(existing, fp, now)
}

// serveTwoPhase is the two-phase mode.
func (rt *route) serveTwoPhase(ctx context.Context, r *http.Request, id keyID, fp Fingerprint) reply {
	cfg := &rt.g.cfg
	for range claimAttempts {
		now := rt.g.now()
		token, lease := uuid.New(), now.Add(cfg.Lease)
		tx, err := cfg.DB.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
		if err != nil {
			return rt.unavailable(err, "begin")
		}
		claimed, existing, err := claimRow(ctx, tx, claim{keyID: id, Route: rt.name, Fingerprint: fp,
			Token: &token, Lease: &lease, Now: now, ExpiresAt: now.Add(cfg.TTL)}, cfg.LockTimeout)
		if !claimed || err != nil {
			rollback(ctx, tx)
			if answer := rt.unclaimed(err, existing, fp, now); answer != nil {
				return answer
			}
			continue // the record was replaced meanwhile (its TTL passed): claim again
		}
		if err := tx.Commit(ctx); err != nil {
			// The claim may have committed: a retry then waits out the lease (409) and is told
			// the outcome is unknown, though nothing ran. The safe side of an ambiguous commit.
			return rt.unavailable(err, "commit claim")
		}
		rec := rt.run(func(rec *recorder, r *http.Request) { rt.h.ServeHTTP(rec, r) }, r)
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
		defer cancel()
		switch {
		case rec.storable():
			ok, err := completeRow(sctx, cfg.DB, id, &token, rec.answer(), rt.g.now())
			switch {
			case err != nil:
				cfg.Logger.Error("idempotency: the answer was given but not stored: retries get request_in_progress, then request_outcome_unknown",
					"route", rt.name, "error", err.Error())
			case !ok:
				cfg.Logger.Warn("idempotency: the claim was gone when its answer came (expired past the TTL and replaced, or deleted): answer not stored",
					"route", rt.name)
			}
		case rec.code() >= 500 && !rec.release.Load():
			// The external effect may have happened (a provider timeout, a crash after the call):
			// running it again could book twice. The claim stays in flight.
			cfg.Logger.Warn("idempotency: a 5xx answer leaves its claim in flight, since its external effect may have happened: "+
				"retries get request_in_progress, then request_outcome_unknown (a handler that failed before its effect began calls idempotency.ReleaseClaim)",
				"route", rt.name, "status", rec.code())
		default:
			if _, err := cfg.DB.Exec(sctx, stmts.SQL("idempotency_key_release"), id.Tenant, id.Principal, id.Key, &token); err != nil {
				cfg.Logger.Error("idempotency: an answer that is not stored could not release its claim: retries get request_in_progress, then request_outcome_unknown",
					"route", rt.name, "error", err.Error())
			}
		}
		return rec.reply
	}
	return rt.inProgress()
}

// run runs a handler on a recorder, timed and counted as executed.
func (rt *route) run(serve func(*recorder, *http.Request), r *http.Request) *recorder {
	rec := &recorder{header: http.Header{}}
	start := time.Now()
	serve(rec, r.WithContext(context.WithValue(r.Context(), keepKey{}, rec)))
	rt.g.cfg.Metrics.CommandDuration.WithLabelValues(rt.name).Observe(time.Since(start).Seconds())
	rt.count(ResultExecuted)
	return rec
}

// rollback rolls tx back, bounded and whatever ctx's state.
func rollback(ctx context.Context, tx pgx.Tx) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	_ = tx.Rollback(rctx)
}

type keepKey struct{}

// KeepAnswer marks the answer the handler of ctx writes as stored and replayed although it is
// not 2xx: a domain answer produced after the claim that cannot change with time (docs/design.md:
// 409 key_conflict). Without it only 2xx answers are stored; any other answer is rolled back
// with the claim (docs/design.md: gate_refused, 404, failures), so a retry is processed afresh —
// except a two-phase 5xx, which leaves its claim in flight (ReleaseClaim).
// Called outside a guarded handler it does nothing.
func KeepAnswer(ctx context.Context) {
	if rec, ok := ctx.Value(keepKey{}).(*recorder); ok {
		rec.keep.Store(true)
	}
}

// ReleaseClaim marks the answer the handler of ctx writes as given before its effect began — a
// failure before the external call (the handler's own database down, a provider it never
// reached) — so that a two-phase claim is deleted with a 5xx answer too and a retry is processed
// afresh (docs/design.md: "failures before the commit" are rolled back with the claim). Without
// it a two-phase 5xx answer leaves the claim in flight: the effect may have happened (a provider
// that timed out may have booked), so retries get 409 request_in_progress until the lease ends,
// then 409 request_outcome_unknown, and the call is never made twice. Answers below 500 that are
// not stored are released anyway; in the transactional mode every answer that is not stored rolls
// back with the effect, so ReleaseClaim changes nothing there. Called outside a guarded handler
// it does nothing.
func ReleaseClaim(ctx context.Context) {
	if rec, ok := ctx.Value(keepKey{}).(*recorder); ok {
		rec.release.Store(true)
	}
}

// recorder buffers a handler's answer until it is settled.
type recorder struct {
	header  http.Header
	sent    http.Header // header as it was at WriteHeader, as net/http sends it
	status  int
	body    bytes.Buffer
	keep    atomic.Bool // KeepAnswer
	release atomic.Bool // ReleaseClaim
}

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(status int) {
	if r.status == 0 {
		r.status, r.sent = status, r.header.Clone()
	}
}

// headers are the answer's headers: as they were at WriteHeader, or now when it was never called.
func (r *recorder) headers() http.Header {
	if r.sent != nil {
		return r.sent
	}
	return r.header
}

func (r *recorder) Write(b []byte) (int, error) {
	r.WriteHeader(http.StatusOK)
	return r.body.Write(b)
}

func (r *recorder) code() int { return cmp.Or(r.status, http.StatusOK) }

func (r *recorder) storable() bool {
	return r.code() >= 200 && r.code() < 300 || r.keep.Load()
}

func (r *recorder) answer() answer {
	h := r.headers()
	return answer{Status: r.code(), Location: h.Get("Location"), ContentType: h.Get("Content-Type"), Body: r.body.Bytes()}
}

// reply writes the handler's own answer (all its headers).
func (r *recorder) reply(w http.ResponseWriter) {
	for k, v := range r.headers() {
		w.Header()[k] = v
	}
	w.WriteHeader(r.code())
	_, _ = w.Write(r.body.Bytes())
}
