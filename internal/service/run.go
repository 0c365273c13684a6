package service

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net"
	"sync"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/bookrecon/bookrecon/internal/postgres"
	"github.com/bookrecon/bookrecon/internal/telemetry"
)

// Every service has one shape: a package with a Config that embeds Infra and a
// Run(ctx, cfg, Deps) that blocks until ctx ends, built on the Run below — the ingester, the
// reconciler, the escalator and the query API alike. Its cmd/<service>/main.go parses flags
// into that Config and calls Run under Main; nothing else.

// Infra is where a service finds what it runs on. Every service's Config embeds it; a zero
// field takes the service's default.
type Infra struct {
	// Brokers are the Kafka seed brokers, host:port (required by the services that consume or
	// relay the outbox; the query API has none).
	Brokers []string
	// DatabaseURL is the PostgreSQL URL (required).
	DatabaseURL string
	// MigrateDatabaseURL is a direct session to the same database, used only by the migrations
	// ("": DatabaseURL; required behind a transaction pooler, see PoolConfig).
	MigrateDatabaseURL string
	// Pooler is what DatabaseURL reaches ("": none).
	Pooler postgres.Pooler
	// MaxDBConns bounds the pool (0: the service's default; below its Needs().Min() Run refuses
	// to start with a postgres.ErrConfig).
	MaxDBConns int32
	// AdminAddr serves /metrics, /livez and /readyz ("": the service's default; "-": none).
	AdminAddr string
}

// Deps are a service's injected dependencies, the same for every service.
type Deps struct {
	Logger   *slog.Logger         // nil: slog.Default()
	Registry *prometheus.Registry // nil: a fresh telemetry.NewRegistry()
	// AdminStarted, when set, receives the admin server's bound address (useful with ":0").
	AdminStarted func(addr string)
}

// WithDefaults returns d with its nil Logger and Registry set.
func (d Deps) WithDefaults() Deps {
	if d.Logger == nil {
		d.Logger = slog.Default()
	}
	if d.Registry == nil {
		d.Registry = telemetry.NewRegistry()
	}
	return d
}

// DefaultRunConns is the pool of the reconciler and the escalator when Infra.MaxDBConns is 0.
const DefaultRunConns = 4

// RunNeeds are the parts of a service with a single loop that hold a database connection at the
// same time: its loop, the outbox relay and the readiness check (the reconciler, the escalator).
func RunNeeds() Needs {
	return Needs{{What: "its loop", Conns: 1}, RelayNeed, ReadinessNeed}
}

// Spec is how Run runs one service.
type Spec struct {
	// Name names the service: in messages, as the Kafka client's id and in its relay's holder.
	Name  string
	Infra Infra
	// Needs are the service's parts that hold connections at once; a pool below Needs.Min() is
	// refused.
	Needs Needs
	// DefaultConns is the pool when Infra.MaxDBConns is 0 (0: Needs.Min()).
	DefaultConns int32
	// Migrate brings the schema up to date over Infra.MigrateDatabaseURL before the service
	// starts (the query API, which only reads, does not).
	Migrate bool
	// Publish starts the part that publishes the service's outbox rows beside its loop
	// (relay.ForService: a Kafka client on Infra.Brokers, the outbox relay and a broker watch;
	// where relays run: docs/decisions.md). nil: Run starts none (the query API publishes
	// nothing; the ingester starts its own relay on its consumer's client in Body.Start).
	Publish Publish
}

// Publish starts, on a service's pool, the part that publishes its outbox rows (relay.ForService).
// name is the service's (Spec.Name); reg receives the part's metrics.
type Publish func(name string, pool *pgxpool.Pool, log *slog.Logger, reg *prometheus.Registry) (Publisher, error)

// Publisher is a running service's publishing part.
type Publisher interface {
	// Run publishes until ctx ends, then closes what the part opened.
	Run(ctx context.Context)
	// Ready is the part's share of /readyz: nil while it can publish.
	Ready() error
}

// PoolConfig is the pool Run opens for s; a service's cmd validates it when its flags are parsed.
func (s Spec) PoolConfig() PoolConfig {
	return PoolConfig{Name: s.Name, URL: s.Infra.DatabaseURL, MigrateURL: s.Infra.MigrateDatabaseURL, Pooler: s.Infra.Pooler,
		MaxConns: cmp.Or(s.Infra.MaxDBConns, s.DefaultConns), Needs: s.Needs, Migrate: s.Migrate}
}

// Runtime is what Run hands a service's Body: what it opened, and two hooks into the rest.
type Runtime struct {
	Pool     *pgxpool.Pool
	Logger   *slog.Logger
	Registry *prometheus.Registry

	bg    context.Context
	wg    *sync.WaitGroup
	ready []func(context.Context) error
}

