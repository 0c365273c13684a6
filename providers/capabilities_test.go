package providers_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/bookrecon/bookrecon/events"
	"github.com/bookrecon/bookrecon/providers"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const samplePath = "testdata/providers.yaml"

func TestLoadMapSample(t *testing.T) {
	t.Parallel()
	m, err := providers.LoadMap(samplePath)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"sim-air", "sim-hotels", "sim-legacy", "sim-pay"}, m.Names()); diff != "" {
		t.Errorf("Names() mismatch (-want +got):\n%s", diff)
	}
	noDeadlines := map[events.Operation]time.Duration{}
	want := map[string]providers.Capabilities{
		"sim-hotels": {
			Name:                  "sim-hotels",
			Lookups:               []providers.LookupKind{providers.LookupProviderReference, providers.LookupClientReference},
			Consistency:           "strong",
			ConsistencyWindow:     0,
			AuthoritativeNotFound: true,
			NativeIdempotency:     false,
			FingerprintWindow:     10 * time.Minute,
			MaxProcessingTime:     10 * time.Second,
			RateLimit:             providers.RateLimit{RPS: 50, Burst: 10},
			Deadline:              30 * time.Second,
			DeadlineByOperation:   noDeadlines,
			MaxVersions:           3,
			MaxInFlight:           4,
		},
		"sim-air": {
			Name:                  "sim-air",
			Lookups:               []providers.LookupKind{providers.LookupProviderReference, providers.LookupFingerprint},
			Consistency:           "eventual",
			ConsistencyWindow:     3 * time.Second,
			AuthoritativeNotFound: false,
			FingerprintWindow:     10 * time.Minute,
			MaxProcessingTime:     10 * time.Second,
			RateLimit:             providers.RateLimit{RPS: 20, Burst: 5},
			Deadline:              30 * time.Second,
			DeadlineByOperation:   noDeadlines,
			MaxVersions:           3,
			MaxInFlight:           4,
		},
		"sim-pay": {
			Name:                  "sim-pay",
			Lookups:               []providers.LookupKind{providers.LookupProviderReference, providers.LookupClientReference},
			Consistency:           "eventual",
			ConsistencyWindow:     2 * time.Second,
			AuthoritativeNotFound: true,
			NativeIdempotency:     true,
			FingerprintWindow:     10 * time.Minute,
			MaxProcessingTime:     10 * time.Second,
			RateLimit:             providers.RateLimit{RPS: 100, Burst: 20},
			Deadline:              30 * time.Second,
			DeadlineByOperation:   noDeadlines,
			MaxVersions:           3,
			MaxInFlight:           4,
		},
		"sim-legacy": {
			Name:                "sim-legacy",
			Lookups:             []providers.LookupKind{},
			Consistency:         "strong",
			FingerprintWindow:   10 * time.Minute,
			MaxProcessingTime:   5 * time.Minute, // default
			RateLimit:           providers.RateLimit{RPS: 10, Burst: 10},
			Deadline:            30 * time.Second,
			DeadlineByOperation: noDeadlines,
			MaxVersions:         3,
			MaxInFlight:         4,
		},
	}
	for name, w := range want {
		got, ok := m.Get(name)
		if !ok {
			t.Errorf("Get(%q) not found", name)
			continue
		}
		if diff := cmp.Diff(w, got); diff != "" {
			t.Errorf("Get(%q) mismatch (-want +got):\n%s", name, diff)
		}
		if !m.Known(name) {
			t.Errorf("Known(%q) = false", name)
		}
	}
	if _, ok := m.Get("sim-nope"); ok || m.Known("sim-nope") {
		t.Error("sim-nope must be unknown")
	}
}

