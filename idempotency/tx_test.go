package idempotency

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/bookrecon/bookrecon/internal/postgres"
)

const routeTx = "POST /v1/things"

// holdTx is a transactional handler that writes its row, waits on h, then answers what answer
// writes (nil: 201 for the row).
func (f *fixture) holdTx(h *hold, answer func(w http.ResponseWriter, id int64)) TxHandler {
	return func(w http.ResponseWriter, r *http.Request, tx pgx.Tx) {
		run := f.execs.Add(1)
		var id int64
		if err := tx.QueryRow(r.Context(), "INSERT INTO test_effect (tenant, body) VALUES ($1, 'x') RETURNING id",
			r.Header.Get(hdrTenant)).Scan(&id); err != nil {
			http.Error(w, "insert failed", http.StatusInternalServerError)
			return
		}
		if h != nil {
			h.entered <- struct{}{}
			<-h.release
		}
		if answer != nil {
			answer(w, id)
			return
		}
		created(w, id, run)
	}
}

func TestTxConcurrentDuplicateWaitsLockTimeoutThen409(t *testing.T) {
	t.Parallel()
	f := setup(t)
	h := newHold()
	srv := serve(t, f.guard(Config{LockTimeout: 300 * time.Millisecond}).Transactional(routeTx, f.holdTx(h, nil)))
	first := make(chan resp)
	go func() { first <- f.do(srv, req{Key: "k1", Body: `{"a":1}`}) }()
	<-h.entered
	start := time.Now()
	dup := f.do(srv, req{Key: "k1", Body: `{"a":1}`})
	waited := time.Since(start)
	wantProblem(t, dup, http.StatusConflict, CodeInProgress)
	if dup.Header.Get("Retry-After") != "1" || waited < 300*time.Millisecond {
		t.Fatalf("Retry-After %q after %v, want 1 after at least the 300ms lock_timeout", dup.Header.Get("Retry-After"), waited)
	}
	close(h.release)
	wantCreated(t, <-first, 1)
	if f.execs.Load() != 1 || f.effects() != 1 || f.requests(routeTx, ResultInProgress) != 1 {
		t.Fatalf("execs %d effects %d in_progress %d, want 1 1 1", f.execs.Load(), f.effects(), f.requests(routeTx, ResultInProgress))
	}
}

// TestTxHandlerKeepsSessionLockTimeout: the claim's lock_timeout is put back before the handler
// runs, so the handler's own statements wait as the session says.
func TestTxHandlerKeepsSessionLockTimeout(t *testing.T) {
	t.Parallel()
	f := setup(t)
	var seen string
	srv := serve(t, f.guard(Config{LockTimeout: 300 * time.Millisecond}).Transactional(routeTx, func(w http.ResponseWriter, r *http.Request, tx pgx.Tx) {
		if err := tx.QueryRow(r.Context(), "SHOW lock_timeout").Scan(&seen); err != nil {
			t.Error(err)
		}
		f.txCreate(nil)(w, r, tx)
	}))
	wantCreated(t, f.do(srv, req{Key: "k1", Body: `{}`}), 1)
	if seen != "0" {
		t.Fatalf("the handler ran under lock_timeout %q, want the session's 0", seen)
	}
}

func TestTxFirstRollsBackDuplicateExecutes(t *testing.T) {
	t.Parallel()
	f := setup(t)
	h := newHold()
	var mu sync.Mutex
	runs := 0
	srv := serve(t, f.guard(Config{}).Transactional(routeTx, func(w http.ResponseWriter, r *http.Request, tx pgx.Tx) {
		mu.Lock()
		runs++
		first := runs == 1
		mu.Unlock()
		if first { // writes, waits, then answers 404: its row and its claim roll back
			f.holdTx(h, func(w http.ResponseWriter, _ int64) { problem(w, http.StatusNotFound, "not_found", "", 0) })(w, r, tx)
			return
		}
		f.holdTx(nil, nil)(w, r, tx)
	}))
	first := make(chan resp)
	go func() { first <- f.do(srv, req{Key: "k1", Body: `{"a":1}`}) }()
	<-h.entered
	dup := make(chan resp)
	go func() { dup <- f.do(srv, req{Key: "k1", Body: `{"a":1}`}) }()
	f.waitLockWaiters(1) // the duplicate waits on the primary key
	close(h.release)
	if got := <-first; got.Status != http.StatusNotFound {
		t.Fatalf("first: %d, want 404", got.Status)
	}
	wantCreated(t, <-dup, 2) // row 1 was rolled back with the first claim
	if f.execs.Load() != 2 || f.effects() != 1 || f.records() != 1 {
		t.Fatalf("execs %d effects %d records %d, want 2 1 1", f.execs.Load(), f.effects(), f.records())
	}
}

