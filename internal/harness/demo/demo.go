// Package demo runs the whole pipeline on the normative sample (samples/README.md, "Replaying"):
// the provider simulator, the ingester, the reconciler, the escalator and the query API in one
// process, each started as its binary starts it (its own pool, outbox relay and /metrics); it
// publishes samples/attempts.jsonl rebased to now, publishes the manual decisions once the
// escalation they settle is out, shows live progress, and compares the end state with
// samples/expected.json, one line per scenario.
package demo

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/bookrecon/bookrecon/internal/attempt"
	"github.com/bookrecon/bookrecon/internal/auth"
	"github.com/bookrecon/bookrecon/internal/escalate"
	"github.com/bookrecon/bookrecon/internal/ingest"
	"github.com/bookrecon/bookrecon/internal/postgres"
	"github.com/bookrecon/bookrecon/internal/publish"
	"github.com/bookrecon/bookrecon/internal/query"
	"github.com/bookrecon/bookrecon/internal/reconcile"
	"github.com/bookrecon/bookrecon/internal/service"
	"github.com/bookrecon/bookrecon/internal/telemetry"
	"github.com/bookrecon/bookrecon/internal/topics"
	"github.com/bookrecon/bookrecon/providers"
	"github.com/bookrecon/bookrecon/providers/simulator"
)

// Topics are the pipeline's topics.
type Topics = topics.Names

// Options configure a demo run.
type Options struct {
	Brokers     []string
	DatabaseURL string // a database the demo may fill (the CLI gives it a fresh one)
	// MigrateDatabaseURL is a direct session to it for the migrations (default DatabaseURL;
	// required behind a transaction pooler).
	MigrateDatabaseURL string
	Pooler             postgres.Pooler // what DatabaseURL reaches (default none)
	SamplesDir         string
	Topics             Topics // default topics.Default()
	Group              string // consumer group (default the ingester's)
	// Addresses; ":0" picks a free port. Defaults: simulator 127.0.0.1:18080, ingester 9101,
	// reconciler 9102, escalator 9103.
	SimAddr, IngesterAddr, ReconcilerAddr, EscalatorAddr string
	// QueryAddr serves the query API (default 127.0.0.1:8080), QueryAdminAddr its /metrics
	// (default 127.0.0.1:9104).
	QueryAddr, QueryAdminAddr string
	// TokenDir is where the demo writes the query API's tokens file (tokens.yaml) and the one
	// token it issues, for tenant t_globetrek with attempts:read (token, mode 0600, for curl);
	// the token is never printed. Default: a temporary folder removed after the run.
	TokenDir string
	// AssertAfter is when, after the first record, the end state is read (default 125s; the
	// samples README allows 120–180s).
	AssertAfter time.Duration
	Out         io.Writer // progress and report (default io.Discard)
	Live        bool      // refresh the progress line in place (a terminal)
	Logger      *slog.Logger
}

