package main

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/alecthomas/kong"

	"github.com/bookrecon/bookrecon/internal/auth"
	"github.com/bookrecon/bookrecon/internal/service"
)

// TestTokensCommands: add prints the new token once and stores only its hash (the token is in
// no output but the one line, and not in the file); list shows ids, never a token; revoke by
// principal and by id prefix; init creates an empty file and leaves one alone.
func TestTokensCommands(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "tokens.yaml")
	tf := tokensFile{File: file}
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	var everything bytes.Buffer // every output of the test, checked for tokens at the end

	var init bytes.Buffer
	if err := (&tokensInitCmd{tf}).run(&init); err != nil || init.String() != file+" created with no token: issue one with bookrecon tokens add\n" {
		t.Fatalf("init = %v, %q", err, init.String())
	}
	add := func(tenant, principal string, scopes ...string) string {
		t.Helper()
		var out, info bytes.Buffer
		if err := (&tokensAddCmd{Tenant: tenant, Principal: principal, Scope: scopes, tokensFile: tf}).run(&out, &info, now); err != nil {
			t.Fatal(err)
		}
		tok := strings.TrimSuffix(out.String(), "\n")
		raw, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(tok, "bookrecon_"))
		if !strings.HasPrefix(tok, "bookrecon_") || err != nil || len(raw) != 32 || strings.Count(out.String(), "\n") != 1 {
			t.Fatalf("add printed %q, want one line: bookrecon_ and 256 bits", out.String())
		}
		want := "token " + auth.Hash(tok)[:12] + " for " + tenant + "/" + principal + " (" + strings.Join(scopes, ",") + ") added to " + file +
			". It is shown only now: hand it to the caller's secret store; the services accept it once they re-read the file (at once when they watch it, else on SIGHUP).\n"
		if info.String() != want {
			t.Errorf("add said %q\nwant %q", info.String(), want)
		}
		everything.WriteString(info.String())
		return tok
	}
	a := add("t_a", "checkout", "attempts:read", "attempts:write")
	b := add("t_a", "checkout", "attempts:read")
	c := add("t_b", "ops-bot", "ops")
	idA, idB, idC := auth.Hash(a)[:12], auth.Hash(b)[:12], auth.Hash(c)[:12]

	var out bytes.Buffer
	if err := (&tokensListCmd{tokensFile: tf}).run(&out); err != nil {
		t.Fatal(err)
	}
	want := "ID            TENANT  PRINCIPAL  SCOPES                        CREATED\n" +
		idA + "  t_a     checkout   attempts:read,attempts:write  2026-12-01T12:00:00Z\n" +
		idB + "  t_a     checkout   attempts:read                 2026-12-01T12:00:00Z\n" +
		idC + "  t_b     ops-bot    ops                           2026-12-01T12:00:00Z\n" +
		"3 tokens\n"
	if out.String() != want {
		t.Errorf("list:\n%s\nwant:\n%s", out.String(), want)
	}
	everything.Write(out.Bytes())
	out.Reset()
	if err := (&tokensListCmd{tokensFile: tf, outputFlags: outputFlags{JSON: true}}).run(&out); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out.String(), `[
  {
    "id": "`+idA+`",
    "tenant": "t_a",
    "principal": "checkout",
    "scopes": [
      "attempts:read",
      "attempts:write"
    ],
    "created": "2026-12-01T12:00:00Z"
  },`) {
		t.Errorf("list --json:\n%s", out.String())
	}
	everything.Write(out.Bytes())

	// The file holds the hashes, never a token.
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	for _, tok := range []string{a, b, c} {
		if !strings.Contains(string(data), auth.Hash(tok)) {
			t.Errorf("the file lacks the hash of a token:\n%s", data)
		}
	}
	everything.Write(data)

	// Revoke: by an id prefix, by principal; refusals change nothing.
	for _, tt := range []struct {
		name string
		cmd  tokensRevokeCmd
		want string
	}{
		{"NoSuchID", tokensRevokeCmd{ID: "0123456789", tokensFile: tf}, "tokens revoke: no such token in " + file + " (bookrecon tokens list shows them); nothing changed"},
		{"NoSuchPrincipal", tokensRevokeCmd{Tenant: "t_b", Principal: "checkout", tokensFile: tf}, "tokens revoke: no such token in " + file + " (bookrecon tokens list shows them); nothing changed"},
	} {
		err := tt.cmd.run(&out)
		var e exitError
		if err == nil || err.Error() != tt.want || !errors.As(err, &e) || e.code != service.ExitUsage {
			t.Errorf("%s: revoke = %v, want exit 80: %s", tt.name, err, tt.want)
		}
	}
	out.Reset()
	if err := (&tokensRevokeCmd{ID: idC[:8], tokensFile: tf}).run(&out); err != nil {
		t.Fatal(err)
	}
	if want := "revoked " + idC + " t_b/ops-bot\n2 tokens left in " + file +
		"; the services refuse the revoked ones once they re-read it (at once when they watch it, else on SIGHUP)\n"; out.String() != want {
		t.Errorf("revoke --id:\n%s\nwant:\n%s", out.String(), want)
	}
	everything.Write(out.Bytes())
	out.Reset()
	if err := (&tokensRevokeCmd{Tenant: "t_a", Principal: "checkout", tokensFile: tf}).run(&out); err != nil {
		t.Fatal(err)
	}
	if want := "revoked " + idA + " t_a/checkout\nrevoked " + idB + " t_a/checkout\n0 tokens left in " + file +
		"; the services refuse the revoked ones once they re-read it (at once when they watch it, else on SIGHUP)\n"; out.String() != want {
		t.Errorf("revoke --tenant --principal:\n%s\nwant:\n%s", out.String(), want)
	}
	everything.Write(out.Bytes())
	if f, err := auth.ReadFile(file); err != nil || len(f.Tokens) != 0 {
		t.Errorf("after revoking all: %+v, %v", f, err)
	}
	init.Reset()
	if err := (&tokensInitCmd{tf}).run(&init); err != nil || init.String() != file+" exists; unchanged\n" {
		t.Errorf("init on an existing file = %v, %q", err, init.String())
	}
	for _, tok := range []string{a, b, c} {
		if strings.Contains(everything.String(), tok) || strings.Contains(everything.String(), tok[len("bookrecon_"):]) {
			t.Fatalf("a token appears in an output other than add's one line:\n%s", everything.String())
		}
	}
}

