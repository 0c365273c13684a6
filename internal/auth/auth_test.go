package auth_test

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/bookrecon/bookrecon/internal/auth"
	"github.com/bookrecon/bookrecon/internal/auth/authtest"
	"github.com/bookrecon/bookrecon/internal/harness/logtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The exact answers documented in docs/api.md, "Authentication".
const (
	bodyMissing   = `{"type":"about:blank","title":"Unauthorized","status":401,"code":"unauthenticated","detail":"send Authorization: Bearer <token>; the operator issues tokens with bookrecon tokens add"}` + "\n"
	bodyMalformed = `{"type":"about:blank","title":"Unauthorized","status":401,"code":"unauthenticated","detail":"the Authorization header must be Bearer followed by one token"}` + "\n"
	bodyUnknown   = `{"type":"about:blank","title":"Unauthorized","status":401,"code":"unauthenticated","detail":"the token is not valid (mistyped, revoked, or of another deployment); ask the operator for a token"}` + "\n"
	bodyTenant    = `{"type":"about:blank","title":"Forbidden","status":403,"code":"forbidden","detail":"the token does not act for this tenant"}` + "\n"
	bodyScope     = `{"type":"about:blank","title":"Forbidden","status":403,"code":"forbidden","detail":"the token lacks the scope attempts:read"}` + "\n"
)

// server routes GET /v1/tenants/{tenant}/things/{thing} behind Require(attempts:read): 200
// with the principal for thing "exists", 404 otherwise.
func server(tk *auth.Tokens) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /v1/tenants/{tenant}/things/{thing}", tk.Require(auth.ScopeAttemptsRead, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, ok := auth.FromContext(r.Context())
		if !ok {
			http.Error(w, "no principal", http.StatusInternalServerError)
			return
		}
		if r.PathValue("thing") != "exists" {
			http.Error(w, "no such thing", http.StatusNotFound)
			return
		}
		fmt.Fprintf(w, "%s/%s %v %s\n", p.Tenant, p.Name, p.Scopes, p.TokenID)
	})))
	mux.Handle("GET /v1/untenanted", tk.Require(auth.ScopeOps, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, _ := auth.FromContext(r.Context())
		fmt.Fprintf(w, "%s/%s\n", p.Tenant, p.Name)
	})))
	return mux
}

type answer struct {
	code              int
	body, ct, wwwAuth string
}