func TestTxFirstCommitsDuplicateReplays(t *testing.T) {
	t.Parallel()
	f := setup(t)
	h := newHold()
	srv := serve(t, f.guard(Config{}).Transactional(routeTx, f.holdTx(h, nil)))
	first := make(chan resp)
	go func() { first <- f.do(srv, req{Key: "k1", Body: `{"a":1}`}) }()
	<-h.entered
	dup := make(chan resp)
	go func() { dup <- f.do(srv, req{Key: "k1", Body: `{"a":1}`}) }()
	f.waitLockWaiters(1)
	close(h.release)
	wantCreated(t, <-first, 1)
	wantReplay(t, <-dup, 1)
	if f.execs.Load() != 1 || f.effects() != 1 || f.requests(routeTx, ResultReplayed) != 1 {
		t.Fatalf("execs %d effects %d replayed %d, want 1 1 1", f.execs.Load(), f.effects(), f.requests(routeTx, ResultReplayed))
	}
	// The transactional mode keeps no lease.
	var leased int
	if err := f.pool.QueryRow(context.Background(), `SELECT count(*) FROM idempotency_key
		WHERE token IS NOT NULL OR lease_expires_at IS NOT NULL OR state <> 'completed'`).Scan(&leased); err != nil || leased != 0 {
		t.Fatalf("%d records with a lease or not completed (%v), want 0", leased, err)
	}
}

func TestTxKeyReusedAndReplayHeaders(t *testing.T) {
	t.Parallel()
	f := setup(t)
	srv := serve(t, f.guard(Config{}).Transactional(routeTx, f.txCreate(nil)))
	wantCreated(t, f.do(srv, req{Key: "k1", Body: `{"a":1}`}), 1)
	before := f.row("k1")
	wantProblem(t, f.do(srv, req{Key: "k1", Body: `{"a":2}`}), http.StatusUnprocessableEntity, CodeKeyReused)
	if got := f.row("k1"); got != before {
		t.Fatalf("the record changed:\n%s\nwant\n%s", got, before)
	}
	wantReplay(t, f.do(srv, req{Key: "k1", Body: `{"a":1}`}), 1)
	if f.execs.Load() != 1 || f.effects() != 1 || f.requests(routeTx, ResultKeyReused) != 1 || f.requests(routeTx, ResultExecuted) != 1 {
		t.Fatalf("execs %d effects %d key_reused %d executed %d, want 1 1 1 1", f.execs.Load(), f.effects(),
			f.requests(routeTx, ResultKeyReused), f.requests(routeTx, ResultExecuted))
	}
}

func TestTxRolledBackAnswersAreProcessedAfresh(t *testing.T) {
	t.Parallel()
	f := setup(t)
	answers := []int{http.StatusNotFound, http.StatusConflict, http.StatusInternalServerError}
	srv := serve(t, f.guard(Config{}).Transactional(routeTx, func(w http.ResponseWriter, r *http.Request, tx pgx.Tx) {
		f.holdTx(nil, func(w http.ResponseWriter, id int64) {
			if int(id) <= len(answers) {
				problem(w, answers[id-1], "rolled_back", "", 0)
				return
			}
			created(w, id, id)
		})(w, r, tx)
	}))
	for _, want := range answers {
		if got := f.do(srv, req{Key: "k1", Body: `{"a":1}`}); got.Status != want {
			t.Fatalf("%d, want %d", got.Status, want)
		}
		if f.effects() != 0 || f.records() != 0 {
			t.Fatalf("after %d: effects %d records %d, want 0 0 (rolled back)", want, f.effects(), f.records())
		}
	}
	wantCreated(t, f.do(srv, req{Key: "k1", Body: `{"a":1}`}), 4)
	if f.execs.Load() != 4 || f.effects() != 1 {
		t.Fatalf("execs %d effects %d, want 4 1", f.execs.Load(), f.effects())
	}
}

