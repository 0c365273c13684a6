package query

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/bookrecon/bookrecon/events"
	"github.com/bookrecon/bookrecon/internal/service"
	"github.com/bookrecon/bookrecon/providers"
)

// Config configures the query API.
type Config struct {
	// Infra is where the API finds its database: of it Run reads DatabaseURL (required),
	// Pooler and MaxDBConns (default 10; below Needs().Min() Run refuses to start). The API only
	// reads: it neither migrates nor relays, so it has no brokers, and it serves /metrics,
	// /livez and /readyz on Addr beside the API, not on an admin address of its own.
	service.Infra
	// Addr is where Run listens for the API, /metrics, /livez and /readyz (default
	// 127.0.0.1:8080).
	Addr string
	// Providers is the capability map (required): maxVersions per provider.
	Providers *providers.Map
	// Now is the gate's clock: the start of the version being asked about (default time.Now).
	Now func() time.Time
	// QueryTimeout bounds one request's database work (default 5s).
	QueryTimeout time.Duration
}

func (c Config) withDefaults() Config {
	c.Addr = cmp.Or(c.Addr, "127.0.0.1:8080")
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
	if c.QueryTimeout < 0 {
		errs = append(errs, errors.New("query: Config.QueryTimeout must not be negative"))
	}
	return errors.Join(errs...)
}

// API is the read-only HTTP query API for booking services (see the package comment). It is an
// http.Handler serving the /v1 routes only; Run adds /metrics, /livez and /readyz.
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

func (a *API) instrument(route string, h handlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		ctx, cancel := context.WithTimeout(r.Context(), a.cfg.QueryTimeout)
		defer cancel()
		code := h(w, r.WithContext(ctx))
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

// ErrorBody is the JSON body of every 4xx and 5xx the API writes.
type ErrorBody struct {
	// Error is a stable code: invalid_tenant, invalid_intent, invalid_operation,
	// invalid_subject, missing_subject, not_found, internal_error.
	Error string `json:"error"`
	// Message explains it; it never quotes a request value.
	Message string `json:"message"`
}

func writeError(w http.ResponseWriter, code int, errCode, msg string) int {
	return writeJSON(w, code, ErrorBody{Error: errCode, Message: msg})
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
// API's bound address (which serves /metrics too).
type Deps = service.Deps

// Needs are what the API holds at once: a request's connection and the readiness check's.
func Needs() service.Needs {
	return service.Needs{{What: "a request", Conns: 1}, service.ReadinessNeed}
}

// spec is how service.Run runs the API: a pool, no migration, no Kafka, no admin listener.
func (c Config) spec() service.Spec {
	infra := c.Infra
	infra.AdminAddr = "-" // the API's own listener serves /metrics, /livez, /readyz
	return service.Spec{Name: "query-api", Infra: infra, Needs: Needs(), DefaultConns: 10}
}

// PoolConfig is the pool Run opens for c; Run refuses to start when its Validate fails.
func (c Config) PoolConfig() service.PoolConfig { return c.spec().PoolConfig() }

// Run opens the pool (waiting for PostgreSQL like every service; no migration) and serves the
// API until ctx ends (serve); the pool closes last.
func Run(ctx context.Context, cfg Config, deps Deps) error {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return err
	}
	return service.RunLoop(ctx, cfg.spec(), deps, func(ctx context.Context, rt *service.Runtime) error {
		return serve(ctx, cfg, rt.Pool, rt.Logger, rt.Registry, deps.AdminStarted)
	})
}

// serve serves the API with /metrics (reg), /livez and /readyz (the database answers and holds
// the schema) on cfg.Addr until ctx ends, then shuts down within 5 s. started, when set, gets
// the bound address (useful with ":0").
func serve(ctx context.Context, cfg Config, db DB, logger *slog.Logger, reg *prometheus.Registry, started func(addr string)) error {
	api, err := New(cfg, db, logger, reg)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/", api)
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("GET /livez", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := api.Ready(ctx); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
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
