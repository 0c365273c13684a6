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

	"github.com/bookrecon/bookrecon/internal/auth/authtest"
	"github.com/bookrecon/bookrecon/internal/harness/logtest"
	"github.com/bookrecon/bookrecon/internal/harness/pgtest"
	"github.com/bookrecon/bookrecon/internal/service"
	"github.com/bookrecon/bookrecon/internal/telemetry"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const mapPath = "../../providers/testdata/providers.yaml"

func TestFlags(t *testing.T) {
	tokens, _ := authtest.File(t)
	t.Setenv("BOOKRECON_QUERY_ADDR", "127.0.0.1:9999")
	t.Setenv("BOOKRECON_PROVIDERS", mapPath)
	t.Setenv("BOOKRECON_TOKENS_FILE", tokens)
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
		c.DatabaseURL != "postgres://reader@db.internal:5432/bookrecon" || string(c.Tokens) != tokens || c.AdminAddr != "127.0.0.1:9104" {
		t.Errorf("parsed %+v", c)
	}
}

// TestFlagsRequireTokens: without a tokens file the API does not start (a usage error).
func TestFlagsRequireTokens(t *testing.T) {
	t.Setenv("BOOKRECON_PROVIDERS", mapPath)
	var c cli
	p, err := kong.New(&c)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Parse(nil); err == nil || err.Error() != "missing flags: --tokens=FILE" {
		t.Errorf("Parse = %v, want --tokens missing", err)
	}
}

// TestFlagsRefuseSmallPool: a pool smaller than a request's connection plus the readiness
// check's is a usage error when the command line is parsed.
func TestFlagsRefuseSmallPool(t *testing.T) {
	tokens, _ := authtest.File(t)
	t.Setenv("BOOKRECON_PROVIDERS", mapPath)
	t.Setenv("BOOKRECON_TOKENS_FILE", tokens)
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
// an orchestrator would: the API with a token, the admin endpoints on their own address without
// one. No token reaches the log.
func TestRun(t *testing.T) {
	t.Parallel()
	tokens, toks := authtest.File(t, authtest.Reader("t_1", "checkout"), authtest.Reader("t_2", "checkout"))
	dbURL := pgtest.NewURL(t) // on the test's goroutine: it may skip or fail t
	ctx, cancel := context.WithCancel(context.Background())
	addrc, adminc := make(chan string, 1), make(chan string, 1)
	logs := &logtest.Buffer{}
	var wg sync.WaitGroup
	var runErr error
	wg.Go(func() {
		runErr = run(ctx, cli{DatabaseURL: dbURL, Providers: mapPath, Tokens: service.File(tokens), Addr: "127.0.0.1:0",
			AdminAddr: "127.0.0.1:0", MaxDBConns: 2},
			telemetry.NewLogger(logs, "query-api", slog.LevelDebug), func(a string) { addrc <- a }, func(a string) { adminc <- a })
		if runErr != nil {
			addrc <- ""
		}
	})
	addr := <-addrc
	if addr == "" {
		wg.Wait()
		t.Fatalf("run: %v", runErr)
	}
	admin := <-adminc
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	get := func(url, token string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, string(b)
	}
	for _, c := range []struct {
		url, token, want string
		code             int
	}{
		{"http://" + admin + "/readyz", "", "ok\n", 200},
		{"http://" + admin + "/livez", "", "ok\n", 200},
		{"http://" + addr + "/v1/tenants/t_1/intents/bi_1/operations/BOOK/retry-gate", toks[0], `{"allowed":true,"reason":"no_attempt","latestVersion":0,"latestStatus":null}` + "\n", 200},
		{"http://" + addr + "/v1/tenants/t_1/intents/bi_1", toks[0], `{"type":"about:blank","title":"Not Found","status":404,"code":"not_found","detail":"the intent has no BOOK attempt"}` + "\n", 404},
		{"http://" + addr + "/v1/tenants/t_1/intents/bi_1", toks[1], `{"type":"about:blank","title":"Forbidden","status":403,"code":"forbidden","detail":"the token does not act for this tenant"}` + "\n", 403},
		{"http://" + addr + "/v1/tenants/t_1/intents/bi_1", toks[0] + "x", `{"type":"about:blank","title":"Unauthorized","status":401,"code":"unauthenticated","detail":"the token is not valid (mistyped, revoked, or of another deployment); ask the operator for a token"}` + "\n", 401},
		{"http://" + addr + "/readyz", "", `{"type":"about:blank","title":"Unauthorized","status":401,"code":"unauthenticated","detail":"send Authorization: Bearer <token>; the operator issues tokens with bookrecon tokens add"}` + "\n", 401},
	} {
		if code, b := get(c.url, c.token); code != c.code || b != c.want {
			t.Errorf("GET %s = %d %q, want %d %q", c.url, code, b, c.code, c.want)
		}
	}
	_, b := get("http://"+admin+"/metrics", "")
	for _, want := range []string{
		`bookrecon_retry_gate_answers_total{allowed="true",operation="BOOK",reason="no_attempt"} 1`,
		`bookrecon_retry_gate_answers_total{allowed="false",operation="REFUND",reason="earlier_unknown"} 0`,
		`bookrecon_query_requests_total{code="404",route="intent_status"} 1`,
		`bookrecon_query_requests_total{code="403",route="intent_status"} 1`,
		`bookrecon_query_requests_total{code="401",route="intent_status"} 1`,
		`bookrecon_auth_tokens 2`,
		`bookrecon_auth_denials_total{reason="unknown"} 1`,
		`go_goroutines`,
	} {
		if !strings.Contains(b, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	cancel()
	wg.Wait()
	if runErr != nil {
		t.Errorf("run = %v after cancel, want nil", runErr)
	}
	if !strings.Contains(logs.String(), `"msg":"query API listening"`) {
		t.Errorf("log:\n%s", logs)
	}
	for _, tok := range toks {
		if strings.Contains(logs.String(), tok) || strings.Contains(logs.String(), tok[len("bookrecon_"):]) {
			t.Errorf("a token is in the log:\n%s", logs)
		}
	}
}
