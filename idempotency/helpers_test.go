package idempotency

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/bookrecon/bookrecon/internal/harness/logtest"
	"github.com/bookrecon/bookrecon/internal/harness/pgtest"
	"github.com/bookrecon/bookrecon/internal/postgres"
)

// Test scopes come from headers: a test stand-in for the authentication middleware, never a
// production ScopeFunc (doc.go).
const (
	hdrTenant    = "X-Test-Tenant"
	hdrPrincipal = "X-Test-Principal"
)

func headerScope(r *http.Request) (Scope, error) {
	s := Scope{Tenant: r.Header.Get(hdrTenant), Principal: r.Header.Get(hdrPrincipal)}
	if s.Tenant == "" || s.Principal == "" {
		return Scope{}, errors.New("no test scope")
	}
	return s, nil
}

// clock is an injectable clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock(t time.Time) *clock { return &clock{t: t} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

func (c *clock) Advance(d time.Duration) { c.Set(c.Now().Add(d)) }

// fixture is one test's database, clock, metrics and effect counter.
type fixture struct {
	t       *testing.T
	url     string
	pool    *pgxpool.Pool
	clock   *clock
	reg     *prometheus.Registry
	metrics *Metrics
	log     *logtest.Buffer
	execs   atomic.Int64 // handler runs
}

// setup makes a migrated database with the test handlers' effect table.
func setup(t *testing.T) *fixture {
	t.Helper()
	url := pgtest.NewURL(t)
	return setupOn(t, url)
}

