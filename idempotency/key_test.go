package idempotency

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/bookrecon/bookrecon/internal/harness/pgtest"
)

func TestStatementsPrepare(t *testing.T) {
	t.Parallel()
	pgtest.PrepareStatements(t, stmts)
}

func TestParseKey(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("k", MaxKeyLen)
	for _, tc := range []struct {
		name    string
		values  []string
		want    string
		wantErr error
	}{
		{"bare", []string{"5f6de8fd-919f-4a4a-a3dc-0a664c4767ab"}, "5f6de8fd-919f-4a4a-a3dc-0a664c4767ab", nil},
		{"quoted stripped", []string{`"8e03978e-40d5-43e8-bc93-6894a57f9324"`}, "8e03978e-40d5-43e8-bc93-6894a57f9324", nil},
		{"quoted escapes", []string{`"a\"b\\c"`}, `a"b\c`, nil},
		{"surrounding spaces", []string{"  k1 \t"}, "k1", nil},
		{"255 characters", []string{long}, long, nil},
		{"missing", nil, "", ErrKeyMissing},
		{"empty", []string{""}, "", ErrKeyInvalid},
		{"empty quoted", []string{`""`}, "", ErrKeyInvalid},
		{"256 characters", []string{long + "k"}, "", ErrKeyInvalid},
		{"inner space", []string{"a b"}, "", ErrKeyInvalid},
		{"quoted inner space", []string{`"a b"`}, "", ErrKeyInvalid},
		{"not ascii", []string{"clé"}, "", ErrKeyInvalid},
		{"control", []string{"a\x01"}, "", ErrKeyInvalid},
		{"open quote", []string{`"abc`}, "", ErrKeyInvalid},
		{"text after quote", []string{`"ab"c`}, "", ErrKeyInvalid},
		{"bad escape", []string{`"a\b"`}, "", ErrKeyInvalid},
		{"sent twice", []string{"k1", "k1"}, "", ErrKeyInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{}
			for _, v := range tc.values {
				h.Add(HeaderKey, v)
			}
			got, err := ParseKey(h)
			if got != tc.want || !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Fatalf("ParseKey(%q) = %q, %v; want %q, %v", tc.values, got, err, tc.want, tc.wantErr)
			}
		})
	}
}

func TestDefaultFingerprint(t *testing.T) {
	t.Parallel()
	fp := func(method, path, route, body string) Fingerprint {
		r := httptest.NewRequest(method, path, nil)
		f, err := DefaultFingerprint(r, route, []byte(body))
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	base := fp("POST", "/v1/tenants/t_a/things", "POST /v1/tenants/{tenant}/things", `{"a":1,"b":[1,2]}`)
	same := map[string]Fingerprint{
		"member order and whitespace": fp("POST", "/v1/tenants/t_a/things", "POST /v1/tenants/{tenant}/things", "{ \"b\": [1, 2],\n \"a\": 1.0 }"),
	}
	// Query parameters in another order are the same query.
	if fp("POST", "/p?a=1&b=2", "r", "") != fp("POST", "/p?b=2&a=1", "r", "") {
		t.Error("the order of query parameters changed the fingerprint")
	}
	for name, got := range same {
		if got != base {
			t.Errorf("%s changed the fingerprint", name)
		}
	}
	differ := map[string]Fingerprint{
		"body":           fp("POST", "/v1/tenants/t_a/things", "POST /v1/tenants/{tenant}/things", `{"a":2,"b":[1,2]}`),
		"array order":    fp("POST", "/v1/tenants/t_a/things", "POST /v1/tenants/{tenant}/things", `{"a":1,"b":[2,1]}`),
		"path parameter": fp("POST", "/v1/tenants/t_b/things", "POST /v1/tenants/{tenant}/things", `{"a":1,"b":[1,2]}`),
		"route":          fp("POST", "/v1/tenants/t_a/things", "POST /v1/tenants/{tenant}/other", `{"a":1,"b":[1,2]}`),
		"method":         fp("PATCH", "/v1/tenants/t_a/things", "POST /v1/tenants/{tenant}/things", `{"a":1,"b":[1,2]}`),
		"not JSON":       fp("POST", "/v1/tenants/t_a/things", "POST /v1/tenants/{tenant}/things", `{"a":1,"b":[1,2]`),
		"empty":          fp("POST", "/v1/tenants/t_a/things", "POST /v1/tenants/{tenant}/things", ``),
		"query":          fp("POST", "/v1/tenants/t_a/things?dry_run=true", "POST /v1/tenants/{tenant}/things", `{"a":1,"b":[1,2]}`),
	}
	seen := map[Fingerprint]string{base: "base"}
	for name, got := range differ {
		if prev, dup := seen[got]; dup {
			t.Errorf("%s: same fingerprint as %s", name, prev)
		}
		seen[got] = name
	}
	// Bytes that are not JSON are taken as they are: one byte more is another request.
	if fp("POST", "/p", "r", "abc") == fp("POST", "/p", "r", "abc ") {
		t.Error("a non-JSON body's bytes do not count")
	}
}

func TestNewRefusesBadConfig(t *testing.T) {
	t.Parallel()
	_, err := New(Config{RequestTimeout: 10 * time.Second, LeaseMargin: time.Second, Lease: 10 * time.Second,
		LockTimeout: 10 * time.Second, MaxBody: -1})
	if err == nil {
		t.Fatal("New accepted a config without DB and Scope, a short lease, a long lock timeout and a negative MaxBody")
	}
	for _, want := range []string{"Config.DB is required", "Config.Scope is required",
		"Config.Lease 10s is shorter than RequestTimeout 10s + LeaseMargin 1s", "Config.LockTimeout 10s must be under RequestTimeout 10s",
		"Config.MaxBody -1 is negative"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("New's error %q does not say %q", err, want)
		}
	}
	if n := strings.Count(err.Error(), "\n") + 1; n != 5 {
		t.Errorf("New reported %d problems, want 5:\n%v", n, err)
	}
}

// FuzzParseKey: whatever the header holds, ParseKey returns ErrKeyInvalid or a key of 1–255
// visible ASCII characters; a key it returns, sent bare or quoted again, parses to itself.
func FuzzParseKey(f *testing.F) {
	for _, s := range []string{"k1", `"k1"`, `"a\"b"`, "", `"`, "a b", strings.Repeat("x", 300)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		h := http.Header{HeaderKey: {v}}
		k, err := ParseKey(h)
		if err != nil {
			if !errors.Is(err, ErrKeyInvalid) {
				t.Fatalf("ParseKey(%q): %v, want ErrKeyInvalid", v, err)
			}
			return
		}
		if len(k) < 1 || len(k) > MaxKeyLen || strings.IndexFunc(k, func(r rune) bool { return r < 0x21 || r > 0x7e }) >= 0 {
			t.Fatalf("ParseKey(%q) = %q: not 1-255 visible ASCII", v, k)
		}
		quoted := `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(k) + `"`
		for _, again := range []string{quoted, k} {
			if k[0] == '"' && again == k {
				continue // a bare key starting with a quote reads as a quoted string
			}
			if got, err := ParseKey(http.Header{HeaderKey: {again}}); got != k || err != nil {
				t.Fatalf("ParseKey(%q) = %q, %v; want %q", again, got, err, k)
			}
		}
	})
}