func (o *Options) defaults() {
	if o.Topics == (Topics{}) {
		o.Topics = topics.Default()
	}
	o.SimAddr = cmp.Or(o.SimAddr, "127.0.0.1:18080")
	o.IngesterAddr = cmp.Or(o.IngesterAddr, "127.0.0.1:9101")
	o.ReconcilerAddr = cmp.Or(o.ReconcilerAddr, "127.0.0.1:9102")
	o.EscalatorAddr = cmp.Or(o.EscalatorAddr, "127.0.0.1:9103")
	o.QueryAddr = cmp.Or(o.QueryAddr, "127.0.0.1:8080")
	o.QueryAdminAddr = cmp.Or(o.QueryAdminAddr, "127.0.0.1:9104")
	o.AssertAfter = cmp.Or(o.AssertAfter, 125*time.Second)
	if o.Out == nil {
		o.Out = io.Discard
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// Result is a finished run: the report and the endpoints it served.
type Result struct {
	Report   Report
	Observed *Observed
	Metrics  map[string]string // service → metrics URL
	// QueryURL is the query API's base URL; TokenFile holds its token (Options.TokenDir).
	QueryURL, TokenFile string
}

// Run runs the demo and returns its report; err is for failures to run, not for ✗ lines.
func Run(ctx context.Context, o Options) (*Result, error) {
	o.defaults()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	path := func(n string) string { return filepath.Join(o.SamplesDir, n) }
	pmap, err := providers.LoadMap(path("providers.yaml"))
	if err != nil {
		return nil, err
	}
	exp, err := LoadExpected(path("expected.json"))
	if err != nil {
		return nil, err
	}
	lines, err := publish.ReadLines(path("attempts.jsonl"))
	if err != nil {
		return nil, err
	}
	decisions, err := publish.ReadLines(path("manual-decisions.jsonl"))
	if err != nil {
		return nil, err
	}
	epoch, ok := publish.Epoch(lines)
	if !ok {
		return nil, errors.New("demo: attempts.jsonl has no occurredAt")
	}
	truth, err := simulator.LoadTruth(path("provider-truth.json"))
	if err != nil {
		return nil, err
	}
	// The demo's own pool (progress, end state) migrates first, as `bookrecon migrate` would.
	pool, err := service.OpenPool(ctx, o.Logger, service.PoolConfig{Name: "demo", URL: o.DatabaseURL,
		MigrateURL: o.MigrateDatabaseURL, Pooler: o.Pooler, MaxConns: 4, Migrate: true})
	if err != nil {
		return nil, err
	}
	defer pool.Close()

	start := time.Now()
	shift := start.Sub(epoch)
	sim := simulator.New(simulator.Config{Truth: truth, Map: pmap, Shift: shift})
	simURL, err := serve(ctx, o.SimAddr, sim)
	if err != nil {
		return nil, fmt.Errorf("demo: simulator: %w", err)
	}

	res := &Result{Metrics: map[string]string{}}
	qLog, qReg := o.Logger.With("service", "query-api"), telemetry.NewRegistry()
	tokens, tokenFile, cleanup, err := issueToken(o, qLog, qReg)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	res.TokenFile = tokenFile
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	addrs := make(chan [2]string, 5)
	started := func(svc string) func(string) {
		return func(a string) { addrs <- [2]string{svc, "http://" + a + "/metrics"} }
	}
	// Each service is started as cmd/<service> starts it; one that fails ends the demo.
	run := func(svc string, f func() error) {
		wg.Go(func() {
			if err := f(); err != nil && ctx.Err() == nil {
				o.Logger.Error(svc+" stopped", "err", err)
				cancel()
			}
		})
	}
	// Demo settings of samples/README.md: first check 1s after UNKNOWN, then 2, 4, 8, 10, 10 …
	// s; polls every 250ms; inProgressTimeout 60s; deadlines from providers.yaml (30s).
	infra := func(addr string) service.Infra {
		return service.Infra{Brokers: o.Brokers, DatabaseURL: o.DatabaseURL, MigrateDatabaseURL: o.MigrateDatabaseURL, Pooler: o.Pooler,
			AdminAddr: addr}
	}
	deps := func(svc string) service.Deps {
		return service.Deps{Logger: o.Logger.With("service", svc), AdminStarted: started(svc)}
	}
	run("ingester", func() error {
		return ingest.Run(ctx, ingest.Config{Infra: infra(o.IngesterAddr), Providers: pmap, Group: o.Group, Topics: o.Topics,
			FirstCheck: time.Second}, deps("ingester"))
	})
	store := attempt.Config{ResolutionsTopic: o.Topics.Resolutions, EscalationsTopic: o.Topics.Escalations}
	run("reconciler", func() error {
		return reconcile.Run(ctx, reconcile.Config{Infra: infra(o.ReconcilerAddr), Provider: providers.NewHTTP(simURL, &http.Client{}),
			Providers: pmap, Poll: 250 * time.Millisecond, InitialInterval: time.Second, Multiplier: 2, MaxInterval: 10 * time.Second,
			NoJitter: true, InProgressTimeout: 60 * time.Second, FirstCheck: time.Second, CallTimeout: 2 * time.Second, Store: store},
			deps("reconciler"))
	})
	run("escalator", func() error {
		return escalate.Run(ctx, escalate.Config{Infra: infra(o.EscalatorAddr), Providers: pmap, Poll: 250 * time.Millisecond,
			Store: attempt.Config{Policies: attempt.PoliciesFrom(pmap), ResolutionsTopic: o.Topics.Resolutions, EscalationsTopic: o.Topics.Escalations}},
			deps("escalator"))
	})
	run("query-api", func() error {
		// As cmd/query-api: a pool of its own, no migration.
		return query.Run(ctx, query.Config{Infra: service.Infra{DatabaseURL: o.DatabaseURL, Pooler: o.Pooler, MaxDBConns: 4,
			AdminAddr: o.QueryAdminAddr}, Addr: o.QueryAddr, Started: func(a string) { addrs <- [2]string{"", "http://" + a} },
			Providers: pmap, Tokens: tokens},
			query.Deps{Logger: qLog, Registry: qReg, AdminStarted: started("query-api")})
	})
	for range 5 {
		select {
		case a := <-addrs:
			if a[0] == "" {
				res.QueryURL = a[1]
			} else {
				res.Metrics[a[0]] = a[1]
			}
		case <-ctx.Done():
			return nil, errors.New("demo: a service failed to start (see the log)")
		case <-time.After(60 * time.Second):
			return nil, errors.New("demo: services did not start within 60s")
		}
	}
	fmt.Fprintf(o.Out, "provider simulator  %s\n", simURL)
	for _, s := range []string{"ingester", "reconciler", "escalator", "query-api"} {
		fmt.Fprintf(o.Out, "%-19s %s\n", s+" metrics", res.Metrics[s])
	}
	fmt.Fprintf(o.Out, "%-19s curl -H \"Authorization: Bearer $(cat %s)\" %s/v1/tenants/t_globetrek/intents/bi_sc03  (…/operations/BOOK/retry-gate)\n",
		"query API", tokenFile, res.QueryURL)

	prod, err := kgo.NewClient(kgo.SeedBrokers(o.Brokers...))
	if err != nil {
		return nil, err
	}
	defer prod.Close()
	pubErr := make(chan error, 2)
	wg.Go(func() {
		pubErr <- publish.Run(ctx, prod, lines, publish.Options{Topic: o.Topics.Attempts, Shift: shift, Paced: true})
	})
	wg.Go(func() { pubErr <- publishDecisions(ctx, o, prod, decisions, shift, start) })

	deadline := start.Add(o.AssertAfter)
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	published := 0
	for time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return nil, errors.New("demo: stopped before the end state")
		case err := <-pubErr:
			if err != nil {
				return nil, err
			}
			published++
		case <-tick.C:
			progress(ctx, o, pool, res.Metrics["ingester"], time.Since(start), deadline.Sub(start))
		}
	}
	if published < 2 {
		return nil, errors.New("demo: publishing did not finish in time")
	}
	// Quiet: the outbox drained.
	for i := 0; i < 100; i++ {
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE discarded_at IS NULL`).Scan(&n); err == nil && n == 0 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if o.Live {
		fmt.Fprintln(o.Out)
	}
	obs, err := Observe(ctx, pool, o.Brokers, o.Topics)
	if err != nil {
		return nil, err
	}
	if err := scrapeCounters(ctx, res.Metrics["ingester"], obs); err != nil {
		return nil, err
	}
	res.Observed = obs
	res.Report = Compare(exp, obs)
	return res, nil
}

// publishDecisions publishes the manual decisions at their shifted occurredAt, and not before
// the escalation.opened they settle has been read from the escalations topic; absent at 100s,
// the run fails (samples/README.md).
func publishDecisions(ctx context.Context, o Options, prod *kgo.Client, lines [][]byte, shift time.Duration, start time.Time) error {
	c, err := kgo.NewClient(kgo.SeedBrokers(o.Brokers...), kgo.ConsumeTopics(o.Topics.Escalations),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return err
	}
	defer c.Close()
	limit := start.Add(100 * time.Second)
	for found := false; !found; {
		pctx, cancel := context.WithDeadline(ctx, limit)
		fs := c.PollFetches(pctx)
		cancel()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Now().After(limit) {
			return errors.New("demo: no escalation.opened for (t_globetrek, book:bi_sc20:v1, no_lookup_capability) by 100s")
		}
		fs.EachRecord(func(r *kgo.Record) {
			v := string(r.Value)
			if strings.Contains(v, `"reason":"no_lookup_capability"`) && strings.Contains(v, `"idempotencyKey":"book:bi_sc20:v1"`) &&
				strings.Contains(v, `"tenantId":"t_globetrek"`) && strings.Contains(v, `"eventType":"escalation.opened"`) {
				found = true
			}
		})
	}
	return publish.Run(ctx, prod, lines, publish.Options{Topic: o.Topics.Decisions, Shift: shift, Paced: true})
}

// issueToken writes the query API's tokens file in o.TokenDir (a temporary folder when unset,
// removed by cleanup) with one new token for tenant t_globetrek, attempts:read, principal demo,
// and the token beside it in a file of mode 0600; it returns the opened tokens and the token's
// file.
func issueToken(o Options, log *slog.Logger, reg prometheus.Registerer) (tokens *auth.Tokens, tokenFile string, cleanup func(), err error) {
	dir, cleanup := o.TokenDir, func() {}
	if dir == "" {
		if dir, err = os.MkdirTemp("", "bookrecon-demo-auth-"); err != nil {
			return nil, "", nil, err
		}
		cleanup = func() { _ = os.RemoveAll(dir) }
	} else if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, "", nil, err
	}
	tok, hash := auth.NewToken()
	tokenFile = filepath.Join(dir, "token")
	f := auth.File{Tokens: []auth.Entry{{SHA256: hash, Tenant: "t_globetrek", Principal: "demo",
		Scopes: []auth.Scope{auth.ScopeAttemptsRead}, Created: time.Now().UTC().Truncate(time.Second)}}}
	if err = auth.WriteFile(filepath.Join(dir, "tokens.yaml"), f); err == nil {
		err = os.WriteFile(tokenFile, []byte(tok+"\n"), 0o600)
	}
	if err == nil {
		tokens, err = auth.Open(filepath.Join(dir, "tokens.yaml"), log, reg)
	}
	if err != nil {
		cleanup()
		return nil, "", nil, fmt.Errorf("demo: the query API's token: %w", err)
	}
	return tokens, tokenFile, cleanup, nil
}

func serve(ctx context.Context, addr string, h http.Handler) (string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	return "http://" + ln.Addr().String(), nil
}