func setupOn(t *testing.T, url string) *fixture {
	t.Helper()
	pool, err := postgres.Open(context.Background(), url, 40)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if _, err := pool.Exec(context.Background(), `CREATE TABLE IF NOT EXISTS test_effect (
		id bigserial PRIMARY KEY, tenant text NOT NULL, body text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{t: t, url: url, pool: pool, clock: newClock(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)),
		reg: reg, metrics: m, log: newLogBuffer()}
}

func newLogBuffer() *logtest.Buffer { return &logtest.Buffer{} }

// guard builds a Guard over f's database (or cfg.DB), clock and metrics; cfg's zero fields take
// the test defaults.
func (f *fixture) guard(cfg Config) *Guard {
	f.t.Helper()
	if cfg.DB == nil {
		cfg.DB = f.pool
	}
	if cfg.Scope == nil {
		cfg.Scope = headerScope
	}
	cfg.Metrics = f.metrics
	cfg.Logger = slog.New(slog.NewTextHandler(f.log, nil))
	cfg.test.now = f.clock.Now
	g, err := New(cfg)
	if err != nil {
		f.t.Fatal(err)
	}
	return g
}

// effects is the number of rows the handlers wrote.
func (f *fixture) effects() int {
	f.t.Helper()
	var n int
	if err := f.pool.QueryRow(context.Background(), "SELECT count(*) FROM test_effect").Scan(&n); err != nil {
		f.t.Fatal(err)
	}
	return n
}

// records is the number of idempotency records.
func (f *fixture) records() int {
	f.t.Helper()
	var n int
	if err := f.pool.QueryRow(context.Background(), "SELECT count(*) FROM idempotency_key").Scan(&n); err != nil {
		f.t.Fatal(err)
	}
	return n
}

// requests is bookrecon_idempotency_requests_total{route, result}.
func (f *fixture) requests(route string, r Result) int {
	return int(testutil.ToFloat64(f.metrics.Requests.WithLabelValues(route, string(r))))
}

func (f *fixture) limiter(r LimiterResult) int {
	return int(testutil.ToFloat64(f.metrics.Limiter.WithLabelValues(string(r))))
}

// txCreate is a transactional handler that writes a row and answers 201 with Location,
// Content-Type, a header that is not replayed (X-Run) and the row in its body. Its effect is
// f.execs and the row.
func (f *fixture) txCreate(before func(r *http.Request)) TxHandler {
	return func(w http.ResponseWriter, r *http.Request, tx pgx.Tx) {
		n := f.execs.Add(1)
		if before != nil {
			before(r)
		}
		body, _ := io.ReadAll(r.Body)
		var id int64
		if err := tx.QueryRow(r.Context(), "INSERT INTO test_effect (tenant, body) VALUES ($1, $2) RETURNING id",
			r.Header.Get(hdrTenant), string(body)).Scan(&id); err != nil {
			http.Error(w, "insert failed", http.StatusInternalServerError)
			return
		}
		created(w, id, n)
	}
}

func created(w http.ResponseWriter, id, run int64) {
	w.Header().Set("Location", fmt.Sprintf("/v1/things/%d", id))
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Run", strconv.FormatInt(run, 10))
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, `{"id":%d}`, id)
}

// resp is an answer as the client saw it.
type resp struct {
	Status int
	Header http.Header
	Body   string
}

// req describes a request; zero fields take the defaults.
type req struct {
	Key       string // "-": no header
	Body      string
	Tenant    string // default t_a
	Principal string // default svc_1
	Path      string // default /v1/things
}

func (f *fixture) do(srv *httptest.Server, q req) resp {
	f.t.Helper()
	r, err := newRequest(context.Background(), srv.URL, q)
	if err != nil {
		f.t.Fatal(err)
	}
	res, err := srv.Client().Do(r)
	if err != nil {
		f.t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		f.t.Fatal(err)
	}
	return resp{Status: res.StatusCode, Header: res.Header, Body: string(b)}
}

func newRequest(ctx context.Context, base string, q req) (*http.Request, error) {
	path := q.Path
	if path == "" {
		path = "/v1/things"
	}
	r, err := http.NewRequestWithContext(ctx, http.MethodPost, base+path, strings.NewReader(q.Body))
	if err != nil {
		return nil, err
	}
	if q.Key != "-" {
		r.Header.Set(HeaderKey, q.Key)
	}
	r.Header.Set(hdrTenant, or(q.Tenant, "t_a"))
	r.Header.Set(hdrPrincipal, or(q.Principal, "svc_1"))
	r.Header.Set("Content-Type", "application/json")
	return r, nil
}

func or(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

// serve serves h at POST /v1/things (and /v1/other) on a test server.
func serve(t *testing.T, h http.Handler) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle("POST /v1/things", h)
	mux.Handle("POST /v1/other", h)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

// problemCode is the code member of a problem body ("" when there is none).
func problemCode(body string) string {
	const m = `"code":"`
	i := strings.Index(body, m)
	if i < 0 {
		return ""
	}
	rest := body[i+len(m):]
	return rest[:strings.IndexByte(rest, '"')]
}

// wantProblem fails unless got is the problem status/code with application/problem+json.
func wantProblem(t *testing.T, got resp, status int, code string) {
	t.Helper()
	if got.Status != status || problemCode(got.Body) != code || got.Header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("answer %d %s %q (%s), want %d %s application/problem+json", got.Status, problemCode(got.Body), got.Body,
			got.Header.Get("Content-Type"), status, code)
	}
	if got.Header.Get(HeaderReplayed) != "" {
		t.Fatalf("a problem carries %s: %q", HeaderReplayed, got.Header.Get(HeaderReplayed))
	}
}

// wantCreated fails unless got is the first (not replayed) 201 of row id.
func wantCreated(t *testing.T, got resp, id int) {
	t.Helper()
	if got.Status != 201 || got.Header.Get("Location") != fmt.Sprintf("/v1/things/%d", id) || got.Body != fmt.Sprintf(`{"id":%d}`, id) ||
		got.Header.Get(HeaderReplayed) != "" {
		t.Fatalf("answer %d Location %q body %q replayed %q, want 201 /v1/things/%d, not replayed", got.Status,
			got.Header.Get("Location"), got.Body, got.Header.Get(HeaderReplayed), id)
	}
}