func do(h http.Handler, path string, authz ...string) answer {
	req := httptest.NewRequest(http.MethodGet, path, nil)
	for _, a := range authz {
		req.Header.Add("Authorization", a)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return answer{rec.Code, rec.Body.String(), rec.Header().Get("Content-Type"), rec.Header().Get("WWW-Authenticate")}
}

// TestAuthorize: every answer of the table, exact, through real routing; a revoked token is
// refused from the first request after the reload.
func TestAuthorize(t *testing.T) {
	t.Parallel()
	path, toks := authtest.File(t, authtest.Reader("t_a", "checkout"),
		authtest.Grant{Tenant: "t_a", Principal: "writer", Scopes: []auth.Scope{auth.ScopeAttemptsWrite}},
		authtest.Grant{Tenant: "t_b", Principal: "ops-bot", Scopes: []auth.Scope{auth.ScopeOps, auth.ScopeAttemptsRead}})
	tk, err := auth.Open(path, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	reader, writer, other := toks[0], toks[1], toks[2]
	h := server(tk)
	const problemCT = "application/problem+json"
	unknown, _ := auth.NewToken()
	for _, tt := range []struct {
		name  string
		path  string
		authz []string
		want  answer
	}{
		{"Missing", "/v1/tenants/t_a/things/exists", nil,
			answer{401, bodyMissing, problemCT, `Bearer realm="bookrecon"`}},
		{"EmptyHeader", "/v1/tenants/t_a/things/exists", []string{""},
			answer{401, bodyMalformed, problemCT, `Bearer realm="bookrecon", error="invalid_request"`}},
		{"BasicScheme", "/v1/tenants/t_a/things/exists", []string{"Basic " + base64.StdEncoding.EncodeToString([]byte("u:p"))},
			answer{401, bodyMalformed, problemCT, `Bearer realm="bookrecon", error="invalid_request"`}},
		{"BearerWithoutToken", "/v1/tenants/t_a/things/exists", []string{"Bearer "},
			answer{401, bodyMalformed, problemCT, `Bearer realm="bookrecon", error="invalid_request"`}},
		{"TokenWithoutScheme", "/v1/tenants/t_a/things/exists", []string{reader},
			answer{401, bodyMalformed, problemCT, `Bearer realm="bookrecon", error="invalid_request"`}},
		{"GarbledToken", "/v1/tenants/t_a/things/exists", []string{"Bearer " + reader[:20] + " " + reader[20:]},
			answer{401, bodyMalformed, problemCT, `Bearer realm="bookrecon", error="invalid_request"`}},
		{"TwoHeaders", "/v1/tenants/t_a/things/exists", []string{"Bearer " + reader, "Bearer " + reader},
			answer{401, bodyMalformed, problemCT, `Bearer realm="bookrecon", error="invalid_request"`}},
		{"Unknown", "/v1/tenants/t_a/things/exists", []string{"Bearer " + unknown},
			answer{401, bodyUnknown, problemCT, `Bearer realm="bookrecon", error="invalid_token"`}},
		{"TruncatedToken", "/v1/tenants/t_a/things/exists", []string{"Bearer " + reader[:len(reader)-1]},
			answer{401, bodyUnknown, problemCT, `Bearer realm="bookrecon", error="invalid_token"`}},
		{"HashInsteadOfToken", "/v1/tenants/t_a/things/exists", []string{"Bearer " + auth.Hash(reader)},
			answer{401, bodyUnknown, problemCT, `Bearer realm="bookrecon", error="invalid_token"`}},
		{"WrongScope", "/v1/tenants/t_a/things/exists", []string{"Bearer " + writer},
			answer{403, bodyScope, problemCT, `Bearer realm="bookrecon", error="insufficient_scope", scope="attempts:read"`}},
		{"ForeignTenantExisting", "/v1/tenants/t_b/things/exists", []string{"Bearer " + reader},
			answer{403, bodyTenant, problemCT, ""}},
		{"ForeignTenantMissing", "/v1/tenants/t_b/things/nothing", []string{"Bearer " + reader},
			answer{403, bodyTenant, problemCT, ""}},
		{"ForeignTenantWrongScopeTooIsTenant", "/v1/tenants/t_b/things/exists", []string{"Bearer " + writer},
			answer{403, bodyTenant, problemCT, ""}},
		{"ForeignTenantInvalidName", "/v1/tenants/t.b/things/exists", []string{"Bearer " + reader},
			answer{403, bodyTenant, problemCT, ""}},
		{"OK", "/v1/tenants/t_a/things/exists", []string{"Bearer " + reader},
			answer{200, "t_a/checkout [attempts:read] " + auth.Hash(reader)[:12] + "\n", "text/plain; charset=utf-8", ""}},
		{"OKSchemeAnyCase", "/v1/tenants/t_a/things/exists", []string{"bEARER " + reader},
			answer{200, "t_a/checkout [attempts:read] " + auth.Hash(reader)[:12] + "\n", "text/plain; charset=utf-8", ""}},
		{"OKNotFoundAfterAuthorization", "/v1/tenants/t_a/things/nothing", []string{"Bearer " + reader},
			answer{404, "no such thing\n", "text/plain; charset=utf-8", ""}},
		{"UntenantedRouteByScopeAlone", "/v1/untenanted", []string{"Bearer " + other},
			answer{200, "t_b/ops-bot\n", "text/plain; charset=utf-8", ""}},
		{"UntenantedRouteWrongScope", "/v1/untenanted", []string{"Bearer " + reader},
			answer{403, strings.ReplaceAll(bodyScope, "attempts:read", "ops"), problemCT, `Bearer realm="bookrecon", error="insufficient_scope", scope="ops"`}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := do(h, tt.path, tt.authz...); got != tt.want {
				t.Errorf("GET %s = %+v\nwant %+v", tt.path, got, tt.want)
			}
		})
	}
	for reason, want := range map[string]float64{auth.ReasonMissing: 1, auth.ReasonMalformed: 6, auth.ReasonUnknown: 3,
		auth.ReasonTenant: 4, auth.ReasonScope: 2} {
		if got := testutil.ToFloat64(tk.Metrics().Denials.WithLabelValues(reason)); got != want {
			t.Errorf("bookrecon_auth_denials_total{reason=%q} = %v, want %v", reason, got, want)
		}
	}

	// Revoked: the entry removed from the file, re-read: the next request is refused.
	f, err := auth.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	f.Tokens = f.Tokens[1:]
	if err := auth.WriteFile(path, f); err != nil {
		t.Fatal(err)
	}
	if err := tk.Reload("test"); err != nil {
		t.Fatal(err)
	}
	want := answer{401, bodyUnknown, problemCT, `Bearer realm="bookrecon", error="invalid_token"`}
	if got := do(h, "/v1/tenants/t_a/things/exists", "Bearer "+reader); got != want {
		t.Errorf("revoked: %+v, want %+v", got, want)
	}
	if got := do(h, "/v1/untenanted", "Bearer "+other); got.code != 200 {
		t.Errorf("a token kept after the revocation: %+v, want 200", got)
	}
}

// TestForeignTenantSameAnswer: a token of tenant A gets byte-identical answers (status, every
// header, body) on tenant B's routes whether or not the resource exists there.
func TestForeignTenantSameAnswer(t *testing.T) {
	t.Parallel()
	tk, toks := authtest.Open(t, authtest.Reader("t_a", "checkout"), authtest.Reader("t_b", "checkout"))
	h := server(tk)
	// For tenant B's own token the two differ: the resource exists or not.
	if a, b := do(h, "/v1/tenants/t_b/things/exists", "Bearer "+toks[1]), do(h, "/v1/tenants/t_b/things/nothing", "Bearer "+toks[1]); a.code != 200 || b.code != 404 {
		t.Fatalf("tenant B's own token: %d and %d, want 200 and 404", a.code, b.code)
	}
	var answers []string
	for _, thing := range []string{"exists", "nothing"} {
		req := httptest.NewRequest(http.MethodGet, "/v1/tenants/t_b/things/"+thing, nil)
		req.Header.Set("Authorization", "Bearer "+toks[0])
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		answers = append(answers, fmt.Sprintf("%d %v %s", rec.Code, rec.Header(), rec.Body.String()))
	}
	if answers[0] != answers[1] || !strings.HasPrefix(answers[0], "403 ") {
		t.Errorf("tenant A on tenant B:\nexisting: %s\nmissing:  %s\nwant the same 403", answers[0], answers[1])
	}
}

// watched opens the tokens file at path with a log buffer and watches it until the test ends.
func watched(t *testing.T, path string) (*auth.Tokens, *logtest.Buffer) {
	t.Helper()
	logs := &logtest.Buffer{}
	tk, err := auth.Open(path, slog.New(slog.NewJSONHandler(logs, nil)), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	wait, err := tk.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); wait() })
	return tk, logs
}

