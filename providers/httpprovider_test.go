package providers_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/bookrecon/bookrecon/events"
	"github.com/bookrecon/bookrecon/providers"
)

var testNow = time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)

type bundle struct {
	srv      *httptest.Server
	provider providers.Provider

	mu   sync.Mutex
	seen []*url.URL
}

// setup serves h and returns an adapter pointed at it, with its clock at testNow.
func setup(t *testing.T, h http.HandlerFunc) *bundle {
	t.Helper()
	b := &bundle{}
	b.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.mu.Lock()
		b.seen = append(b.seen, r.URL)
		b.mu.Unlock()
		h(w, r)
	}))
	t.Cleanup(b.srv.Close)
	b.provider = providers.NewHTTP(b.srv.URL, b.srv.Client(), providers.WithClock(func() time.Time { return testNow }))
	return b
}

// requests returns the URLs the server saw so far.
func (b *bundle) requests() []*url.URL {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]*url.URL(nil), b.seen...)
}

func answer(status int, body string, headers ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		for i := 0; i+1 < len(headers); i += 2 {
			w.Header().Set(headers[i], headers[i+1])
		}
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	}
}

var refQuery = providers.Query{Provider: "sim-hotels", Operation: events.OpBook, Kind: providers.LookupProviderReference, Value: "HTL-30303"}

func TestHTTPRequestShape(t *testing.T) {
	t.Parallel()
	b := setup(t, answer(200, `{"records":[]}`))
	from := time.Date(2026, 11, 30, 8, 50, 12, 500, time.FixedZone("X", 3600))
	queries := []providers.Query{
		refQuery,
		{Provider: "sim/odd name", Operation: events.OpCancel, Kind: providers.LookupClientReference, Value: "cr a&b"},
		{Provider: "sim-air", Operation: events.OpBook, Kind: providers.LookupFingerprint, Value: "abc", From: from, To: from.Add(20 * time.Minute)},
	}
	for _, q := range queries {
		if _, err := b.provider.Lookup(t.Context(), q); err != nil {
			t.Fatalf("Lookup(%+v): %v", q, err)
		}
	}
	want := []string{
		"/v1/providers/sim-hotels/records?kind=provider_reference&operation=BOOK&value=HTL-30303",
		"/v1/providers/sim%2Fodd%20name/records?kind=client_reference&operation=CANCEL&value=cr+a%26b",
		"/v1/providers/sim-air/records?from=2026-11-30T07%3A50%3A12.0000005Z&kind=fingerprint&operation=BOOK&to=2026-11-30T08%3A10%3A12.0000005Z&value=abc",
	}
	var got []string
	for _, u := range b.requests() {
		got = append(got, u.RequestURI())
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("request URIs mismatch (-want +got):\n%s", diff)
	}
}

func TestHTTPDecodesRecords(t *testing.T) {
	t.Parallel()
	b := setup(t, answer(200, `{"records":[
		{"providerReference":"HTL-1","clientReference":"cr_1","status":"CONFIRMED","createdAt":"2026-11-30T09:00:06Z","fingerprint":"ab12","extra":1},
		{"providerReference":"HTL-2","clientReference":null,"status":"CANCELLED","createdAt":"2026-11-30T10:00:06.25+01:00","fingerprint":null}
	]}`))
	got, err := b.provider.Lookup(t.Context(), refQuery)
	if err != nil {
		t.Fatal(err)
	}
	want := []providers.Record{
		{ProviderReference: "HTL-1", ClientReference: "cr_1", Status: providers.StatusConfirmed, CreatedAt: time.Date(2026, 11, 30, 9, 0, 6, 0, time.UTC), Fingerprint: "ab12"},
		{ProviderReference: "HTL-2", Status: providers.StatusCancelled, CreatedAt: time.Date(2026, 11, 30, 9, 0, 6, 250_000_000, time.UTC)},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("records mismatch (-want +got):\n%s", diff)
	}
}

