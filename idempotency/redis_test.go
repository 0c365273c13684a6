package idempotency

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bookrecon/bookrecon/internal/postgres"
)

// TestLimiterReleasedOnlyByOwner: a lock whose PX ran out while its holder still ran is taken by
// another request; the old holder's release (Lua compare-and-delete) leaves the new lock alone.
func TestLimiterReleasedOnlyByOwner(t *testing.T) {
	t.Parallel()
	f := &fixture{t: t}
	f.metrics, _ = NewMetrics(nil)
	f.log = newLogBuffer()
	rs := startRedis(t)
	l := f.openLimiter(rs)
	raw := redis.NewClient(&redis.Options{Addr: strings.TrimPrefix(strings.TrimSuffix(rs.URL(), "/0"), "redis://")})
	defer func() { _ = raw.Close() }()
	ctx := context.Background()
	id := keyID{Scope: Scope{Tenant: "t_a", Principal: "svc_1"}, Key: "k1"}
	releaseOld, ok := l.Acquire(ctx, id, 150*time.Millisecond)
	if !ok {
		t.Fatal("first Acquire not acquired")
	}
	if _, ok := l.Acquire(ctx, id, time.Minute); ok {
		t.Fatal("second Acquire acquired a held lock")
	}
	oldToken := raw.Get(ctx, "idem:lock:t_a:svc_1:k1").Val()
	for raw.Exists(ctx, "idem:lock:t_a:svc_1:k1").Val() == 1 {
		time.Sleep(10 * time.Millisecond)
	}
	releaseNew, ok := l.Acquire(ctx, id, time.Minute)
	if !ok {
		t.Fatal("Acquire after the PX ran out not acquired")
	}
	newToken := raw.Get(ctx, "idem:lock:t_a:svc_1:k1").Val()
	releaseOld()
	if got := raw.Get(ctx, "idem:lock:t_a:svc_1:k1").Val(); got != newToken || got == oldToken || len(got) != 32 {
		t.Fatalf("after the old holder's release the lock holds %q, want the new token %q (old %q)", got, newToken, oldToken)
	}
	releaseNew()
	if n := raw.Exists(ctx, "idem:lock:t_a:svc_1:k1").Val(); n != 0 {
		t.Fatal("the owner's release left its lock")
	}
	if f.limiter(LimiterAcquired) != 2 || f.limiter(LimiterContended) != 1 || f.limiter(LimiterRedisError) != 0 {
		t.Fatalf("acquired %d contended %d redis_error %d, want 2 1 0", f.limiter(LimiterAcquired), f.limiter(LimiterContended), f.limiter(LimiterRedisError))
	}
}

// TestLimiterLockPX: the lock lives RequestTimeout + LeaseMargin in the transactional mode and
// the lease in the two-phase mode; a contended request answers 409 without touching PostgreSQL
// (its Guard's pool is closed).
func TestLimiterLockPX(t *testing.T) {
	t.Parallel()
	rs := startRedis(t)
	for _, mode := range []string{"transactional", "two-phase"} {
		t.Run(mode, func(t *testing.T) {
			f := setup(t)
			l := f.openLimiter(rs)
			cfg := Config{RequestTimeout: 20 * time.Second, LeaseMargin: 3 * time.Second, Lease: 40 * time.Second, Limiter: l}
			h := newHold()
			handler := func(g *Guard) http.Handler {
				if mode == "transactional" {
					return g.Transactional(routeTx, f.holdTx(h, nil))
				}
				return g.TwoPhase(routeTx, f.twoPhase(h, nil))
			}
			srv := serve(t, handler(f.guard(cfg)))
			closed, err := postgres.Open(context.Background(), f.url, 1)
			if err != nil {
				t.Fatal(err)
			}
			closed.Close()
			cfgClosed := cfg
			cfgClosed.DB = closed
			other := serve(t, handler(f.guard(cfgClosed)))
			key := "px-" + mode
			first := make(chan resp)
			go func() { first <- f.do(srv, req{Key: key, Body: `{}`}) }()
			<-h.entered
			raw := redis.NewClient(&redis.Options{Addr: strings.TrimPrefix(strings.TrimSuffix(rs.URL(), "/0"), "redis://")})
			defer func() { _ = raw.Close() }()
			pttl := raw.PTTL(context.Background(), "idem:lock:t_a:svc_1:"+key).Val()
			want := 23 * time.Second
			if mode == "two-phase" {
				want = 40 * time.Second
			}
			if pttl > want || pttl < want-2*time.Second {
				t.Errorf("lock PTTL %v, want about %v", pttl, want)
			}
			wantProblem(t, f.do(other, req{Key: key, Body: `{}`}), http.StatusConflict, CodeInProgress)
			close(h.release)
			wantCreated(t, <-first, 1)
			if f.limiter(LimiterAcquired) != 1 || f.limiter(LimiterContended) != 1 || f.execs.Load() != 1 {
				t.Fatalf("acquired %d contended %d execs %d, want 1 1 1", f.limiter(LimiterAcquired), f.limiter(LimiterContended), f.execs.Load())
			}
			if n := raw.Exists(context.Background(), "idem:lock:t_a:svc_1:"+key).Val(); n != 0 {
				t.Fatal("the lock outlived its request")
			}
		})
	}
}