// wantReplay fails unless got replays the 201 of row id exactly: status, Location, Content-Type,
// body and Idempotent-Replayed: true, and no header of the first answer beyond those.
func wantReplay(t *testing.T, got resp, id int) {
	t.Helper()
	want := map[string]string{"Location": fmt.Sprintf("/v1/things/%d", id), "Content-Type": "application/json",
		HeaderReplayed: "true", "Content-Length": strconv.Itoa(len(fmt.Sprintf(`{"id":%d}`, id)))}
	h := map[string]string{}
	for k := range got.Header {
		if k != "Date" {
			h[k] = strings.Join(got.Header.Values(k), ",")
		}
	}
	if got.Status != 201 || got.Body != fmt.Sprintf(`{"id":%d}`, id) || fmt.Sprint(h) != fmt.Sprint(want) {
		t.Fatalf("replay %d %q headers %v, want 201 {\"id\":%d} headers %v", got.Status, got.Body, h, id, want)
	}
}

// redisServer is a redis-server of one test's own, on a free port, that the test may stop and
// start again.
type redisServer struct {
	t    *testing.T
	port int
	dir  string
	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

func startRedis(t *testing.T) *redisServer {
	t.Helper()
	if testing.Short() {
		t.Skip("needs redis-server; skipped under -short")
	}
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatal("redis-server not found: install Debian's redis-server (scripts/stack.sh up installs it)")
	}
	s := &redisServer{t: t, port: freePort(t), dir: t.TempDir()}
	s.Start()
	t.Cleanup(s.Stop)
	return s
}

func (s *redisServer) URL() string { return fmt.Sprintf("redis://127.0.0.1:%d/0", s.port) }

// Start starts the server on its port and waits until it answers PING.
func (s *redisServer) Start() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	cmd := exec.Command("redis-server", "--port", strconv.Itoa(s.port), "--bind", "127.0.0.1", "--save", "",
		"--appendonly", "no", "--dir", s.dir, "--logfile", filepath.Join(s.dir, "redis.log"))
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("start redis-server: %v", err)
	}
	s.cmd, s.done = cmd, make(chan struct{})
	go func(done chan struct{}) { _ = cmd.Wait(); close(done) }(s.done)
	c := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", s.port)})
	defer func() { _ = c.Close() }()
	for deadline := time.Now().Add(10 * time.Second); ; {
		if c.Ping(context.Background()).Err() == nil {
			return
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
			s.t.Fatalf("redis-server on %d does not answer:\n%s", s.port, b)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Pause stops the server's process (SIGSTOP): connections open, nothing answers — a slow Redis.
// Resume (SIGCONT) lets it go on.
func (s *redisServer) Pause()  { s.signal(syscall.SIGSTOP) }
func (s *redisServer) Resume() { s.signal(syscall.SIGCONT) }

func (s *redisServer) signal(sig syscall.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.cmd.Process.Signal(sig); err != nil {
		s.t.Fatal(err)
	}
}

// Stop kills the server (as a crash) and waits until it is gone.
func (s *redisServer) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.done
	s.cmd = nil
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// openLimiter is a Limiter on s, counted in f's metrics, whose commands may take 2 s (a loaded
// test machine dialling afresh; TestRedisSlowFailsOpen tests the default bound).
func (f *fixture) openLimiter(s *redisServer) *Limiter {
	f.t.Helper()
	return f.openLimiterTimeout(s, 2*time.Second)
}

func (f *fixture) openLimiterTimeout(s *redisServer, timeout time.Duration) *Limiter {
	f.t.Helper()
	l, err := OpenLimiter(s.URL(), LimiterOptions{Timeout: timeout, Metrics: f.metrics, Logger: slog.New(slog.NewTextHandler(f.log, nil))})
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { _ = l.Close() })
	return l
}

// waitLockWaiters waits until n backends of f's database wait on a lock (a duplicate waiting on
// the primary key).
func (f *fixture) waitLockWaiters(n int) {
	f.t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; {
		var got int
		if err := f.pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&got); err != nil {
			f.t.Fatal(err)
		}
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("%d backends wait on a lock, want %d", got, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