// TestTokensUsageErrors: what an operator can get wrong exits 80 naming it, and changes
// nothing.
func TestTokensUsageErrors(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "tokens.yaml")
	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"NoFile", []string{"tokens", "list"}, "tokens list: --file (BOOKRECON_TOKENS_FILE) is required: the tokens file the services read"},
		{"RevokeNothingNamed", []string{"tokens", "revoke", "--file", file}, "tokens revoke: give --tenant and --principal, or --id"},
		{"RevokeBoth", []string{"tokens", "revoke", "--file", file, "--id", "0123456789ab", "--tenant", "t"}, "tokens revoke: give --id, or --tenant and --principal, not both"},
		{"RevokeShortID", []string{"tokens", "revoke", "--file", file, "--id", "0123"}, "tokens revoke: --id must be at least 8 lowercase hex digits of a token's id (bookrecon tokens list)"},
		{"AddNoScope", []string{"tokens", "add", "--file", file, "--tenant", "t", "--principal", "p"}, "missing flags: --scope=S,..."},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var c cli
			p, err := kong.New(&c)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := p.Parse(tt.args); err == nil || err.Error() != tt.want {
				t.Errorf("Parse = %v\nwant %s", err, tt.want)
			}
		})
	}
	var out, info bytes.Buffer
	err := (&tokensAddCmd{Tenant: "t.a", Principal: "p", Scope: []string{"admin"}, tokensFile: tokensFile{file}}).run(&out, &info, time.Now())
	var e exitError
	if !errors.As(err, &e) || e.code != service.ExitUsage || err.Error() != "tokens add: auth: tokens file: tokens[0]: tenant must match [A-Za-z0-9_-]{1,64}\n"+
		`auth: tokens file: tokens[0]: scope "admin" is none of attempts:read, attempts:write, ops` || out.Len() != 0 {
		t.Errorf("add with a bad tenant and scope = %v (printed %q), want exit 80 naming both", err, out.String())
	}
	if _, err := os.Stat(file); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused add wrote the file (%v)", err)
	}

	// An id prefix of two tokens revokes neither.
	two := auth.File{Tokens: []auth.Entry{
		{SHA256: "abcdef01" + strings.Repeat("0", 56), Tenant: "t", Principal: "p", Scopes: []auth.Scope{auth.ScopeOps}},
		{SHA256: "abcdef01" + strings.Repeat("1", 56), Tenant: "t", Principal: "q", Scopes: []auth.Scope{auth.ScopeOps}},
	}}
	if err := auth.WriteFile(file, two); err != nil {
		t.Fatal(err)
	}
	err = (&tokensRevokeCmd{ID: "abcdef01", tokensFile: tokensFile{file}}).run(&out)
	if !errors.As(err, &e) || e.code != service.ExitUsage || err.Error() != "tokens revoke: --id abcdef01 matches 2 tokens: give more digits; nothing changed" {
		t.Errorf("revoke of an ambiguous id = %v", err)
	}
	if f, err := auth.ReadFile(file); err != nil || len(f.Tokens) != 2 {
		t.Errorf("after a refused revoke: %d tokens (%v), want 2", len(f.Tokens), err)
	}
}

