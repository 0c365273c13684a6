package main

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/alecthomas/kong"
	"go.uber.org/goleak"

	"github.com/bookrecon/bookrecon/internal/pgtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const mapPath = "../../providers/testdata/providers.yaml"

func TestFlags(t *testing.T) {
	t.Setenv("BOOKRECON_QUERY_ADDR", "127.0.0.1:9999")
	t.Setenv("BOOKRECON_PROVIDERS", mapPath)
	t.Setenv("BOOKRECON_DATABASE_URL", "postgres://reader@db.internal:5432/bookrecon")
	var c cli
	p, err := kong.New(&c)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if c.Addr != "127.0.0.1:9999" || !strings.HasSuffix(string(c.Providers), "/providers/testdata/providers.yaml") || c.MaxDBConns != 10 || c.QueryTimeout.String() != "5s" ||
		c.DatabaseURL != "postgres://reader@db.internal:5432/bookrecon" {
		t.Errorf("parsed %+v", c)
	}
}

// TestFlagsRefuseSmallPool: a pool smaller than a request's connection plus the readiness
// check's is a usage error when the command line is parsed.
func TestFlagsRefuseSmallPool(t *testing.T) {
	t.Setenv("BOOKRECON_PROVIDERS", mapPath)
	t.Setenv("BOOKRECON_QUERY_DB_CONNS", "1")
	t.Setenv("BOOKRECON_DATABASE_POOLER", "transaction") // no migration: no migrate URL needed
	var c cli
	p, err := kong.New(&c)
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.Parse(nil)
	if err == nil || !strings.Contains(err.Error(), "a database pool of size 1 (its _DB_CONNS) is too small: it holds up to 2") ||
		strings.Contains(err.Error(), "migrat") {
		t.Errorf("Parse = %v, want the pool refused (and nothing about migrations)", err)
	}
}

// TestRun starts the binary's run on a migrated database and asks it what a booking service and
// an orchestrator would.
func TestRun(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewURL(t) // on the test's goroutine: it may skip or fail t
	ctx, cancel := context.WithCancel(context.Background())
	addrc := make(chan string, 1)
	var wg sync.WaitGroup
	var runErr error
	wg.Go(func() {
		runErr = run(ctx, cli{DatabaseURL: dbURL, Providers: mapPath, Addr: "127.0.0.1:0", MaxDBConns: 2},
			slog.New(slog.DiscardHandler), func(a string) { addrc <- a })
		if runErr != nil {
			addrc <- ""
		}
	})
	addr := <-addrc
	if addr == "" {
		wg.Wait()
		t.Fatalf("run: %v", runErr)
	}
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	for _, c := range []struct {
		path, want string
		code       int
	}{
		{"/readyz", "ok\n", 200},
		{"/livez", "ok\n", 200},
		{"/v1/tenants/t_1/intents/bi_1/operations/BOOK/retry-gate", `{"allowed":true,"reason":"no_attempt","latestVersion":0,"latestStatus":null}` + "\n", 200},
		{"/v1/tenants/t_1/intents/bi_1", `{"error":"not_found","message":"the intent has no BOOK attempt"}` + "\n", 404},
	} {
		resp, err := client.Get("http://" + addr + c.path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.code || string(b) != c.want {
			t.Errorf("GET %s = %d %q, want %d %q", c.path, resp.StatusCode, b, c.code, c.want)
		}
	}
	resp, err := client.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`bookrecon_retry_gate_answers_total{allowed="true",operation="BOOK",reason="no_attempt"} 1`,
		`bookrecon_retry_gate_answers_total{allowed="false",operation="REFUND",reason="earlier_unknown"} 0`,
		`bookrecon_query_requests_total{code="404",route="intent_status"} 1`,
		`go_goroutines`,
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	cancel()
	wg.Wait()
	if runErr != nil {
		t.Errorf("run = %v after cancel, want nil", runErr)
	}
}
