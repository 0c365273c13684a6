// Command provider-sim serves the deterministic provider simulator (providers/simulator) over
// HTTP for the demo, docker compose and manual tests.
//
// Every flag has an environment variable; a flag given on the command line wins:
//
//	-addr       PROVIDER_SIM_ADDR       listen address (default 127.0.0.1:18080)
//	-providers  PROVIDER_SIM_PROVIDERS  capability map, format of samples/providers.yaml (required)
//	-truth      PROVIDER_SIM_TRUTH      truth file, format of samples/provider-truth.json (default: none)
//	-shift      PROVIDER_SIM_SHIFT      Go duration added to every truth createdAt (default 0)
//	-epoch      PROVIDER_SIM_EPOCH      RFC 3339 time of the sample's first record; Shift = now − epoch
//	                                    at start, so the sample's first record is "now" (excludes -shift)
//	-seed       PROVIDER_SIM_SEED       fault RNG seed (default 1)
//	-faults     PROVIDER_SIM_FAULTS     faults at start, JSON as for PUT /admin/faults (default none)
//
// It logs JSON to stderr and shuts down gracefully on SIGINT or SIGTERM.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/bookrecon/bookrecon/internal/telemetry"
	"github.com/bookrecon/bookrecon/providers"
	"github.com/bookrecon/bookrecon/providers/simulator"
)

// shutdownTimeout bounds the graceful shutdown: in-flight calls get this long to finish.
const shutdownTimeout = 10 * time.Second

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, deps{args: os.Args[1:], lookupEnv: os.LookupEnv, stderr: os.Stderr, now: time.Now})
	if errors.Is(err, errHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "provider-sim:", err)
		os.Exit(1)
	}
}

// errHelp: -h or -help printed the usage; not a failure.
var errHelp = errors.New("help requested")

// deps is what run takes from its surroundings, so that a test can start it in-process.
type deps struct {
	args      []string
	lookupEnv func(string) (string, bool)
	stderr    io.Writer
	// now is the simulator's clock; the epoch shift is computed from it at start.
	now func() time.Time
	// listening, when set, is told the address once the listener is open.
	listening func(net.Addr)
}

// config is the parsed command line and environment.
type config struct {
	addr      string
	providers string
	truth     string
	shift     time.Duration
	epoch     time.Time // zero: no epoch given
	seed      int64
	faults    simulator.Faults
}

func run(ctx context.Context, d deps) error {
	cfg, err := parseConfig(d.args, d.lookupEnv)
	if err != nil {
		return err
	}
	lv, _ := d.lookupEnv("BOOKRECON_LOG_LEVEL")
	level, lerr := telemetry.ParseLevel(lv)
	log := telemetry.NewLogger(d.stderr, "provider-sim", level)
	if lerr != nil {
		log.Warn("BOOKRECON_LOG_LEVEL ignored; logging at info", "err", lerr)
	}

	m, err := providers.LoadMap(cfg.providers)
	if err != nil {
		return err
	}
	truth := simulator.Truth{}
	if cfg.truth != "" {
		if truth, err = simulator.LoadTruth(cfg.truth); err != nil {
			return err
		}
	}
	for name := range truth {
		if !m.Known(name) {
			log.Warn("truth names a provider missing from the capability map", "provider", name)
		}
	}
	shift := cfg.shift
	if !cfg.epoch.IsZero() {
		shift = d.now().Sub(cfg.epoch)
	}
	sim := simulator.New(simulator.Config{
		Truth: truth, Map: m, Shift: shift, Now: d.now, Seed: cfg.seed, Faults: cfg.faults, Logger: log,
	})

	ln, err := net.Listen("tcp", cfg.addr)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	log.Info("listening", "addr", ln.Addr().String(), "providers", m.Names(), "shift", shift.String(), "seed", cfg.seed)
	if d.listening != nil {
		d.listening(ln.Addr())
	}
	return serve(ctx, ln, sim, log)
}

// serve answers on ln until ctx ends, then shuts down within shutdownTimeout.
func serve(ctx context.Context, ln net.Listener, h http.Handler, log *slog.Logger) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	log.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	err := srv.Shutdown(sctx)
	if serr := <-errc; !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	if err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	log.Info("stopped")
	return nil
}

// parseConfig reads flags, falling back on the environment; it reports every problem at once.
func parseConfig(args []string, lookupEnv func(string) (string, bool)) (config, error) {
	env := func(name, def string) string {
		if v, ok := lookupEnv(name); ok && v != "" {
			return v
		}
		return def
	}
	fs := flag.NewFlagSet("provider-sim", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	addr := fs.String("addr", env("PROVIDER_SIM_ADDR", "127.0.0.1:18080"), "listen address")
	provs := fs.String("providers", env("PROVIDER_SIM_PROVIDERS", ""), "capability map (YAML)")
	truth := fs.String("truth", env("PROVIDER_SIM_TRUTH", ""), "truth file (JSON)")
	shift := fs.String("shift", env("PROVIDER_SIM_SHIFT", ""), "Go duration added to every truth createdAt")
	epoch := fs.String("epoch", env("PROVIDER_SIM_EPOCH", ""), "RFC 3339 time of the sample's first record; shift = now - epoch")
	seed := fs.String("seed", env("PROVIDER_SIM_SEED", "1"), "fault RNG seed")
	faults := fs.String("faults", env("PROVIDER_SIM_FAULTS", ""), "faults at start, JSON")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(os.Stdout)
			fmt.Fprintln(os.Stdout, "usage: provider-sim [flags]  (each flag also reads PROVIDER_SIM_<NAME>)")
			fs.PrintDefaults()
			return config{}, errHelp
		}
		return config{}, fmt.Errorf("flags: %w", err)
	}

	cfg := config{addr: *addr, providers: *provs, truth: *truth}
	var problems []error
	if fs.NArg() > 0 {
		problems = append(problems, fmt.Errorf("unexpected arguments %q", fs.Args()))
	}
	if cfg.addr == "" {
		problems = append(problems, errors.New("-addr: empty"))
	}
	if cfg.providers == "" {
		problems = append(problems, errors.New("-providers (PROVIDER_SIM_PROVIDERS): required"))
	}
	if *shift != "" && *epoch != "" {
		problems = append(problems, errors.New("-shift and -epoch exclude each other"))
	}
	if *shift != "" {
		d, err := time.ParseDuration(*shift)
		if err != nil {
			problems = append(problems, fmt.Errorf("-shift: %q is not a Go duration", *shift))
		}
		cfg.shift = d
	}
	if *epoch != "" {
		t, err := time.Parse(time.RFC3339Nano, *epoch)
		if err != nil {
			problems = append(problems, fmt.Errorf("-epoch: %q is not an RFC 3339 time", *epoch))
		}
		cfg.epoch = t
	}
	s, err := strconv.ParseInt(*seed, 10, 64)
	if err != nil {
		problems = append(problems, fmt.Errorf("-seed: %q is not an integer", *seed))
	}
	cfg.seed = s
	if *faults != "" {
		if err := json.Unmarshal([]byte(*faults), &cfg.faults); err != nil {
			problems = append(problems, fmt.Errorf("-faults: %w", err))
		} else if err := cfg.faults.Validate(); err != nil {
			problems = append(problems, fmt.Errorf("-faults: %w", err))
		}
	}
	if len(problems) > 0 {
		return config{}, fmt.Errorf("invalid configuration: %w", errors.Join(problems...))
	}
	return cfg, nil
}
