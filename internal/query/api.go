package query

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bookrecon/bookrecon/events"
	"github.com/bookrecon/bookrecon/internal/auth"
	"github.com/bookrecon/bookrecon/internal/problem"
	"github.com/bookrecon/bookrecon/internal/service"
	"github.com/bookrecon/bookrecon/providers"
)

// Config configures the query API.
type Config struct {
	// Infra is where the API finds its database and its admin address: of it Run reads
	// DatabaseURL (required), Pooler, MaxDBConns (default 10; below Needs().Min() Run refuses to
	// start) and AdminAddr, where the runner (service.Run) serves /metrics, /livez, /readyz and
	// pprof, unauthenticated (default 127.0.0.1:9104; never the API's address and never "-":
	// docs/api.md, "Authentication"). The API only reads: it neither migrates nor relays, so it
	// has no brokers.
	service.Infra
	// Addr is where Run listens for the API, the /v1 routes only (default 127.0.0.1:8080).
	Addr string
	// Started, when set, receives the API's bound address (useful with ":0"); Deps.AdminStarted
	// receives the admin address.
	Started func(addr string)
	// Tokens authenticate every /v1 request (required); each route needs attempts:read and
	// the token's tenant. Run re-reads them on SIGHUP and on change (auth.Tokens.Watch).
	Tokens *auth.Tokens
	// Providers is the capability map (required): maxVersions per provider.
	Providers *providers.Map
	// Now is the gate's clock: the start of the version being asked about (default time.Now).
	Now func() time.Time
	// QueryTimeout bounds one request's database work (default 5s).
	QueryTimeout time.Duration
}

func (c Config) withDefaults() Config {
	c.Addr = cmp.Or(c.Addr, "127.0.0.1:8080")
	c.AdminAddr = cmp.Or(c.AdminAddr, "127.0.0.1:9104")
	c.QueryTimeout = cmp.Or(c.QueryTimeout, 5*time.Second)
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

func (c Config) validate() error {
	var errs []error
	if c.Providers == nil {
		errs = append(errs, errors.New("query: Config.Providers is required"))
	}
	if c.Tokens == nil {
		errs = append(errs, errors.New("query: Config.Tokens is required: every /v1 route authenticates"))
	}
	if c.AdminAddr == "-" {
		errs = append(errs, errors.New(`query: Config.AdminAddr must not be "-": /metrics, /livez and /readyz are served only there, never on the API's address`))
	}
	if c.QueryTimeout < 0 {
		errs = append(errs, errors.New("query: Config.QueryTimeout must not be negative"))
	}
	return errors.Join(errs...)
}

// API is the read-only HTTP query API for booking services (see the package comment). It is an
// http.Handler serving the /v1 routes only, each authorized first; Run serves /metrics, /livez
// and /readyz on the admin address.
type API struct {
	cfg     Config
	db      DB
	log     *slog.Logger
	metrics *Metrics
	mux     *http.ServeMux
}

// New builds the API on db; reg receives its metrics (nil: a private registry).
func New(cfg Config, db DB, logger *slog.Logger, reg prometheus.Registerer) (*API, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	m, err := NewMetrics(reg)
	if err != nil {
		return nil, err
	}
	a := &API{cfg: cfg, db: db, log: cmp.Or(logger, slog.Default()), metrics: m, mux: http.NewServeMux()}
	// Every route, the fallbacks included, authorizes first (attempts:read and, where the
	// pattern has {tenant}, the token's tenant): before validation, and before telling a caller
	// whether a route exists.
	a.mux.Handle("GET /v1/tenants/{tenant}/intents/{intent}", a.instrument(routeIntentStatus, a.intentStatus))
	a.mux.Handle("GET /v1/tenants/{tenant}/intents/{intent}/operations/{operation}/retry-gate", a.instrument(routeRetryGate, a.retryGate))
	a.mux.Handle("GET /", a.instrument(routeOther, func(w http.ResponseWriter, _ *http.Request) int {
		return writeError(w, http.StatusNotFound, "not_found", "no such route")
	}))
	// The API only reads: any other method, on any path, is refused in the API's error shape
	// (ServeMux's own 405 would be plain text).
	a.mux.Handle("/", a.instrument(routeOther, func(w http.ResponseWriter, _ *http.Request) int {
		w.Header().Set("Allow", "GET, HEAD")
		return writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", "the API only answers GET and HEAD")
	}))
	return a, nil
}

// Metrics returns the API's metrics.
func (a *API) Metrics() *Metrics { return a.metrics }

// ServeHTTP serves the /v1 routes.
func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) { a.mux.ServeHTTP(w, r) }

// Ready reports whether the database answers and holds the schema.
func (a *API) Ready(ctx context.Context) error {
	var ok bool
	if err := a.db.QueryRow(ctx, `SELECT to_regclass('booking_attempt') IS NOT NULL`).Scan(&ok); err != nil {
		return err
	}
	if !ok {
		return errors.New("schema not migrated: booking_attempt missing")
	}
	return nil
}

// handlerFunc writes one response and returns its status code.
type handlerFunc func(w http.ResponseWriter, r *http.Request) int

// instrument authorizes the request (auth.Tokens.Authorize, scope attempts:read) before h
// runs, bounds h by QueryTimeout, and counts the answer.
func (a *API) instrument(route string, h handlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		ctx, cancel := context.WithTimeout(r.Context(), a.cfg.QueryTimeout)
		defer cancel()
		var code int
		if p, denied := a.cfg.Tokens.Authorize(r, auth.ScopeAttemptsRead); denied != nil {
			code = problem.Write(w, denied)
		} else {
			code = h(w, r.WithContext(auth.NewContext(ctx, p)))
		}
		a.metrics.Requests.WithLabelValues(route, strconv.Itoa(code)).Inc()
		a.metrics.Duration.WithLabelValues(route).Observe(time.Since(start).Seconds())
	})
}