// eventually polls cond every 10 ms for up to 5 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("not within 5s: %s", what)
}

// TestReloadOnSIGHUP: a change the watch did not see (made before it started) is read on
// SIGHUP, and the process survives the signal.
func TestReloadOnSIGHUP(t *testing.T) {
	t.Parallel()
	path, old := authtest.File(t, authtest.Reader("t_a", "checkout"))
	logs := &logtest.Buffer{}
	tk, err := auth.Open(path, slog.New(slog.NewJSONHandler(logs, nil)), nil)
	if err != nil {
		t.Fatal(err)
	}
	h := server(tk)
	tok, hash := auth.NewToken()
	if err := auth.WriteFile(path, auth.File{Tokens: []auth.Entry{{SHA256: hash, Tenant: "t_a", Principal: "rotated",
		Scopes: []auth.Scope{auth.ScopeAttemptsRead}}}}); err != nil {
		t.Fatal(err)
	}
	if got := do(h, "/v1/tenants/t_a/things/exists", "Bearer "+tok); got.code != 401 {
		t.Fatalf("before any reload the new token got %d, want 401", got.code)
	}
	ctx, cancel := context.WithCancel(context.Background())
	wait, err := tk.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); wait() }()
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	// Reload puts the new tokens in force, then counts and logs the reload: wait for its log
	// line, the last of the three (CI once saw the token accepted before the count and the log).
	want := `"msg":"tokens file reloaded","path":"` + path + `","cause":"sighup","tokens":1`
	eventually(t, "a reload logged with cause sighup", func() bool { return strings.Contains(logs.String(), want) })
	if got := do(h, "/v1/tenants/t_a/things/exists", "Bearer "+tok); got.code != 200 {
		t.Errorf("the new token after SIGHUP: %+v, want 200", got)
	}
	if got := do(h, "/v1/tenants/t_a/things/exists", "Bearer "+old[0]); got.code != 401 || got.body != bodyUnknown {
		t.Errorf("the replaced token after SIGHUP: %+v, want 401 %s", got, bodyUnknown)
	}
	if got := testutil.ToFloat64(tk.Metrics().Reloads.WithLabelValues(auth.ReloadOK)); got != 1 {
		t.Errorf("reloads{ok} = %v, want 1", got)
	}
}