// TestTokensConcurrentChangesAllTakeEffect: `tokens add` and `tokens revoke` run at once (as two
// operators, or a script in a loop, would) each take effect — none writes back a file read
// before another's change. 16 adds run at once with a revoke of a token that existed before
// them: 16 new tokens, and the revoked one gone.
func TestTokensConcurrentChangesAllTakeEffect(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "tokens.yaml")
	tf := tokensFile{File: file}
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	var out bytes.Buffer
	if err := (&tokensInitCmd{tf}).run(&out); err != nil {
		t.Fatal(err)
	}
	if err := (&tokensAddCmd{Tenant: "t_old", Principal: "svc_old", Scope: []string{"attempts:read"}, tokensFile: tf}).run(&out, &out, now); err != nil {
		t.Fatal(err)
	}
	const adds = 16
	var wg sync.WaitGroup
	errs := make(chan error, adds+1)
	for i := range adds {
		wg.Go(func() {
			var o bytes.Buffer
			errs <- (&tokensAddCmd{Tenant: "t_a", Principal: fmt.Sprintf("svc_%02d", i), Scope: []string{"attempts:read"}, tokensFile: tf}).run(&o, &o, now)
		})
	}
	wg.Go(func() {
		var o bytes.Buffer
		errs <- (&tokensRevokeCmd{Tenant: "t_old", Principal: "svc_old", tokensFile: tf}).run(&o)
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	f, err := auth.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range f.Tokens {
		got = append(got, e.Tenant+"/"+e.Principal)
	}
	slices.Sort(got)
	var want []string
	for i := range adds {
		want = append(want, fmt.Sprintf("t_a/svc_%02d", i))
	}
	if !slices.Equal(got, want) {
		t.Errorf("tokens after %d concurrent adds and a revoke: %v; want %v", adds, got, want)
	}
}

// TestTokensRewriteKeepsModeOwnerAndLink: add and revoke replace the file, keeping the mode,
// owner and group it had (a service of another user reading it through its group keeps
// reading it: before, the file came back root-only 0600 and the service kept its old tokens, the
// revoked one too), and through a symbolic link they replace the file it names, keeping the link.
func TestTokensRewriteKeepsModeOwnerAndLink(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs root to give the file another owner")
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "tokens.yaml")
	var out bytes.Buffer
	if err := (&tokensInitCmd{tokensFile{file}}).run(&out); err != nil {
		t.Fatal(err)
	}
	const uid, gid = 65534, 65534 // nobody, nogroup
	if err := os.Chown(file, uid, gid); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(file, 0o640); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.yaml")
	if err := os.Symlink(file, link); err != nil {
		t.Fatal(err)
	}
	check := func(after string, tokens int) {
		t.Helper()
		fi, err := os.Stat(file)
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		if fi.Mode().Perm() != 0o640 || st.Uid != uid || st.Gid != gid {
			t.Errorf("after %s: mode %o owner %d:%d, want 640 %d:%d", after, fi.Mode().Perm(), st.Uid, st.Gid, uid, gid)
		}
		if l, err := os.Lstat(link); err != nil || l.Mode()&os.ModeSymlink == 0 {
			t.Errorf("after %s: %s is no longer a link (%v)", after, link, err)
		}
		f, err := auth.ReadFile(file)
		if err != nil || len(f.Tokens) != tokens {
			t.Errorf("after %s: %d tokens (%v), want %d", after, len(f.Tokens), err, tokens)
		}
	}
	if err := (&tokensAddCmd{Tenant: "t_a", Principal: "svc", Scope: []string{"attempts:read"}, tokensFile: tokensFile{link}}).run(&out, &out, time.Now()); err != nil {
		t.Fatal(err)
	}
	check("add through the link", 1)
	if err := (&tokensRevokeCmd{Tenant: "t_a", Principal: "svc", tokensFile: tokensFile{file}}).run(&out); err != nil {
		t.Fatal(err)
	}
	check("revoke", 0)
}

// TestTokensAddRefusals: add writes nothing when the file does not exist (a mistyped --file used
// to create a new file no service reads, and print a token that never worked) or when the token
// cannot be written out (a token nobody holds was put in force).
func TestTokensAddRefusals(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	missing := filepath.Join(dir, "tokns.yaml")
	var out bytes.Buffer
	err := (&tokensAddCmd{Tenant: "t_a", Principal: "svc", Scope: []string{"attempts:read"}, tokensFile: tokensFile{missing}}).run(&out, &out, time.Now())
	want := "tokens add: " + missing + " does not exist: create it with bookrecon tokens init, or check --file (BOOKRECON_TOKENS_FILE)"
	if err == nil || err.Error() != want || out.Len() != 0 {
		t.Errorf("add to a missing file = %v (printed %q), want %q and nothing printed", err, out.String(), want)
	}
	if _, err := os.Stat(missing); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("add created %s (%v)", missing, err)
	}

	file := filepath.Join(dir, "tokens.yaml")
	if err := (&tokensInitCmd{tokensFile{file}}).run(&out); err != nil {
		t.Fatal(err)
	}
	err = (&tokensAddCmd{Tenant: "t_a", Principal: "svc", Scope: []string{"attempts:read"}, tokensFile: tokensFile{file}}).run(failingWriter{}, &out, time.Now())
	if err == nil || !strings.Contains(err.Error(), "writing the token") || !strings.HasSuffix(err.Error(), "nothing was added") {
		t.Errorf("add with stdout failing = %v, want writing the token … nothing was added", err)
	}
	if f, err := auth.ReadFile(file); err != nil || len(f.Tokens) != 0 {
		t.Errorf("after a token that could not be printed: %d tokens (%v), want 0", len(f.Tokens), err)
	}
}

// failingWriter fails every write, as a full or closed stdout does.
type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, syscall.ENOSPC }
