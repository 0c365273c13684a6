// Package authtest makes tokens files for tests of the services that authenticate with
// internal/auth.
package authtest

import (
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/bookrecon/bookrecon/internal/auth"
)

// Grant is one token to issue: its tenant, principal and scopes.
type Grant struct {
	Tenant, Principal string
	Scopes            []auth.Scope
}

// Reader is the usual grant of a query API caller: tenant, principal, attempts:read.
func Reader(tenant, principal string) Grant {
	return Grant{Tenant: tenant, Principal: principal, Scopes: []auth.Scope{auth.ScopeAttemptsRead}}
}

// File writes a tokens file in a fresh t.TempDir() folder with one new token per grant and
// returns its path and the tokens, in the grants' order.
func File(t testing.TB, grants ...Grant) (path string, tokens []string) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "tokens.yaml")
	var f auth.File
	for _, g := range grants {
		tok, hash := auth.NewToken()
		tokens = append(tokens, tok)
		f.Tokens = append(f.Tokens, auth.Entry{SHA256: hash, Tenant: g.Tenant, Principal: g.Principal, Scopes: g.Scopes})
	}
	if err := auth.WriteFile(path, f); err != nil {
		t.Fatal(err)
	}
	return path, tokens
}

// Open is File, then auth.Open on it with a discarding logger and a private registry.
func Open(t testing.TB, grants ...Grant) (*auth.Tokens, []string) {
	t.Helper()
	path, tokens := File(t, grants...)
	tk, err := auth.Open(path, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	return tk, tokens
}