// TestReloadMidWrite: a re-read between an editor's truncate and its write (an empty file)
// keeps the tokens in force and counts an invalid file; the write's own re-read then applies.
// Before, the empty file read as no token: every request got 401 until the next change, and
// TestReloadOnChange's in-place edit failed whenever the watch's re-read fell in that window.
func TestReloadMidWrite(t *testing.T) {
	t.Parallel()
	path, toks := authtest.File(t, authtest.Reader("t_a", "checkout"))
	tk, err := auth.Open(path, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	h := server(tk)
	accepts := func(tok string) bool { return do(h, "/v1/tenants/t_a/things/exists", "Bearer "+tok).code == 200 }
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, 0); err != nil {
		t.Fatal(err)
	}
	if err := tk.Reload("change"); !errors.Is(err, auth.ErrFile) {
		t.Errorf("Reload of the truncated file = %v, want an ErrFile", err)
	}
	if !accepts(toks[0]) {
		t.Error("the token refused while the file was being written")
	}
	if got := testutil.ToFloat64(tk.Metrics().FileInvalid); got != 1 {
		t.Errorf("bookrecon_auth_tokens_file_invalid = %v, want 1 mid-write", got)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := tk.Reload("change"); err != nil {
		t.Fatalf("Reload after the write = %v", err)
	}
	if !accepts(toks[0]) || testutil.ToFloat64(tk.Metrics().Tokens) != 1 || testutil.ToFloat64(tk.Metrics().FileInvalid) != 0 {
		t.Error("after the write: want the token accepted, 1 token, the file valid")
	}
}

// TestReloadOnChange: an atomic replacement and an in-place rewrite are each read without a
// signal; an invalid file leaves the tokens in force, is counted and logged without its text.
func TestReloadOnChange(t *testing.T) {
	t.Parallel()
	path, toks := authtest.File(t, authtest.Reader("t_a", "checkout"))
	tk, logs := watched(t, path)
	h := server(tk)
	accepts := func(tok string) bool { return do(h, "/v1/tenants/t_a/things/exists", "Bearer "+tok).code == 200 }

	// Atomic replacement (bookrecon tokens add): a second token.
	f, err := auth.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	tok2, hash2 := auth.NewToken()
	f.Tokens = append(f.Tokens, auth.Entry{SHA256: hash2, Tenant: "t_a", Principal: "second", Scopes: []auth.Scope{auth.ScopeAttemptsRead}})
	if err := auth.WriteFile(path, f); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the added token accepted", func() bool { return accepts(tok2) })
	if !accepts(toks[0]) {
		t.Error("the first token refused after an addition")
	}

	// In place (an editor): the first token's entry deleted.
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	_, rest, _ := strings.Cut(string(data), "  - sha256: "+auth.Hash(toks[0]))
	_, rest, _ = strings.Cut(rest, "  - sha256: ")
	if err := os.WriteFile(path, []byte("tokens:\n  - sha256: "+rest), 0o600); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the deleted token refused", func() bool { return !accepts(toks[0]) })
	if !accepts(tok2) {
		t.Error("the kept token refused after an in-place edit")
	}

	// Invalid: a token pasted where its hash belongs, and a YAML error after it.
	errors0 := testutil.ToFloat64(tk.Metrics().Reloads.WithLabelValues(auth.ReloadError))
	pasted, _ := auth.NewToken()
	if err := os.WriteFile(path, []byte("tokens:\n  - sha256: "+pasted+"\n    tenant: t_a\n    principal: p\n    scopes: [attempts:read]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the invalid file counted", func() bool {
		return testutil.ToFloat64(tk.Metrics().Reloads.WithLabelValues(auth.ReloadError)) > errors0
	})
	if err := os.WriteFile(path, []byte("tokens: [ "+pasted+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the unparsable file logged", func() bool { return strings.Contains(logs.String(), "not valid at line") })
	if !accepts(tok2) {
		t.Error("the tokens in force were dropped by an invalid file")
	}
	if got := testutil.ToFloat64(tk.Metrics().Tokens); got != 1 {
		t.Errorf("bookrecon_auth_tokens = %v, want 1 (the file last read successfully)", got)
	}
	if got := testutil.ToFloat64(tk.Metrics().FileInvalid); got != 1 {
		t.Errorf("bookrecon_auth_tokens_file_invalid = %v, want 1 while the file does not read", got)
	}
	for _, want := range []string{
		`tokens[0]: sha256 holds a token, not its hash: remove the entry, and issue a new token with bookrecon tokens add (this one is exposed)`,
		`"msg":"tokens file not reloaded: the tokens read before stay in force; fix the file"`,
	} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %s:\n%s", want, logs)
		}
	}
	// Fixed: the file is read again, and the gauge falls back.
	if err := auth.WriteFile(path, auth.File{Tokens: []auth.Entry{{SHA256: auth.Hash(toks[0]), Tenant: "t_a", Principal: "checkout",
		Scopes: []auth.Scope{auth.ScopeAttemptsRead}}}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the fixed file read", func() bool { return accepts(toks[0]) && !accepts(tok2) })
	if got := testutil.ToFloat64(tk.Metrics().FileInvalid); got != 0 {
		t.Errorf("bookrecon_auth_tokens_file_invalid = %v after the fix, want 0", got)
	}
	for _, secret := range []string{pasted, toks[0], tok2, pasted[len(auth.TokenPrefix):]} {
		if strings.Contains(logs.String(), secret) {
			t.Errorf("a token is in the log:\n%s", logs)
		}
	}
}

// TestParseFile: every problem of a file at once, naming the entry, never quoting a hash.
func TestParseFile(t *testing.T) {
	t.Parallel()
	tok, hash := auth.NewToken()
	_, err := auth.ParseFile([]byte(`tokens:
  - sha256: ` + hash + `
    tenant: t_a
    principal: checkout
    scopes: [attempts:read]
  - sha256: ` + hash + `
    tenant: t.a
    principal: "check out"
    scopes: []
  - sha256: ` + tok + `
    tenant: t_a
    principal: p
    scopes: [attempts:read, attempts:read, admin]
  - sha256: ` + strings.ToUpper(hash) + `
    tenant: t_a
    principal: p
    scopes: [ops]
`))
	want := "auth: tokens file: tokens[1]: the same hash as tokens[0]\n" +
		"auth: tokens file: tokens[1]: tenant must match [A-Za-z0-9_-]{1,64}\n" +
		"auth: tokens file: tokens[1]: principal must match [A-Za-z0-9._-]{1,64}\n" +
		"auth: tokens file: tokens[1]: no scopes: give at least one of attempts:read, attempts:write, ops\n" +
		"auth: tokens file: tokens[2]: sha256 holds a token, not its hash: remove the entry, and issue a new token with bookrecon tokens add (this one is exposed)\n" +
		"auth: tokens file: tokens[2]: scope attempts:read given twice\n" +
		"auth: tokens file: tokens[2]: scope \"admin\" is none of attempts:read, attempts:write, ops\n" +
		"auth: tokens file: tokens[3]: sha256 must be 64 lowercase hex digits: the SHA-256 of the token"
	if err == nil || err.Error() != want || !errors.Is(err, auth.ErrFile) {
		t.Errorf("ParseFile = %v\nwant %s", err, want)
	}
	for _, tt := range []struct{ name, data, want string }{
		{"UnknownField", "tokens:\n  - sha256: " + hash + "\n    scope: [ops]\n",
			"auth: tokens file: not valid at line 3, column 5 (want a tokens: list of sha256, tenant, principal, scopes)"},
		{"Syntax", "tokens: [ " + tok + "\n",
			"auth: tokens file: not valid at line 1, column 9 (want a tokens: list of sha256, tenant, principal, scopes)"},
		// An editor's in-place write is a truncate, then a write: a re-read between them sees
		// nothing, or the header alone when the write is cut short.
		{"Empty", "",
			"auth: tokens file: empty or without its tokens: key (being written, or cut short?); a file with no token says tokens: [] (bookrecon tokens init)"},
		{"CommentsOnly", "# bookrecon tokens file: SHA-256 hashes of bearer tokens\n",
			"auth: tokens file: empty or without its tokens: key (being written, or cut short?); a file with no token says tokens: [] (bookrecon tokens init)"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := auth.ParseFile([]byte(tt.data))
			if err == nil || err.Error() != tt.want {
				t.Errorf("ParseFile = %v, want %s", err, tt.want)
			}
		})
	}
	if f, err := auth.ParseFile([]byte("tokens: []\n")); err != nil || len(f.Tokens) != 0 {
		t.Errorf("an empty list = %+v, %v; want no tokens, no error", f, err)
	}
}

// TestOpenMissingFile names the path and wraps ErrFile and fs.ErrNotExist.
func TestOpenMissingFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "none.yaml")
	_, err := auth.Open(path, slog.New(slog.DiscardHandler), nil)
	if !errors.Is(err, auth.ErrFile) || !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), path) {
		t.Errorf("Open = %v, want ErrFile and ErrNotExist naming %s", err, path)
	}
}