func (a *API) intentStatus(w http.ResponseWriter, r *http.Request) int {
	st, g, err := Status(r.Context(), a.db, a.cfg.Providers, r.PathValue("tenant"), r.PathValue("intent"), a.cfg.Now())
	if err != nil {
		return a.fail(w, r, routeIntentStatus, err)
	}
	a.metrics.gateAnswer(events.OpBook, g)
	return writeJSON(w, http.StatusOK, st)
}

func (a *API) retryGate(w http.ResponseWriter, r *http.Request) int {
	s := Subject{TenantID: r.PathValue("tenant"), BookingIntentID: r.PathValue("intent"),
		Operation: events.Operation(r.PathValue("operation")), Subject: r.URL.Query().Get("subject")}
	g, err := Gate(r.Context(), a.db, a.cfg.Providers, s, a.cfg.Now())
	if err != nil {
		return a.fail(w, r, routeRetryGate, err)
	}
	a.metrics.gateAnswer(s.Operation, g)
	return writeJSON(w, http.StatusOK, g)
}

// fail writes err: 400 for an *InvalidError, 404 for ErrNotFound, 500 otherwise (logged; the
// body says nothing of the cause).
func (a *API) fail(w http.ResponseWriter, r *http.Request, route string, err error) int {
	var inv *InvalidError
	switch {
	case errors.As(err, &inv):
		return writeError(w, http.StatusBadRequest, inv.Code, inv.Param+" "+inv.Detail)
	case errors.Is(err, ErrNotFound):
		return writeError(w, http.StatusNotFound, "not_found", "the intent has no BOOK attempt")
	}
	a.log.ErrorContext(r.Context(), "query failed", "route", route, "err", err)
	return writeError(w, http.StatusInternalServerError, "internal_error", "the query failed; retry later")
}

// writeError answers an RFC 9457 problem (internal/problem) with a stable code:
// invalid_tenant, invalid_intent, invalid_operation, invalid_subject, missing_subject,
// not_found, method_not_allowed, internal_error (and unauthenticated, forbidden from
// internal/auth). detail never quotes a request value.
func writeError(w http.ResponseWriter, status int, code, detail string) int {
	return problem.Write(w, problem.New(status, code, detail))
}

func writeJSON(w http.ResponseWriter, code int, v any) int {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
	return code
}

// Deps are the API's injected dependencies, those of every service; AdminStarted receives the
// admin server's bound address (Config.Started the API's).
type Deps = service.Deps

// Needs are what the API holds at once: a request's connection and the readiness check's.
func Needs() service.Needs {
	return service.Needs{{What: "a request", Conns: 1}, service.ReadinessNeed}
}

// spec is how service.Run runs the API: a pool, no migration, no Kafka, the admin listener on
// Infra.AdminAddr.
func (c Config) spec() service.Spec {
	return service.Spec{Name: "query-api", Infra: c.Infra, Needs: Needs(), DefaultConns: 10}
}

// PoolConfig is the pool Run opens for c; Run refuses to start when its Validate fails.
func (c Config) PoolConfig() service.PoolConfig { return c.spec().PoolConfig() }

// Run serves the API on cfg.Addr until ctx ends, then shuts it down within 5 s; the runner
// (service.Run) serves /metrics, /livez, /readyz (the database answers and holds the schema)
// and pprof on cfg.AdminAddr, and closes the pool last. cfg.Tokens are re-read on SIGHUP and on
// change (auth.Tokens.Watch) for as long as Run runs. Both addresses are bound before the pool
// is opened (waiting for PostgreSQL like every service; no migration), so one in use stops Run
// at once: the API's with an error naming BOOKRECON_QUERY_ADDR, the admin's with
// telemetry.ErrAdminAddr.
func Run(ctx context.Context, cfg Config, deps Deps) error {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return fmt.Errorf("query API address %s: %w (is another process listening there? choose another with BOOKRECON_QUERY_ADDR)", cfg.Addr, err)
	}
	defer ln.Close() // closed by the API's server too; a second Close is harmless
	bg, stop := context.WithCancel(context.WithoutCancel(ctx))
	wait, err := cfg.Tokens.Watch(bg)
	if err != nil {
		stop()
		return err
	}
	defer func() { stop(); wait() }()
	var api *API
	return service.Run(ctx, cfg.spec(), deps, service.Body{
		Start: func(_ context.Context, rt *service.Runtime) error {
			var err error
			if api, err = New(cfg, rt.Pool, rt.Logger, rt.Registry); err != nil {
				return err
			}
			rt.ReadyWhen(api.Ready)
			return nil
		},
		Loop: func(ctx context.Context, _ *service.Runtime) error { return serve(ctx, api, ln, cfg.Started) },
	})
}

// serve serves api on ln until ctx ends, then shuts down within 5 s. started, when set, gets
// ln's address.
func serve(ctx context.Context, api *API, ln net.Listener, started func(addr string)) error {
	cfg := api.cfg
	srv := &http.Server{Handler: api, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: cfg.QueryTimeout + 5*time.Second, IdleTimeout: 2 * time.Minute}
	api.log.Info("query API listening", "addr", ln.Addr().String())
	if started != nil {
		started(ln.Addr().String())
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	shutdownErr := srv.Shutdown(sctx)
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return shutdownErr
}