func TestTxTTLExpiryReplacesAtomically(t *testing.T) {
	t.Parallel()
	f := setup(t)
	g := f.guard(Config{TTL: 24 * time.Hour})
	srv := serve(t, g.Transactional(routeTx, f.txCreate(nil)))
	wantCreated(t, f.do(srv, req{Key: "k1", Body: `{"a":1}`}), 1)
	f.clock.Advance(24*time.Hour - time.Millisecond)
	wantReplay(t, f.do(srv, req{Key: "k1", Body: `{"a":1}`}), 1)
	f.clock.Advance(time.Millisecond) // the TTL has passed: a new request, even with another body
	wantCreated(t, f.do(srv, req{Key: "k1", Body: `{"a":2}`}), 2)
	wantReplay(t, f.do(srv, req{Key: "k1", Body: `{"a":2}`}), 2)
	wantProblem(t, f.do(srv, req{Key: "k1", Body: `{"a":1}`}), http.StatusUnprocessableEntity, CodeKeyReused)
	var created time.Time
	if err := f.pool.QueryRow(context.Background(), "SELECT created_at FROM idempotency_key").Scan(&created); err != nil {
		t.Fatal(err)
	}
	if f.records() != 1 || !created.Equal(f.clock.Now()) {
		t.Fatalf("records %d created_at %v, want 1 replaced at %v", f.records(), created, f.clock.Now())
	}
	// Past the second TTL, 12 concurrent replacements: exactly one runs.
	f.clock.Advance(24 * time.Hour)
	var wg sync.WaitGroup
	answers := make([]resp, 12)
	for i := range answers {
		wg.Go(func() { answers[i] = f.do(srv, req{Key: "k1", Body: `{"a":3}`}) })
	}
	wg.Wait()
	createdN := 0
	for _, a := range answers {
		switch {
		case a.Status == 201 && a.Header.Get(HeaderReplayed) == "":
			createdN++
			wantCreated(t, a, 3)
		case a.Status == 201:
			wantReplay(t, a, 3)
		default:
			wantProblem(t, a, http.StatusConflict, CodeInProgress)
		}
	}
	if createdN != 1 || f.execs.Load() != 3 || f.effects() != 3 || f.records() != 1 {
		t.Fatalf("created %d execs %d effects %d records %d, want 1 3 3 1", createdN, f.execs.Load(), f.effects(), f.records())
	}
}

// TestUniqueAcrossPartitionBoundaries: a record written just before midnight, and just before a
// month boundary, replays just after — the key's guard does not depend on the day it was
// written in (the table is not partitioned; its primary key is the key alone).
func TestUniqueAcrossPartitionBoundaries(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"transactional", "two-phase"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			testUniqueAcrossPartitionBoundaries(t, mode)
		})
	}
}

func testUniqueAcrossPartitionBoundaries(t *testing.T, mode string) {
	f := setup(t)
	g := f.guard(Config{})
	var srv *httptest.Server
	if mode == "transactional" {
		srv = serve(t, g.Transactional(routeTx, f.txCreate(nil)))
	} else {
		srv = serve(t, g.TwoPhase(routeTx, f.twoPhase(nil, nil)))
	}
	for i, b := range []struct{ before, after time.Time }{
		{time.Date(2026, 11, 30, 23, 59, 59, 900e6, time.UTC), time.Date(2026, 12, 1, 0, 0, 0, 100e6, time.UTC)}, // midnight and month
		{time.Date(2026, 12, 14, 23, 59, 59, 999e6, time.UTC), time.Date(2026, 12, 15, 0, 0, 0, 1e6, time.UTC)},  // midnight
		{time.Date(2026, 12, 31, 23, 59, 59, 900e6, time.UTC), time.Date(2027, 1, 1, 0, 0, 0, 100e6, time.UTC)},  // year
		{time.Date(2027, 1, 31, 23, 59, 59, 0, time.UTC), time.Date(2027, 2, 28, 23, 59, 58, 0, time.UTC)},       // a month later, inside the TTL
	} {
		key := "k" + string(rune('1'+i))
		f.clock.Set(b.before)
		wantCreated(t, f.do(srv, req{Key: key, Body: `{"a":1}`}), i+1)
		f.clock.Set(b.after)
		wantReplay(t, f.do(srv, req{Key: key, Body: `{"a":1}`}), i+1)
	}
	if f.execs.Load() != 4 || f.records() != 4 {
		t.Fatalf("execs %d records %d, want 4 4", f.execs.Load(), f.records())
	}
	if mode == "transactional" && f.effects() != 4 {
		t.Fatalf("effects %d, want 4", f.effects())
	}
	// The structure that makes it so: a plain table whose primary key is the key alone.
	var kind, pk string
	err := f.pool.QueryRow(context.Background(), `SELECT c.relkind::text,
		(SELECT string_agg(a.attname, ',' ORDER BY k.ord) FROM pg_index i
		 CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord)
		 JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
		 WHERE i.indrelid = c.oid AND i.indisprimary)
		FROM pg_class c WHERE c.relname = 'idempotency_key'`).Scan(&kind, &pk)
	if err != nil || kind != "r" || pk != "tenant_id,principal,idem_key" {
		t.Fatalf("idempotency_key relkind %q primary key (%s) %v, want a plain table (r) keyed (tenant_id,principal,idem_key)", kind, pk, err)
	}
}