// TestRedisDownFailsOpen: with Redis stopped, every request goes on to PostgreSQL alone, counted
// and logged once; still exactly one execution. When Redis answers again the limiter is back.
func TestRedisDownFailsOpen(t *testing.T) {
	t.Parallel()
	f := setup(t)
	rs := startRedis(t)
	l := f.openLimiter(rs)
	srv := serve(t, f.guard(Config{Limiter: l}).Transactional(routeTx, f.txCreate(func(*http.Request) { time.Sleep(50 * time.Millisecond) })))
	rs.Stop()
	const n = 16
	answers := make([]resp, n)
	var wg sync.WaitGroup
	for i := range answers {
		wg.Go(func() { answers[i] = f.do(srv, req{Key: "k1", Body: `{}`}) })
	}
	wg.Wait()
	firsts := checkAnswers(t, answers, 1)
	if firsts != 1 || f.execs.Load() != 1 || f.effects() != 1 {
		t.Fatalf("first answers %d execs %d effects %d, want 1 1 1", firsts, f.execs.Load(), f.effects())
	}
	if f.limiter(LimiterRedisError) != n || f.limiter(LimiterAcquired) != 0 {
		t.Fatalf("redis_error %d acquired %d, want %d 0", f.limiter(LimiterRedisError), f.limiter(LimiterAcquired), n)
	}
	if c := strings.Count(f.log.String(), "redis in-flight limiter unreachable"); c != 1 {
		t.Fatalf("logged the outage %d times, want once:\n%s", c, f.log)
	}
	rs.Start()
	wantReplay(t, f.do(srv, req{Key: "k1", Body: `{}`}), 1)
	if f.limiter(LimiterAcquired) != 1 || strings.Count(f.log.String(), "redis in-flight limiter reachable again") != 1 {
		t.Fatalf("acquired %d after Redis came back, want 1; log:\n%s", f.limiter(LimiterAcquired), f.log)
	}
}

// TestRedisStoppedMidRun: Redis goes away while a two-phase request holds its lock; the
// duplicate falls back to PostgreSQL (409 request_in_progress), the holder's release fails
// (counted), the answer is stored and replayed; one execution.
func TestRedisStoppedMidRun(t *testing.T) {
	t.Parallel()
	f := setup(t)
	rs := startRedis(t)
	h := newHold()
	srv := serve(t, f.guard(Config{RequestTimeout: 5 * time.Second, LeaseMargin: time.Second, Limiter: f.openLimiter(rs)}).
		TwoPhase(route2, f.twoPhase(h, nil)))
	first := make(chan resp)
	go func() { first <- f.do(srv, req{Key: "k1", Body: `{}`}) }()
	<-h.entered
	rs.Stop()
	wantProblem(t, f.do(srv, req{Key: "k1", Body: `{}`}), http.StatusConflict, CodeInProgress)
	close(h.release)
	wantCreated(t, <-first, 1)
	wantReplay(t, f.do(srv, req{Key: "k1", Body: `{}`}), 1)
	// acquired: the first; redis_error: the duplicate's SET, the first's release, the replay's SET.
	if f.limiter(LimiterAcquired) != 1 || f.limiter(LimiterRedisError) != 3 || f.execs.Load() != 1 {
		t.Fatalf("acquired %d redis_error %d execs %d, want 1 3 1", f.limiter(LimiterAcquired), f.limiter(LimiterRedisError), f.execs.Load())
	}
}