func TestParseMapDefaults(t *testing.T) {
	t.Parallel()
	m, err := providers.ParseMap([]byte("providers:\n  bare: {}\n  nulls:\n    lookups: ~\n    rateLimit: {rps: 2.5}\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := providers.Capabilities{
		Name:                "bare",
		Lookups:             []providers.LookupKind{},
		Consistency:         "strong",
		FingerprintWindow:   10 * time.Minute,
		MaxProcessingTime:   5 * time.Minute,
		RateLimit:           providers.RateLimit{RPS: 10, Burst: 10},
		Deadline:            30 * time.Minute,
		DeadlineByOperation: map[events.Operation]time.Duration{},
		MaxVersions:         3,
		MaxInFlight:         4,
	}
	got, _ := m.Get("bare")
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("defaults mismatch (-want +got):\n%s", diff)
	}
	want.Name, want.RateLimit.RPS = "nulls", 2.5
	got, _ = m.Get("nulls")
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("nulls mismatch (-want +got):\n%s", diff)
	}
}

func TestDeadlineForSupportsAndMaxInFlight(t *testing.T) {
	t.Parallel()
	m, err := providers.ParseMap([]byte(`
providers:
  p:
    lookups: [fingerprint]
    deadline: 45s
    deadlineByOperation: {CANCEL: 2h, REFUND: 90m}
    maxInFlight: 2
`))
	if err != nil {
		t.Fatal(err)
	}
	c, _ := m.Get("p")
	if c.MaxInFlight != 2 {
		t.Errorf("MaxInFlight = %d, want 2", c.MaxInFlight)
	}
	for _, tt := range []struct {
		op   events.Operation
		want time.Duration
	}{
		{events.OpBook, 45 * time.Second},
		{events.OpCancel, 2 * time.Hour},
		{events.OpRefund, 90 * time.Minute},
		{events.OpPaymentCapture, 45 * time.Second},
	} {
		if got := c.DeadlineFor(tt.op); got != tt.want {
			t.Errorf("DeadlineFor(%s) = %s, want %s", tt.op, got, tt.want)
		}
	}
	for _, tt := range []struct {
		kind providers.LookupKind
		want bool
	}{
		{providers.LookupFingerprint, true},
		{providers.LookupProviderReference, false},
		{providers.LookupClientReference, false},
	} {
		if got := c.Supports(tt.kind); got != tt.want {
			t.Errorf("Supports(%s) = %v, want %v", tt.kind, got, tt.want)
		}
	}
}

func TestMapGetReturnsACopy(t *testing.T) {
	t.Parallel()
	m, err := providers.LoadMap(samplePath)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := m.Get("sim-air")
	c.Lookups[0] = providers.LookupClientReference
	c.DeadlineByOperation[events.OpBook] = time.Nanosecond
	names := m.Names()
	names[0] = "changed"

	again, _ := m.Get("sim-air")
	if again.Lookups[0] != providers.LookupProviderReference || again.DeadlineFor(events.OpBook) != 30*time.Second {
		t.Errorf("Get returned shared state: %+v", again)
	}
	if m.Names()[0] != "sim-air" {
		t.Errorf("Names returned shared state: %v", m.Names())
	}
}

// problems lists the messages of the errors ParseMap joined.
func problems(t *testing.T, err error) []string {
	t.Helper()
	if !errors.Is(err, providers.ErrInvalidMap) {
		t.Fatalf("error %v does not wrap ErrInvalidMap", err)
	}
	outer, ok := err.(interface{ Unwrap() []error })
	if !ok {
		t.Fatalf("error %T is not a multi-error", err)
	}
	var out []string
	for _, e := range outer.Unwrap() {
		if joined, ok := e.(interface{ Unwrap() []error }); ok {
			for _, p := range joined.Unwrap() {
				out = append(out, p.Error())
			}
		}
	}
	return out
}