func TestHTTPStatusMapping(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name       string
		h          http.HandlerFunc
		class      providers.ErrorClass
		status     int
		retryAfter time.Duration
		is         error
	}{
		{"429 seconds", answer(429, `{"error":{"code":"rate_limited","message":"slow down"}}`, "Retry-After", "7"),
			providers.ClassRateLimited, 429, 7 * time.Second, providers.ErrRateLimited},
		{"429 HTTP date", answer(429, ``, "Retry-After", "Mon, 30 Nov 2026 09:00:13 GMT"),
			providers.ClassRateLimited, 429, 13 * time.Second, providers.ErrRateLimited},
		{"429 without Retry-After", answer(429, ``), providers.ClassRateLimited, 429, 0, providers.ErrRateLimited},
		{"429 garbage Retry-After", answer(429, ``, "Retry-After", "later"), providers.ClassRateLimited, 429, 0, providers.ErrRateLimited},
		{"500", answer(500, `oops`), providers.ClassServer, 500, 0, providers.ErrServer},
		{"503 with Retry-After", answer(503, ``, "Retry-After", "2"), providers.ClassServer, 503, 2 * time.Second, providers.ErrServer},
		{"504", answer(504, ``), providers.ClassServer, 504, 0, providers.ErrServer},
		{"408", answer(408, ``), providers.ClassTimeout, 408, 0, providers.ErrTimeout},
		{"404 unknown provider", answer(404, `{"error":{"code":"unknown_provider","message":"no such provider"}}`),
			providers.ClassContract, 404, 0, providers.ErrUnknownProvider},
		{"404 plain", answer(404, `not found`), providers.ClassContract, 404, 0, providers.ErrUnknownProvider},
		{"400 unsupported", answer(400, `{"error":{"code":"unsupported_lookup","message":"no"}}`),
			providers.ClassContract, 400, 0, providers.ErrUnsupportedLookup},
		{"400 invalid query", answer(400, `{"error":{"code":"invalid_query","message":"no"}}`),
			providers.ClassContract, 400, 0, providers.ErrInvalidQuery},
		{"400 plain", answer(400, `bad`), providers.ClassContract, 400, 0, providers.ErrContract},
		{"403", answer(403, ``), providers.ClassContract, 403, 0, providers.ErrContract},
		{"302", answer(302, ``), providers.ClassContract, 302, 0, providers.ErrContract},
		{"200 not JSON", answer(200, `<html>`), providers.ClassContract, 200, 0, providers.ErrMalformedResponse},
		{"200 no records member", answer(200, `{"items":[]}`), providers.ClassContract, 200, 0, providers.ErrMalformedResponse},
		{"200 records null", answer(200, `{"records":null}`), providers.ClassContract, 200, 0, providers.ErrMalformedResponse},
		{"200 trailing data", answer(200, `{"records":[]} {}`), providers.ClassContract, 200, 0, providers.ErrMalformedResponse},
		{"200 bad status", answer(200, `{"records":[{"providerReference":"A","status":"BOOKED","createdAt":"2026-11-30T09:00:00Z"}]}`),
			providers.ClassContract, 200, 0, providers.ErrMalformedResponse},
		{"200 bad createdAt", answer(200, `{"records":[{"providerReference":"A","status":"PENDING","createdAt":"yesterday"}]}`),
			providers.ClassContract, 200, 0, providers.ErrMalformedResponse},
		{"200 no reference", answer(200, `{"records":[{"status":"PENDING","createdAt":"2026-11-30T09:00:00Z"}]}`),
			providers.ClassContract, 200, 0, providers.ErrMalformedResponse},
		{"200 too large", answer(200, `{"records":[]}`+strings.Repeat(" ", providers.MaxResponseBytes)),
			providers.ClassContract, 200, 0, providers.ErrMalformedResponse},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, tt.h)
			recs, err := b.provider.Lookup(t.Context(), refQuery)
			if recs != nil {
				t.Errorf("records = %+v, want nil", recs)
			}
			var pe *providers.Error
			if !errors.As(err, &pe) {
				t.Fatalf("error %v is not a *providers.Error", err)
			}
			got := providers.Error{Provider: pe.Provider, Class: pe.Class, StatusCode: pe.StatusCode, RetryAfter: pe.RetryAfter}
			want := providers.Error{Provider: "sim-hotels", Class: tt.class, StatusCode: tt.status, RetryAfter: tt.retryAfter}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("error mismatch (-want +got):\n%s\nerror: %v", diff, err)
			}
			if !errors.Is(err, tt.is) {
				t.Errorf("errors.Is(%v, %v) = false", err, tt.is)
			}
			if d, ok := providers.RetryAfter(err); d != tt.retryAfter || ok != (tt.retryAfter > 0) {
				t.Errorf("RetryAfter = %s, %v; want %s", d, ok, tt.retryAfter)
			}
		})
	}
}

// blockUntilGone holds the answer until the client goes away.
func blockUntilGone(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }

