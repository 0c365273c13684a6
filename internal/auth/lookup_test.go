package auth

import (
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"net/http/httptest"
	"testing"
)

// TestLookupConstantTime: every lookup compares the presented token's hash with every entry
// through crypto/subtle, whether it matches the first entry, the last or none: no early exit.
func TestLookupConstantTime(t *testing.T) {
	t.Parallel()
	var toks []string
	s := &tokenSet{}
	for i := range 5 {
		tok, _ := NewToken()
		toks = append(toks, tok)
		s.entries = append(s.entries, entry{hash: sha256.Sum256([]byte(tok)), p: Principal{Tenant: "t", Name: fmt.Sprint(i), Scopes: []Scope{ScopeAttemptsRead}}})
	}
	calls := 0
	tk := &Tokens{metrics: must(NewMetrics(nil)), eq: func(x, y []byte) int { calls++; return subtle.ConstantTimeCompare(x, y) }}
	tk.set.Store(s)
	unknown, _ := NewToken()
	for _, tt := range []struct {
		name, token, want string
	}{{"First", toks[0], "0"}, {"Last", toks[4], "4"}, {"Middle", toks[2], "2"}, {"None", unknown, ""}} {
		calls = 0
		r := httptest.NewRequest("GET", "/v1/x", nil)
		r.Header.Set("Authorization", "Bearer "+tt.token)
		p, d := tk.Authorize(r, ScopeAttemptsRead)
		if calls != 5 || p.Name != tt.want || (d == nil) != (tt.want != "") {
			t.Errorf("%s: %d comparisons, principal %q (%v); want 5, %q", tt.name, calls, p.Name, d, tt.want)
		}
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