// Go runs f in the background on a context that ends in phase two of the shutdown, after
// Body.Loop has returned; Run waits for f before it closes the pool (maintenance loops, the
// ingester's relay).
func (rt *Runtime) Go(f func(ctx context.Context)) { rt.wg.Go(func() { f(rt.bg) }) }

// ReadyWhen adds check to /readyz, asked before Run's own checks (the relay, a broker, a
// database ping). Call it from Body.Start.
func (rt *Runtime) ReadyWhen(check func(context.Context) error) { rt.ready = append(rt.ready, check) }

// Body is a service's own part of Run.
type Body struct {
	// Start, when set, runs once the pool is open, before Spec.Publish's part and the admin
	// server start; an error ends Run (the ingester: its Kafka client, its retention check and
	// first partition maintenance, waiting out outages, and its relay).
	Start func(ctx context.Context, rt *Runtime) error
	// Loop is the service's work: it runs until ctx ends, and Run returns its error after the
	// shutdown.
	Loop func(ctx context.Context, rt *Runtime) error
}

// Run runs one service: it binds the admin address (an address in use fails at once with
// telemetry.ErrAdminAddr, before anything is dialled), opens and migrates the pool (OpenPool: a
// configuration error — a pool smaller than s.Needs, a transaction pooler without a direct URL
// to migrate over — returns at once as a postgres.ErrConfig; an outage is waited out), runs
// body.Start, starts s.Publish's part and the admin server, and runs body.Loop until ctx ends.
// /readyz is ready while the checks of Runtime.ReadyWhen pass, the publishing part is ready
// (relay.ForService: no outbox topic paused, a broker answered within kafka.AnsweredWithin) and
// PostgreSQL answers. Shutdown is two-phase: once Loop has returned (intake stopped, the work in
// hand finished), the background work stops — the publishing part (relay.ForService: the relay,
// then its Kafka client), the admin server, Runtime.Go — and the pool closes last.
func Run(ctx context.Context, s Spec, deps Deps, body Body) error {
	deps = deps.WithDefaults()
	log, reg := deps.Logger, deps.Registry
	var admin net.Listener
	if s.Infra.AdminAddr != "-" {
		ln, err := telemetry.Listen(s.Infra.AdminAddr)
		if err != nil {
			return err
		}
		admin = ln
		defer admin.Close() // closed by the admin server too; a second Close is harmless
	}
	pool, err := OpenPool(ctx, log, s.PoolConfig())
	if err != nil {
		return err
	}
	defer pool.Close()
	bg, stop := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stop()
	rt := &Runtime{Pool: pool, Logger: log, Registry: reg, bg: bg, wg: &wg}
	if body.Start != nil {
		if err := body.Start(ctx, rt); err != nil {
			return err
		}
	}
	checks := rt.ready
	if s.Publish != nil {
		pub, err := s.Publish(s.Name, pool, log, reg)
		if err != nil {
			return fmt.Errorf("%s: %w", s.Name, err)
		}
		wg.Go(func() { pub.Run(bg) })
		// Ready only while it can publish (relay.ForService: a broker answered lately, whether
		// or not this service's relay holds the lease now).
		checks = append(checks, func(context.Context) error { return pub.Ready() })
	}
	checks = append(checks, func(ctx context.Context) error { return pool.Ping(ctx) })
	if admin != nil {
		ready := func(ctx context.Context) error {
			for _, check := range checks {
				if err := check(ctx); err != nil {
					return err
				}
			}
			return nil
		}
		wg.Go(func() {
			if err := telemetry.ServeListener(bg, admin, reg, ready, log, deps.AdminStarted); err != nil {
				log.Error("admin server", "err", err)
			}
		})
	}
	return body.Loop(ctx, rt)
}

// LoopSpec is the Spec of a service that is one loop beside the part that publishes its outbox
// rows (the reconciler, the escalator: publish is relay.ForService): RunNeeds, a pool of
// DefaultRunConns unless infra says otherwise, migrated; infra.AdminAddr "" is adminAddr.
func LoopSpec(name string, infra Infra, adminAddr string, publish Publish) Spec {
	infra.AdminAddr = cmp.Or(infra.AdminAddr, adminAddr)
	return Spec{Name: name, Infra: infra, Needs: RunNeeds(), DefaultConns: DefaultRunConns, Migrate: true, Publish: publish}
}

// RunLoop is Run for a service that is one loop: loop runs on the pool until ctx ends.
func RunLoop(ctx context.Context, s Spec, deps Deps, loop func(ctx context.Context, rt *Runtime) error) error {
	return Run(ctx, s, deps, Body{Loop: loop})
}