func TestParseMapReportsEveryProblem(t *testing.T) {
	t.Parallel()
	_, err := providers.ParseMap([]byte(`
version: 2
providers:
  a:
    lookups: [provider_reference, booking_id, provider_reference]
    consistency: sometimes
    consistencyWindow: 3
    authoritativeNotFound: "yes"
    fingerprintWindow: 0s
    maxProcessingTime: -1s
    rateLimit: {rps: 0, burst: 1.5, per: minute}
    deadline: soon
    deadlineByOperation: {BOOK: 1m, SELL: 1m, CANCEL: 0s}
    maxVersions: 0
    maxInFlight: 0
    colour: blue
  b:
    lookups: fingerprint
    maxInFlight: two
  "bad name":
    lookups: []
`))
	want := []string{
		`version: unknown field`,
		`providers.a.authoritativeNotFound: must be true or false, got string "yes"`,
		`providers.a.colour: unknown field`,
		`providers.a.consistency: must be "strong" or "eventual", got "sometimes"`,
		`providers.a.consistencyWindow: must be a Go duration string such as "30s", got 3`,
		`providers.a.deadline: must be a Go duration string such as "30s", got "soon"`,
		`providers.a.deadlineByOperation.CANCEL: must be positive, got 0s`,
		`providers.a.deadlineByOperation.SELL: unknown operation "SELL" (want one of [BOOK PAYMENT_AUTHORIZE PAYMENT_CAPTURE MODIFY CANCEL REFUND])`,
		`providers.a.fingerprintWindow: must be positive, got 0s`,
		`providers.a.lookups[1]: unknown lookup kind "booking_id" (want one of [provider_reference client_reference fingerprint])`,
		`providers.a.lookups[2]: duplicate lookup kind "provider_reference"`,
		`providers.a.maxInFlight: must be at least 1, got 0`,
		`providers.a.maxProcessingTime: must not be negative, got -1s`,
		`providers.a.maxVersions: must be at least 1, got 0`,
		`providers.a.rateLimit.burst: must be an integer, got 1.5`,
		`providers.a.rateLimit.per: unknown field`,
		`providers.a.rateLimit.rps: must be a positive number, got 0`,
		`providers.b.lookups: must be a list of lookup kinds [provider_reference client_reference fingerprint]`,
		`providers.b.maxInFlight: must be an integer, got string "two"`,
		`providers.bad name: invalid provider name (want ^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$)`,
	}
	if diff := cmp.Diff(want, problems(t, err)); diff != "" {
		t.Errorf("problems mismatch (-want +got):\n%s", diff)
	}
}

func TestParseMapRejectsBadDocuments(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		doc  string
	}{
		{"empty", ""},
		{"not a mapping", "- a\n- b\n"},
		{"no providers", "other: 1\n"},
		{"empty providers", "providers: {}\n"},
		{"providers is a list", "providers: [a]\n"},
		{"provider is a scalar", "providers:\n  a: 3\n"},
		{"duplicate key", "providers:\n  a: {}\n  a: {}\n"},
		{"not yaml", "providers: [\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m, err := providers.ParseMap([]byte(tt.doc))
			if !errors.Is(err, providers.ErrInvalidMap) || m != nil {
				t.Errorf("ParseMap = %v, %v; want nil and ErrInvalidMap", m, err)
			}
		})
	}
}

func TestLoadMapErrors(t *testing.T) {
	t.Parallel()
	if _, err := providers.LoadMap(filepath.Join(t.TempDir(), "missing.yaml")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("LoadMap(missing) = %v, want os.ErrNotExist", err)
	}
	path := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(path, []byte("providers:\n  a: {lookups: [x]}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := providers.LoadMap(path)
	if !errors.Is(err, providers.ErrInvalidMap) {
		t.Errorf("LoadMap(bad) = %v, want ErrInvalidMap", err)
	}
}

func TestEnums(t *testing.T) {
	t.Parallel()
	for _, k := range providers.LookupKinds() {
		if !k.Valid() {
			t.Errorf("%q not valid", k)
		}
	}
	if providers.LookupKind("booking_id").Valid() {
		t.Error("booking_id must not be valid")
	}
	for _, s := range providers.RecordStatuses() {
		if !s.Valid() {
			t.Errorf("%q not valid", s)
		}
	}
	if providers.RecordStatus("confirmed").Valid() {
		t.Error("lower-case status must not be valid")
	}
	if diff := cmp.Diff([]providers.Result{"found", "not_found", "several", "error"}, providers.Results()); diff != "" {
		t.Errorf("Results mismatch (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]providers.ErrorClass{"timeout", "5xx", "rate_limited", "contract"}, providers.ErrorClasses()); diff != "" {
		t.Errorf("ErrorClasses mismatch (-want +got):\n%s", diff)
	}
	if !providers.LookupClientReference.IsReference() || providers.LookupFingerprint.IsReference() {
		t.Error("IsReference wrong")
	}
}
