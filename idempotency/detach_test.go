package idempotency

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestClientHangsUpMidRequest: a client that hangs up while its request runs — a TCP close on
// HTTP/1.1, a stream reset (RST_STREAM) on HTTP/2 — cancels the connection's context but not the
// handler, which finishes and records its answer; the retry replays it with its Location. One
// execution, in both modes.
func TestClientHangsUpMidRequest(t *testing.T) {
	t.Parallel()
	for _, proto := range []string{"http1-tcp-close", "http2-stream-reset"} {
		for _, mode := range []string{"transactional", "two-phase"} {
			t.Run(proto+"/"+mode, func(t *testing.T) {
				t.Parallel()
				f := setup(t)
				g := f.guard(Config{RequestTimeout: 5 * time.Second, LeaseMargin: time.Second})
				h := newHold()
				handlerErr := make(chan error, 1) // the handler's context error as it answers
				var guarded http.Handler
				if mode == "transactional" {
					guarded = g.Transactional(routeTx, func(w http.ResponseWriter, r *http.Request, tx pgx.Tx) {
						f.holdTx(h, func(w http.ResponseWriter, id int64) {
							handlerErr <- r.Context().Err()
							created(w, id, 1)
						})(w, r, tx)
					})
				} else {
					guarded = g.TwoPhase(routeTx, f.twoPhase(h, func(w http.ResponseWriter, r *http.Request, n int64) {
						handlerErr <- r.Context().Err()
						created(w, 1, n)
					}))
				}
				// conns are the contexts of the connections' requests, as the server sees them.
				var mu sync.Mutex
				var conns []context.Context
				mux := http.NewServeMux()
				mux.Handle("POST /v1/things", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					mu.Lock()
					conns = append(conns, r.Context())
					mu.Unlock()
					guarded.ServeHTTP(w, r)
				}))
				srv := httptest.NewUnstartedServer(mux)
				if proto == "http2-stream-reset" {
					srv.EnableHTTP2 = true
					srv.StartTLS()
				} else {
					srv.Start()
				}
				t.Cleanup(srv.Close)

				ctx, hangUp := context.WithCancel(context.Background())
				r, err := newRequest(ctx, srv.URL, req{Key: "k1", Body: `{"a":1}`})
				if err != nil {
					t.Fatal(err)
				}
				gone := make(chan error)
				go func() {
					res, err := srv.Client().Do(r)
					if err == nil {
						res.Body.Close()
					}
					gone <- err
				}()
				<-h.entered
				hangUp()
				if err := <-gone; err == nil {
					t.Fatal("the hung-up request got an answer")
				}
				mu.Lock()
				first := conns[0]
				mu.Unlock()
				select {
				case <-first.Done(): // the server saw the client go
				case <-time.After(10 * time.Second):
					t.Fatal("the server never saw the client hang up")
				}
				close(h.release)
				retry := waitNotInProgress(t, f, srv, req{Key: "k1", Body: `{"a":1}`})
				wantReplay(t, retry, 1)
				if proto == "http2-stream-reset" {
					res, err := srv.Client().Get(srv.URL + "/")
					if err != nil {
						t.Fatal(err)
					}
					res.Body.Close()
					if res.ProtoMajor != 2 {
						t.Fatalf("the server spoke HTTP/%d, want 2", res.ProtoMajor)
					}
				}
				if err := <-handlerErr; err != nil || f.execs.Load() != 1 || f.requests(routeTx, ResultExecuted) != 1 {
					t.Fatalf("handler context %v execs %d executed %d, want nil 1 1", err, f.execs.Load(), f.requests(routeTx, ResultExecuted))
				}
				if mode == "transactional" && f.effects() != 1 {
					t.Fatalf("effects %d, want 1 (not rolled back)", f.effects())
				}
			})
		}
	}
}

// waitNotInProgress sends q until the answer is not 409 request_in_progress (the first request
// may still be recording its answer), for at most 10 s.
func waitNotInProgress(t *testing.T, f *fixture, srv *httptest.Server, q req) resp {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; {
		got := f.do(srv, q)
		if got.Status != http.StatusConflict || problemCode(got.Body) != CodeInProgress {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("still in progress after 10 s: %q", got.Body)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestKeyScope: the same key from two tenants, and from two principals of one tenant, names
// three requests, each replaying its own answer.
func TestKeyScope(t *testing.T) {
	t.Parallel()
	f := setup(t)
	srv := serve(t, f.guard(Config{}).Transactional(routeTx, f.txCreate(nil)))
	scopes := []req{{Tenant: "t_a", Principal: "svc_1"}, {Tenant: "t_b", Principal: "svc_1"}, {Tenant: "t_a", Principal: "svc_2"}}
	for i, s := range scopes {
		s.Key, s.Body = "shared-key", `{"a":1}`
		wantCreated(t, f.do(srv, s), i+1)
	}
	for i, s := range scopes {
		s.Key, s.Body = "shared-key", `{"a":1}`
		wantReplay(t, f.do(srv, s), i+1)
	}
	if f.execs.Load() != 3 || f.records() != 3 {
		t.Fatalf("execs %d records %d, want 3 3", f.execs.Load(), f.records())
	}
}

// TestHandlerBoundedByRequestTimeout: the detached context still ends at Config.RequestTimeout.
func TestHandlerBoundedByRequestTimeout(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ended := make(chan error, 1)
	srv := serve(t, f.guard(Config{RequestTimeout: 500 * time.Millisecond, LockTimeout: 100 * time.Millisecond, LeaseMargin: time.Second}).
		TwoPhase(route2, f.twoPhase(nil, func(w http.ResponseWriter, r *http.Request, n int64) {
			start := time.Now()
			<-r.Context().Done()
			if took := time.Since(start); took > 2*time.Second {
				t.Errorf("the handler's context ended after %v, want about 500ms", took)
			}
			ended <- r.Context().Err()
			created(w, n, n)
		})))
	wantCreated(t, f.do(srv, req{Key: "k1", Body: `{}`}), 1)
	if err := <-ended; !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("the handler's context ended with %v, want context.DeadlineExceeded", err)
	}
	wantReplay(t, f.do(srv, req{Key: "k1", Body: `{}`}), 1) // stored although the handler used up its time
}