// TestNewToken: the prefix, 256 random bits, the hash of the whole token.
func TestNewToken(t *testing.T) {
	t.Parallel()
	a, ha := auth.NewToken()
	b, _ := auth.NewToken()
	raw, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(a, "bookrecon_"))
	if !strings.HasPrefix(a, "bookrecon_") || len(a) != 53 || err != nil || len(raw) != 32 || a == b {
		t.Errorf("NewToken = %q (%d bytes decoded, %v), %q", a, len(raw), err, b)
	}
	if ha != auth.Hash(a) || len(ha) != 64 {
		t.Errorf("hash %q, want Hash(token)", ha)
	}
	// SHA-256("abc"), FIPS 180-2 appendix B.1.
	if got := auth.Hash("abc"); got != "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad" {
		t.Errorf("Hash(abc) = %s", got)
	}
}

// TestWriteFileAtomic leaves no temporary file and writes mode 0600.
func TestWriteFileAtomic(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "tokens.yaml")
	_, hash := auth.NewToken()
	if err := auth.WriteFile(path, auth.File{Tokens: []auth.Entry{{SHA256: hash, Tenant: "t", Principal: "p", Scopes: []auth.Scope{auth.ScopeOps}}}}); err != nil {
		t.Fatal(err)
	}
	if err := auth.WriteFile(path, auth.File{Tokens: []auth.Entry{{SHA256: "x", Tenant: "t", Principal: "p", Scopes: []auth.Scope{auth.ScopeOps}}}}); !errors.Is(err, auth.ErrFile) {
		t.Errorf("WriteFile of an invalid file = %v, want ErrFile", err)
	}
	ents, _ := os.ReadDir(dir)
	st, err := os.Stat(path)
	if len(ents) != 1 || err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("folder holds %d files, mode %v (%v); want the file alone, 0600", len(ents), st.Mode(), err)
	}
	f, err := auth.ReadFile(path)
	if err != nil || len(f.Tokens) != 1 || f.Tokens[0].SHA256 != hash {
		t.Errorf("ReadFile = %+v, %v; want the first file", f, err)
	}
	data, _ := os.ReadFile(path)
	if !strings.HasPrefix(string(data), "# bookrecon tokens file") {
		t.Errorf("no header:\n%s", data)
	}
}