func TestDeleteExpiredInBoundedBatches(t *testing.T) {
	t.Parallel()
	f := setup(t)
	g := f.guard(Config{TTL: time.Hour})
	srv := serve(t, g.Transactional(routeTx, f.txCreate(nil)))
	for i, k := range []string{"k1", "k2", "k3", "k4", "k5"} {
		wantCreated(t, f.do(srv, req{Key: k, Body: `{}`}), i+1)
		f.clock.Advance(time.Minute)
	}
	f.clock.Advance(time.Hour - 3*time.Minute) // k1, k2 and k3 expired; k4, k5 not
	for _, want := range []int64{2, 1, 0} {
		n, err := g.DeleteExpired(context.Background(), 2)
		if err != nil || n != want {
			t.Fatalf("DeleteExpired = %d, %v; want %d", n, err, want)
		}
	}
	if f.records() != 2 {
		t.Fatalf("records %d, want 2 (k4, k5)", f.records())
	}
	wantReplay(t, f.do(srv, req{Key: "k4", Body: `{}`}), 4)
}

// TestTxHandlerPanicReleasesConnection: a transactional handler that panics rolls its claim
// back and gives its connection back (a pool of one: otherwise the next request waits for a
// connection until its RequestTimeout).
func TestTxHandlerPanicReleasesConnection(t *testing.T) {
	t.Parallel()
	f := setup(t)
	one, err := postgres.Open(context.Background(), f.url, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(one.Close)
	srv := serve(t, f.guard(Config{DB: one, RequestTimeout: 3 * time.Second, LockTimeout: time.Second}).Transactional(routeTx,
		func(w http.ResponseWriter, r *http.Request, tx pgx.Tx) {
			if f.execs.Load() == 0 {
				f.execs.Add(1)
				panic(http.ErrAbortHandler) // net/http closes the connection without logging
			}
			f.txCreate(nil)(w, r, tx)
		}))
	q, err := newRequest(context.Background(), srv.URL, req{Key: "k1", Body: `{}`})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := srv.Client().Do(q); err == nil {
		res.Body.Close()
		t.Fatalf("the panicking handler answered %d", res.StatusCode)
	}
	start := time.Now()
	wantCreated(t, f.do(srv, req{Key: "k1", Body: `{}`}), 1)
	if took := time.Since(start); took > 2*time.Second || f.execs.Load() != 2 || f.effects() != 1 {
		t.Fatalf("the retry took %v, execs %d effects %d; want under 2 s, 2, 1", took, f.execs.Load(), f.effects())
	}
}

func TestOpenLimiterWithoutURLIsPostgresAlone(t *testing.T) {
	t.Parallel()
	l, err := OpenLimiter("", LimiterOptions{})
	if l != nil || err != nil {
		t.Fatalf("OpenLimiter(\"\") = %v, %v; want nil, nil", l, err)
	}
	f := setup(t)
	srv := serve(t, f.guard(Config{Limiter: l}).Transactional(routeTx, f.txCreate(nil)))
	wantCreated(t, f.do(srv, req{Key: "k1", Body: `{}`}), 1)
	wantReplay(t, f.do(srv, req{Key: "k1", Body: `{}`}), 1)
	if _, err := OpenLimiter("http://user:secret@127.0.0.1:6379", LimiterOptions{}); err == nil || strings.Contains(err.Error(), "secret") {
		t.Fatalf("OpenLimiter(an http URL) = %v, want an error that does not quote the URL", err)
	}
}