func TestHTTPTimeouts(t *testing.T) {
	t.Parallel()
	t.Run("context deadline", func(t *testing.T) {
		t.Parallel()
		b := setup(t, blockUntilGone)
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
		defer cancel()
		_, err := b.provider.Lookup(ctx, refQuery)
		wantTimeout(t, err)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("errors.Is(%v, context.DeadlineExceeded) = false", err)
		}
	})
	t.Run("client timeout", func(t *testing.T) {
		t.Parallel()
		b := setup(t, blockUntilGone)
		client := b.srv.Client()
		client.Timeout = 20 * time.Millisecond
		p := providers.NewHTTP(b.srv.URL, client)
		_, err := p.Lookup(t.Context(), refQuery)
		wantTimeout(t, err)
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			t.Errorf("error %v is not a net.Error timeout", err)
		}
	})
	t.Run("cancelled", func(t *testing.T) {
		t.Parallel()
		b := setup(t, blockUntilGone)
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		_, err := b.provider.Lookup(ctx, refQuery)
		wantTimeout(t, err)
		if !errors.Is(err, context.Canceled) {
			t.Errorf("errors.Is(%v, context.Canceled) = false", err)
		}
		if seen := b.requests(); len(seen) != 0 {
			t.Errorf("a cancelled lookup was sent: %v", seen)
		}
	})
	t.Run("connection refused", func(t *testing.T) {
		t.Parallel()
		b := setup(t, blockUntilGone)
		b.srv.Close()
		_, err := b.provider.Lookup(t.Context(), refQuery)
		wantTimeout(t, err)
	})
	t.Run("connection closed before the answer", func(t *testing.T) {
		t.Parallel()
		b := setup(t, func(w http.ResponseWriter, _ *http.Request) { hijackClose(t, w, "") })
		_, err := b.provider.Lookup(t.Context(), refQuery)
		wantTimeout(t, err)
	})
	t.Run("body cut short", func(t *testing.T) {
		t.Parallel()
		b := setup(t, func(w http.ResponseWriter, _ *http.Request) {
			hijackClose(t, w, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"records\":[")
		})
		_, err := b.provider.Lookup(t.Context(), refQuery)
		var pe *providers.Error
		if wantTimeout(t, err); errors.As(err, &pe) && pe.StatusCode != 200 {
			t.Errorf("StatusCode = %d, want 200", pe.StatusCode)
		}
	})
}

func hijackClose(t *testing.T, w http.ResponseWriter, raw string) {
	conn, buf, err := w.(http.Hijacker).Hijack()
	if err != nil {
		t.Errorf("hijack: %v", err)
		return
	}
	if raw != "" {
		_, _ = buf.WriteString(raw)
		_ = buf.Flush()
	}
	_ = conn.Close()
}

func wantTimeout(t *testing.T, err error) {
	t.Helper()
	if c, ok := providers.ClassOf(err); !ok || c != providers.ClassTimeout {
		t.Fatalf("ClassOf(%v) = %q, %v; want timeout", err, c, ok)
	}
	if !errors.Is(err, providers.ErrTimeout) {
		t.Errorf("errors.Is(%v, ErrTimeout) = false", err)
	}
}

func TestHTTPInvalidQueriesAreNotSent(t *testing.T) {
	t.Parallel()
	b := setup(t, answer(200, `{"records":[]}`))
	at := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	for _, q := range []providers.Query{
		{Kind: providers.LookupProviderReference, Value: "X"},
		{Provider: "p", Kind: "booking_id", Value: "X"},
		{Provider: "p", Kind: providers.LookupClientReference},
		{Provider: "p", Kind: providers.LookupFingerprint, Value: "f"},
		{Provider: "p", Kind: providers.LookupFingerprint, Value: "f", From: at, To: at.Add(-time.Second)},
	} {
		_, err := b.provider.Lookup(t.Context(), q)
		if c, _ := providers.ClassOf(err); c != providers.ClassContract || !errors.Is(err, providers.ErrInvalidQuery) {
			t.Errorf("Lookup(%+v) = %v; want a contract error wrapping ErrInvalidQuery", q, err)
		}
	}
	if seen := b.requests(); len(seen) != 0 {
		t.Errorf("invalid queries were sent: %v", seen)
	}
}

func TestHTTPInvalidBaseURL(t *testing.T) {
	t.Parallel()
	for _, base := range []string{"::", "ftp://example.invalid", "http://", "http://h/?q=1"} {
		p := providers.NewHTTP(base, nil)
		_, err := p.Lookup(t.Context(), refQuery)
		if c, _ := providers.ClassOf(err); c != providers.ClassContract || !errors.Is(err, providers.ErrInvalidQuery) {
			t.Errorf("NewHTTP(%q).Lookup = %v; want a contract error", base, err)
		}
	}
}

func TestHTTPBaseURLWithPath(t *testing.T) {
	t.Parallel()
	b := setup(t, answer(200, `{"records":[]}`))
	p := providers.NewHTTP(b.srv.URL+"/prefix/", b.srv.Client())
	if _, err := p.Lookup(t.Context(), refQuery); err != nil {
		t.Fatal(err)
	}
	if got := b.requests()[0].Path; got != "/prefix/v1/providers/sim-hotels/records" {
		t.Errorf("path = %q", got)
	}
}