// checkAnswers checks that every answer is the first 201 of row id, its faithful replay, or 409
// request_in_progress — never a 5xx — and returns how many were first answers.
func checkAnswers(t *testing.T, answers []resp, id int) int {
	t.Helper()
	firsts := 0
	for _, a := range answers {
		switch {
		case a.Status == 201 && a.Header.Get(HeaderReplayed) == "":
			firsts++
			wantCreated(t, a, id)
		case a.Status == 201:
			wantReplay(t, a, id)
		default:
			wantProblem(t, a, http.StatusConflict, CodeInProgress)
		}
	}
	return firsts
}

// TestParallelIdenticalFirstRequests: 16 identical first requests with one key, spread over two
// server instances (a pool and a Guard each), in both modes, with Redis on and off: exactly one
// execution; every other answer a 409 request_in_progress or a faithful replay; never a 5xx
// (and so never a 23505).
func TestParallelIdenticalFirstRequests(t *testing.T) {
	t.Parallel()
	rs := startRedis(t)
	for _, mode := range []string{"transactional", "two-phase"} {
		for _, withRedis := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/redis=%v", mode, withRedis), func(t *testing.T) {
				f := setup(t)
				var srvs []*httptest.Server
				for range 2 {
					pool, err := postgres.Open(context.Background(), f.url, 20)
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(pool.Close)
					cfg := Config{DB: pool, RequestTimeout: 5 * time.Second, LeaseMargin: time.Second}
					if withRedis {
						cfg.Limiter = f.openLimiter(rs)
					}
					g := f.guard(cfg)
					slow := func(*http.Request) { time.Sleep(100 * time.Millisecond) }
					if mode == "transactional" {
						srvs = append(srvs, serve(t, g.Transactional(routeTx, f.txCreate(slow))))
					} else {
						srvs = append(srvs, serve(t, g.TwoPhase(routeTx, f.twoPhase(nil, func(w http.ResponseWriter, r *http.Request, n int64) {
							slow(r)
							created(w, 1, n)
						}))))
					}
				}
				const n = 16
				answers := make([]resp, n)
				start := make(chan struct{})
				var wg sync.WaitGroup
				for i := range answers {
					wg.Go(func() {
						<-start
						answers[i] = f.do(srvs[i%2], req{Key: "same-key", Body: `{"a":1}`})
					})
				}
				close(start)
				wg.Wait()
				if firsts := checkAnswers(t, answers, 1); firsts != 1 || f.execs.Load() != 1 {
					t.Fatalf("first answers %d execs %d, want 1 1", firsts, f.execs.Load())
				}
				if mode == "transactional" && f.effects() != 1 {
					t.Fatalf("effects %d, want 1", f.effects())
				}
				if f.records() != 1 {
					t.Fatalf("records %d, want 1", f.records())
				}
				if withRedis && f.limiter(LimiterRedisError) != 0 {
					t.Fatalf("redis_error %d, want 0", f.limiter(LimiterRedisError))
				}
			})
		}
	}
}

// TestRedisSlowFailsOpen: a Redis that accepts connections but does not answer (its process
// stopped) costs a request the Limiter's timeout (DefaultLimiterTimeout), then PostgreSQL alone
// decides; counted as redis_error.
func TestRedisSlowFailsOpen(t *testing.T) {
	t.Parallel()
	f := setup(t)
	rs := startRedis(t)
	srv := serve(t, f.guard(Config{Limiter: f.openLimiterTimeout(rs, 0)}).Transactional(routeTx, f.txCreate(nil)))
	rs.Pause()
	defer rs.Resume()
	start := time.Now()
	wantCreated(t, f.do(srv, req{Key: "k1", Body: `{}`}), 1)
	wantReplay(t, f.do(srv, req{Key: "k1", Body: `{}`}), 1)
	if took := time.Since(start); took < 2*DefaultLimiterTimeout || took > 5*time.Second {
		t.Fatalf("two requests took %v, want at least two limiter timeouts (%v) and well under 5 s", took, DefaultLimiterTimeout)
	}
	if f.limiter(LimiterRedisError) != 2 || f.limiter(LimiterAcquired) != 0 || f.execs.Load() != 1 {
		t.Fatalf("redis_error %d acquired %d execs %d, want 2 0 1", f.limiter(LimiterRedisError), f.limiter(LimiterAcquired), f.execs.Load())
	}
}
