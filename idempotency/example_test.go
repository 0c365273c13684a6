package idempotency_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/bookrecon/bookrecon/idempotency"
	"github.com/bookrecon/bookrecon/internal/harness/pgtest"
	"github.com/bookrecon/bookrecon/internal/postgres"
	"github.com/bookrecon/bookrecon/migrations"
)

// tenantScope stands in for the authentication middleware: in a service, read the tenant and
// principal the bearer token authenticated (internal/auth) from r's context — never a header.
func tenantScope(r *http.Request) (idempotency.Scope, error) {
	return idempotency.Scope{Tenant: "t_globetrek", Principal: "booking-service"}, nil
}

// post sends a POST with an Idempotency-Key and prints what came back.
func post(url, key, body string) {
	r, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if key != "" {
		r.Header.Set("Idempotency-Key", key)
	}
	res, err := http.DefaultClient.Do(r)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	line := fmt.Sprintf("%d location=%q replayed=%q", res.StatusCode, res.Header.Get("Location"), res.Header.Get("Idempotent-Replayed"))
	if res.Header.Get("Content-Type") == "application/problem+json" {
		var code string
		if i := strings.Index(string(b), `"code":"`); i >= 0 {
			code = strings.SplitN(string(b)[i+8:], `"`, 2)[0]
		}
		line += " code=" + code
	} else {
		line += " body=" + strings.TrimSpace(string(b))
	}
	fmt.Println(line)
}

// The transactional mode: the handler writes its effect in the transaction that holds the
// Idempotency-Key record. A retry replays the first answer; the same key with another body is
// refused.
func ExampleGuard_Transactional() {
	ctx := context.Background()
	dbURL, drop, err := pgtest.ExampleDB(ctx) // a database of its own; yours: BOOKRECON_DATABASE_URL
	if err != nil {
		fmt.Println(err)
		return
	}
	defer drop()
	pool, err := postgres.Open(ctx, dbURL, 4)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()
	if _, err := migrations.UpPool(ctx, pool); err != nil {
		fmt.Println(err)
		return
	}
	if _, err := pool.Exec(ctx, "CREATE TABLE booking (id bigserial PRIMARY KEY, body text NOT NULL)"); err != nil {
		fmt.Println(err)
		return
	}

	g, err := idempotency.New(idempotency.Config{DB: pool, Scope: tenantScope})
	if err != nil {
		fmt.Println(err)
		return
	}
	mux := http.NewServeMux()
	mux.Handle("POST /v1/bookings", g.Transactional("POST /v1/bookings", func(w http.ResponseWriter, r *http.Request, tx pgx.Tx) {
		body, _ := io.ReadAll(r.Body)
		var id int64
		if err := tx.QueryRow(r.Context(), "INSERT INTO booking (body) VALUES ($1) RETURNING id", string(body)).Scan(&id); err != nil {
			http.Error(w, "database", http.StatusServiceUnavailable) // not 2xx: rolled back
			return
		}
		w.Header().Set("Location", fmt.Sprintf("/v1/bookings/%d", id))
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":%d}`, id)
	}))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	post(srv.URL+"/v1/bookings", "5f6de8fd-919f-4a4a-a3dc-0a664c4767ab", `{"intent":"bi_1"}`)
	post(srv.URL+"/v1/bookings", "5f6de8fd-919f-4a4a-a3dc-0a664c4767ab", `{"intent":"bi_1"}`) // the retry
	post(srv.URL+"/v1/bookings", "5f6de8fd-919f-4a4a-a3dc-0a664c4767ab", `{"intent":"bi_2"}`) // another request, same key
	post(srv.URL+"/v1/bookings", "", `{"intent":"bi_1"}`)                                     // no key
	var n int
	_ = pool.QueryRow(ctx, "SELECT count(*) FROM booking").Scan(&n)
	fmt.Println("bookings:", n)
	// Output:
	// 201 location="/v1/bookings/1" replayed="" body={"id":1}
	// 201 location="/v1/bookings/1" replayed="true" body={"id":1}
	// 422 location="" replayed="" code=idempotency_key_reused
	// 400 location="" replayed="" code=idempotency_key_missing
	// bookings: 1
}

// The two-phase mode, for a handler whose effect is an external call: the claim commits before
// the call, the answer is stored after it. An answer that is not 2xx (here the provider's 404)
// is not stored: the retry runs again.
func ExampleGuard_TwoPhase() {
	ctx := context.Background()
	dbURL, drop, err := pgtest.ExampleDB(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer drop()
	pool, err := postgres.Open(ctx, dbURL, 4)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()
	if _, err := migrations.UpPool(ctx, pool); err != nil {
		fmt.Println(err)
		return
	}
	g, err := idempotency.New(idempotency.Config{DB: pool, Scope: tenantScope})
	if err != nil {
		fmt.Println(err)
		return
	}
	calls := 0
	mux := http.NewServeMux()
	mux.Handle("POST /v1/bookings", g.TwoPhase("POST /v1/bookings", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls++ // the provider create
		if calls == 1 {
			http.Error(w, "no such offer", http.StatusNotFound)
			return
		}
		w.Header().Set("Location", "/v1/bookings/bi_1")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, `{"status":"confirmed"}`)
	})))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	for range 3 {
		post(srv.URL+"/v1/bookings", "8e03978e-40d5-43e8-bc93-6894a57f9324", `{"intent":"bi_1"}`)
	}
	fmt.Println("provider calls:", calls)
	// Output:
	// 404 location="" replayed="" body=no such offer
	// 201 location="/v1/bookings/bi_1" replayed="" body={"status":"confirmed"}
	// 201 location="/v1/bookings/bi_1" replayed="true" body={"status":"confirmed"}
	// provider calls: 2
}

// ParseKey accepts the draft's quoted form and the bare key.
func ExampleParseKey() {
	for _, v := range []string{`"8e03978e-40d5-43e8-bc93-6894a57f9324"`, "k-1", "a b"} {
		h := http.Header{}
		h.Set("Idempotency-Key", v)
		fmt.Println(idempotency.ParseKey(h))
	}
	// Output:
	// 8e03978e-40d5-43e8-bc93-6894a57f9324 <nil>
	// k-1 <nil>
	//  idempotency: Idempotency-Key must be 1-255 visible ASCII characters, sent once
}
