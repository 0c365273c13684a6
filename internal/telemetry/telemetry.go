// Package telemetry builds the services' slog logger and the admin HTTP server: /metrics
// (Prometheus), /livez (the process runs) and /readyz (its dependencies answer). Every service
// logs one JSON object per line on stderr with the same keys (docs/deploy.md, "Logs"): time,
// level, msg, service, then snake_case attributes — err for errors, topic, partition, offset,
// event_id, attempt_id — and franz-go's own lines arrive through kslog with component=franz-go.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Logger returns a JSON slog logger on stderr with the service name on every line, at the level
// BOOKRECON_LOG_LEVEL names (see ParseLevel). An unreadable level is reported on the first line
// and info is used.
func Logger(service string) *slog.Logger {
	level, err := ParseLevel(os.Getenv("BOOKRECON_LOG_LEVEL"))
	log := NewLogger(os.Stderr, service, level)
	if err != nil {
		log.Warn("BOOKRECON_LOG_LEVEL ignored; logging at info", "err", err)
	}
	return log
}

// ParseLevel reads a log level as slog.Level's UnmarshalText does (debug, info, warn, error,
// any case, with an optional offset such as warn+2); "" is slog.LevelInfo. On error the level
// is slog.LevelInfo.
func ParseLevel(v string) (slog.Level, error) {
	var l slog.Level
	if v == "" {
		return slog.LevelInfo, nil
	}
	if err := l.UnmarshalText([]byte(v)); err != nil {
		return slog.LevelInfo, err
	}
	return l, nil
}

// NewLogger returns a JSON slog logger writing to w at level, with the service name on every
// line: the one log format of every bookrecon process.
func NewLogger(w io.Writer, service string, level slog.Leveler) *slog.Logger {
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level})).With("service", service)
}

// NewRegistry returns a registry with the Go and process collectors, go_build_info and
// bookrecon_build_info.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		collectors.NewBuildInfoCollector(), NewBuildInfo())
	return reg
}

// Ready is a readiness check; nil means ready.
type Ready func(ctx context.Context) error

// ErrAdminAddr wraps a failure to bind a service's admin address.
var ErrAdminAddr = errors.New("telemetry: admin address")

// Listen binds the admin address. Services call it at start-up, before anything else, so an
// address already in use stops the service with a clear error instead of leaving it running
// without /metrics and health endpoints.
func Listen(addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%w %s: %w (is another process listening there? choose another with the service's *_ADMIN_ADDR setting)", ErrAdminAddr, addr, err)
	}
	return ln, nil
}

// Serve binds addr (Listen) and runs the admin server until ctx ends. It returns the bound
// address on started (useful with ":0").
func Serve(ctx context.Context, addr string, reg *prometheus.Registry, ready Ready, logger *slog.Logger, started func(string)) error {
	ln, err := Listen(addr)
	if err != nil {
		return err
	}
	return ServeListener(ctx, ln, reg, ready, logger, started)
}

// ServeListener runs the admin server on ln until ctx ends, then closes ln: /metrics, /livez,
// /readyz (ready) and Go's profiler under /debug/pprof/ (without /cmdline, which would show
// the command line's secrets).
func ServeListener(ctx context.Context, ln net.Listener, reg *prometheus.Registry, ready Ready, logger *slog.Logger, started func(string)) error {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("GET /livez", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := ready(ctx); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	// Go's profiler, for the admin network only (like /metrics): CPU and heap profiles of a
	// running service without a restart.
	mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	if started != nil {
		started(ln.Addr().String())
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	logger.Info("admin server listening", "addr", ln.Addr().String())
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