// TestMisnamedTenantWildcardFailsClosed: a route registered as /v1/tenants/{tenantId}/… (a typo
// of {tenant}) gives Authorize no tenant to check; it denies every request there with the
// foreign-tenant 403, its own tenant's token included, instead of authorizing by scope alone
// (before: tenant A's token read tenant B's resource, 200).
func TestMisnamedTenantWildcardFailsClosed(t *testing.T) {
	t.Parallel()
	tk, toks := authtest.Open(t, authtest.Reader("t_a", "checkout"))
	mux := http.NewServeMux()
	mux.Handle("GET /v1/tenants/{tenantId}/things", tk.Require(auth.ScopeAttemptsRead, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "ok")
	})))
	for _, path := range []string{"/v1/tenants/t_b/things", "/v1/tenants/t_a/things"} {
		got := do(mux, path, "Bearer "+toks[0])
		if got.code != http.StatusForbidden || !strings.Contains(got.body, `"detail":"the token does not act for this tenant"`) {
			t.Errorf("%s under {tenantId}: %d %s, want the foreign-tenant 403", path, got.code, got.body)
		}
	}
}

// TestWatchIgnoresOtherFilesInTheFolder: only the tokens file (and a Kubernetes secret's ".."
// entries) trigger a re-read. A service whose log file sits in the tokens folder, with the file
// invalid, logged an error for each of its own log lines (about 19 a second); here 20 writes to
// another file of the folder re-read nothing, and a file back to the content in force says so.
func TestWatchIgnoresOtherFilesInTheFolder(t *testing.T) {
	// Not parallel: TestReloadOnSIGHUP's SIGHUP re-reads every watched file of the process, and
	// this test counts re-reads (a test that is not parallel never runs beside the parallel ones).
	path, _ := authtest.File(t, authtest.Reader("t_a", "checkout"))
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	tk, logs := watched(t, path)
	reloads := func() float64 {
		var n float64
		for _, r := range []string{auth.ReloadOK, auth.ReloadUnchanged, auth.ReloadError} {
			n += testutil.ToFloat64(tk.Metrics().Reloads.WithLabelValues(r))
		}
		return n
	}
	other := filepath.Join(filepath.Dir(path), "query-api.log")
	for i := range 20 {
		if err := os.WriteFile(other, []byte(strings.Repeat("x", i)), 0o600); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // past the reload delay
	if n := reloads(); n != 0 {
		t.Errorf("%v re-reads after writes to another file of the folder, want 0", n)
	}
	// Invalid, then back to the content in force: one error, then the recovery line.
	if err := os.WriteFile(path, []byte("tokens: [\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the invalid file counted", func() bool { return testutil.ToFloat64(tk.Metrics().FileInvalid) == 1 })
	if err := os.WriteFile(path, good, 0o600); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the recovery logged", func() bool {
		return strings.Contains(logs.String(), `"msg":"tokens file valid again, unchanged from the tokens in force"`)
	})
	if got := testutil.ToFloat64(tk.Metrics().FileInvalid); got != 0 {
		t.Errorf("bookrecon_auth_tokens_file_invalid = %v after the recovery, want 0", got)
	}
}
