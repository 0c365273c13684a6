package providers_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/bookrecon/bookrecon/providers"
)

func TestErrorClassification(t *testing.T) {
	t.Parallel()
	sentinels := map[providers.ErrorClass]error{
		providers.ClassTimeout:     providers.ErrTimeout,
		providers.ClassServer:      providers.ErrServer,
		providers.ClassRateLimited: providers.ErrRateLimited,
		providers.ClassContract:    providers.ErrContract,
	}
	for _, class := range providers.ErrorClasses() {
		t.Run(string(class), func(t *testing.T) {
			t.Parallel()
			err := fmt.Errorf("reconcile attempt 42: %w", &providers.Error{Provider: "sim-air", Class: class, Err: context.DeadlineExceeded})
			if c, ok := providers.ClassOf(err); !ok || c != class {
				t.Errorf("ClassOf = %q, %v; want %q, true", c, ok, class)
			}
			for other, sentinel := range sentinels {
				if got := errors.Is(err, sentinel); got != (other == class) {
					t.Errorf("errors.Is(err, %v) = %v", sentinel, got)
				}
			}
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Error("the cause must stay reachable")
			}
			if got, want := providers.IsTransient(err), class != providers.ClassContract; got != want {
				t.Errorf("IsTransient = %v, want %v", got, want)
			}
		})
	}
}

func TestClassOfAndRetryAfterOnOtherErrors(t *testing.T) {
	t.Parallel()
	for _, err := range []error{nil, errors.New("boom"), context.Canceled} {
		if c, ok := providers.ClassOf(err); ok || c != "" {
			t.Errorf("ClassOf(%v) = %q, %v; want \"\", false", err, c, ok)
		}
		if d, ok := providers.RetryAfter(err); ok || d != 0 {
			t.Errorf("RetryAfter(%v) = %s, %v; want 0, false", err, d, ok)
		}
		if providers.IsTransient(err) {
			t.Errorf("IsTransient(%v) = true", err)
		}
	}
	err := &providers.Error{Class: providers.ClassRateLimited}
	if d, ok := providers.RetryAfter(err); ok || d != 0 {
		t.Errorf("RetryAfter without a wait = %s, %v; want 0, false", d, ok)
	}
	err.RetryAfter = 3 * time.Second
	if d, ok := providers.RetryAfter(fmt.Errorf("wrapped: %w", err)); !ok || d != 3*time.Second {
		t.Errorf("RetryAfter = %s, %v; want 3s, true", d, ok)
	}
}

func TestErrorMessage(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		err  *providers.Error
		want string
	}{
		{
			&providers.Error{Provider: "sim-air", Class: providers.ClassRateLimited, StatusCode: 429, RetryAfter: 2 * time.Second, Err: errors.New("rate_limited: slow down")},
			"providers: sim-air: rate_limited (HTTP 429, retry after 2s): rate_limited: slow down",
		},
		{
			&providers.Error{Provider: "sim-pay", Class: providers.ClassTimeout, Err: context.DeadlineExceeded},
			"providers: sim-pay: timeout: context deadline exceeded",
		},
		{&providers.Error{Class: providers.ClassServer, StatusCode: 503}, "providers: 5xx (HTTP 503)"},
	} {
		if got := tt.err.Error(); got != tt.want {
			t.Errorf("Error() = %q, want %q", got, tt.want)
		}
	}
}

func TestResultOf(t *testing.T) {
	t.Parallel()
	one := providers.Record{ProviderReference: "A"}
	for _, tt := range []struct {
		recs []providers.Record
		err  error
		want providers.Result
	}{
		{nil, nil, providers.ResultNotFound},
		{[]providers.Record{}, nil, providers.ResultNotFound},
		{[]providers.Record{one}, nil, providers.ResultFound},
		{[]providers.Record{one, one}, nil, providers.ResultSeveral},
		{nil, &providers.Error{Class: providers.ClassServer}, providers.ResultError},
		{[]providers.Record{one}, errors.New("x"), providers.ResultError},
	} {
		if got := providers.ResultOf(tt.recs, tt.err); got != tt.want {
			t.Errorf("ResultOf(%d records, %v) = %q, want %q", len(tt.recs), tt.err, got, tt.want)
		}
	}
}

func TestParseRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		value  string
		want   time.Duration
		wantOK bool
	}{
		{"7", 7 * time.Second, true},
		{" 120 ", 2 * time.Minute, true},
		{"0", 0, true},
		{"Mon, 30 Nov 2026 09:00:07 GMT", 7 * time.Second, true},
		{"Monday, 30-Nov-26 09:01:00 GMT", time.Minute, true}, // RFC 850
		{"Mon Nov 30 09:00:30 2026", 30 * time.Second, true},  // ANSI C
		{"Mon, 30 Nov 2026 08:59:00 GMT", 0, true},            // in the past: no wait
		{"", 0, false},
		{"-3", 0, false},
		{"1.5", 0, false},
		{"soon", 0, false},
		{"99999999999999999999", 0, false},
	} {
		got, ok := providers.ParseRetryAfter(tt.value, now)
		if got != tt.want || ok != tt.wantOK {
			t.Errorf("ParseRetryAfter(%q) = %s, %v; want %s, %v", tt.value, got, ok, tt.want, tt.wantOK)
		}
	}
	if got, ok := providers.ParseRetryAfter("9223372036", now); !ok || got <= 0 {
		t.Errorf("ParseRetryAfter(huge) = %s, %v; want a positive clamp", got, ok)
	}
}
