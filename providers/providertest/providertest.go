// Package providertest is the conformance suite of the provider port: every adapter, and the
// simulator behind the HTTP adapter, must pass it (STYLE.md habit 21).
//
// The suite is driven by the capability map: for each provider in it, it builds its own truth,
// asks a fresh provider for it at chosen instants and checks what the port promises
// (docs/design.md#reconciliation):
//
//   - a supported lookup kind finds exactly the record asked for, whatever its status;
//   - an unsupported kind is a contract error wrapping providers.ErrUnsupportedLookup;
//   - not found is an empty result with a nil error;
//   - a record is hidden until createdAt + consistencyWindow and visible from then on;
//   - a fingerprint lookup returns only records created within [From, To], bounds included;
//   - several matches (client reference, fingerprint) return all of them;
//   - a provider missing from the map is a contract error wrapping providers.ErrUnknownProvider;
//   - an invalid query (empty value) is a contract error;
//   - a cancelled context is a timeout error that still says context.Canceled.
//
// Each subtest builds its own provider and makes at most two calls, so a rate limit with a burst
// of 2 or more never interferes. Subtests run in parallel.
package providertest

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"slices"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"

	"github.com/bookrecon/bookrecon/events"
	"github.com/bookrecon/bookrecon/providers"
)

// NewProviderFunc builds the provider under test for one subtest. The provider must hold exactly
// truth (provider name → records, createdAt as given, no shift), answer as its entry of the
// capability map says, and read its clock as now: a record is visible from createdAt +
// consistencyWindow on. Release resources with t.Cleanup.
type NewProviderFunc func(t *testing.T, truth map[string][]providers.Record, now time.Time) providers.Provider

// base is the creation time of the suite's first record.
var base = time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)

// Run runs the conformance suite against newProvider for every provider in m, each as a
// parallel subtest named after the provider.
func Run(t *testing.T, m *providers.Map, newProvider NewProviderFunc) {
	t.Helper()
	if len(m.Names()) == 0 {
		t.Fatal("providertest: the capability map names no provider")
	}
	for _, name := range m.Names() {
		caps, _ := m.Get(name)
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := suite{caps: caps, newProvider: newProvider}
			for _, k := range providers.LookupKinds() {
				t.Run(string(k), func(t *testing.T) {
					t.Parallel()
					if !caps.Supports(k) {
						s.testUnsupported(t, k)
						return
					}
					t.Run("FindsExactlyTheRecord", func(t *testing.T) { t.Parallel(); s.testFinds(t, k) })
					t.Run("NotFoundIsEmpty", func(t *testing.T) { t.Parallel(); s.testNotFound(t, k) })
					t.Run("ConsistencyWindow", func(t *testing.T) { t.Parallel(); s.testConsistencyWindow(t, k) })
					t.Run("InvalidQuery", func(t *testing.T) { t.Parallel(); s.testInvalidQuery(t, k) })
					if k != providers.LookupProviderReference {
						t.Run("SeveralMatches", func(t *testing.T) { t.Parallel(); s.testSeveral(t, k) })
					}
					if k == providers.LookupFingerprint {
						t.Run("FingerprintWindow", func(t *testing.T) { t.Parallel(); s.testFingerprintWindow(t) })
					}
				})
			}
			t.Run("UnknownProvider", func(t *testing.T) { t.Parallel(); s.testUnknownProvider(t) })
			t.Run("CancelledContext", func(t *testing.T) { t.Parallel(); s.testCancelled(t) })
		})
	}
}

type suite struct {
	caps        providers.Capabilities
	newProvider NewProviderFunc
}

// fingerprint returns a stable fingerprint-shaped value (64 lowercase hex digits) for label.
func fingerprint(label string) string {
	sum := sha256.Sum256([]byte("providertest:" + label))
	return hex.EncodeToString(sum[:])
}

func (s suite) provider(t *testing.T, now time.Time, recs ...providers.Record) providers.Provider {
	t.Helper()
	return s.newProvider(t, map[string][]providers.Record{s.caps.Name: recs}, now)
}

// visibleAt is an instant at which every record created up to latest is visible.
func (s suite) visibleAt(latest time.Time) time.Time {
	return latest.Add(s.caps.ConsistencyWindow).Add(time.Hour)
}

// query builds a lookup of kind k for the record r; fingerprint lookups get a window of
// ±FingerprintWindow around r's creation.
func (s suite) query(k providers.LookupKind, r providers.Record) providers.Query {
	q := providers.Query{Provider: s.caps.Name, Operation: events.OpBook, Kind: k}
	switch k {
	case providers.LookupProviderReference:
		q.Value = r.ProviderReference
	case providers.LookupClientReference:
		q.Value = r.ClientReference
	case providers.LookupFingerprint:
		q.Value = r.Fingerprint
		q.From = r.CreatedAt.Add(-s.caps.FingerprintWindow)
		q.To = r.CreatedAt.Add(s.caps.FingerprintWindow)
	}
	return q
}

func record(i int, status providers.RecordStatus, created time.Time) providers.Record {
	id := string(rune('A' + i))
	return providers.Record{
		ProviderReference: "PT-" + id,
		ClientReference:   "cr_pt_" + id,
		Status:            status,
		CreatedAt:         created,
		Fingerprint:       fingerprint(id),
	}
}

func lookup(t *testing.T, p providers.Provider, q providers.Query) ([]providers.Record, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	return p.Lookup(ctx, q)
}

func sortRecords(recs []providers.Record) []providers.Record {
	out := slices.Clone(recs)
	slices.SortFunc(out, func(a, b providers.Record) int {
		return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), cmp.Compare(a.ProviderReference, b.ProviderReference))
	})
	return out
}

func wantRecords(t *testing.T, q providers.Query, got []providers.Record, err error, want ...providers.Record) {
	t.Helper()
	if err != nil {
		t.Fatalf("Lookup(%s %s): unexpected error: %v", q.Kind, q.Value, err)
	}
	if len(want) == 0 {
		if len(got) != 0 {
			t.Fatalf("Lookup(%s %s) = %d records, want none: %+v", q.Kind, q.Value, len(got), got)
		}
		return
	}
	if diff := gocmp.Diff(sortRecords(want), sortRecords(got)); diff != "" {
		t.Fatalf("Lookup(%s %s) records mismatch (-want +got):\n%s", q.Kind, q.Value, diff)
	}
}

func wantError(t *testing.T, got []providers.Record, err error, class providers.ErrorClass, is ...error) {
	t.Helper()
	if err == nil {
		t.Fatalf("Lookup = %+v, nil error; want a %s error", got, class)
	}
	if got != nil {
		t.Errorf("Lookup returned records %+v with error %v; want nil records", got, err)
	}
	if c, ok := providers.ClassOf(err); !ok || c != class {
		t.Fatalf("ClassOf(%v) = %q, %v; want %q, true", err, c, ok, class)
	}
	for _, target := range is {
		if !errors.Is(err, target) {
			t.Errorf("errors.Is(%v, %v) = false, want true", err, target)
		}
	}
	if r := providers.ResultOf(got, err); r != providers.ResultError {
		t.Errorf("ResultOf = %q, want %q", r, providers.ResultError)
	}
}

func (s suite) testUnsupported(t *testing.T, k providers.LookupKind) {
	r := record(0, providers.StatusConfirmed, base)
	p := s.provider(t, s.visibleAt(base), r)
	got, err := lookup(t, p, s.query(k, r))
	wantError(t, got, err, providers.ClassContract, providers.ErrContract, providers.ErrUnsupportedLookup)
}

func (s suite) testFinds(t *testing.T, k providers.LookupKind) {
	statuses := providers.RecordStatuses()
	var truth []providers.Record
	for i, st := range statuses {
		truth = append(truth, record(i, st, base.Add(time.Duration(i)*time.Second)))
	}
	// A record with neither client reference nor fingerprint must never match those kinds.
	bare := providers.Record{ProviderReference: "PT-BARE", Status: providers.StatusConfirmed, CreatedAt: base}
	truth = append(truth, bare)
	now := s.visibleAt(truth[len(truth)-2].CreatedAt)
	for i, st := range statuses {
		t.Run(string(st), func(t *testing.T) {
			t.Parallel()
			p := s.provider(t, now, truth...)
			q := s.query(k, truth[i])
			got, err := lookup(t, p, q)
			wantRecords(t, q, got, err, truth[i])
			if r := providers.ResultOf(got, err); r != providers.ResultFound {
				t.Errorf("ResultOf = %q, want %q", r, providers.ResultFound)
			}
		})
	}
}

func (s suite) testNotFound(t *testing.T, k providers.LookupKind) {
	r := record(0, providers.StatusConfirmed, base)
	p := s.provider(t, s.visibleAt(base), r)
	q := s.query(k, r)
	q.Value = map[providers.LookupKind]string{
		providers.LookupProviderReference: "PT-MISSING",
		providers.LookupClientReference:   "cr_pt_missing",
		providers.LookupFingerprint:       fingerprint("missing"),
	}[k]
	got, err := lookup(t, p, q)
	wantRecords(t, q, got, err)
	if r := providers.ResultOf(got, err); r != providers.ResultNotFound {
		t.Errorf("ResultOf = %q, want %q", r, providers.ResultNotFound)
	}
}

func (s suite) testConsistencyWindow(t *testing.T, k providers.LookupKind) {
	r := record(0, providers.StatusConfirmed, base)
	visibleFrom := base.Add(s.caps.ConsistencyWindow)
	t.Run("HiddenBeforeWindow", func(t *testing.T) {
		t.Parallel()
		p := s.provider(t, visibleFrom.Add(-time.Millisecond), r)
		q := s.query(k, r)
		got, err := lookup(t, p, q)
		wantRecords(t, q, got, err)
	})
	t.Run("VisibleAtWindow", func(t *testing.T) {
		t.Parallel()
		p := s.provider(t, visibleFrom, r)
		q := s.query(k, r)
		got, err := lookup(t, p, q)
		wantRecords(t, q, got, err, r)
	})
}

func (s suite) testSeveral(t *testing.T, k providers.LookupKind) {
	a := record(0, providers.StatusConfirmed, base)
	b := record(1, providers.StatusPending, base.Add(min(time.Second, s.caps.FingerprintWindow)))
	other := record(2, providers.StatusConfirmed, base.Add(2*time.Second))
	b.ClientReference, b.Fingerprint = a.ClientReference, a.Fingerprint
	p := s.provider(t, s.visibleAt(other.CreatedAt), a, b, other)
	q := s.query(k, a)
	got, err := lookup(t, p, q)
	wantRecords(t, q, got, err, a, b)
	if r := providers.ResultOf(got, err); r != providers.ResultSeveral {
		t.Errorf("ResultOf = %q, want %q", r, providers.ResultSeveral)
	}
}

func (s suite) testFingerprintWindow(t *testing.T) {
	fw := s.caps.FingerprintWindow
	start := base.Add(fw + time.Hour)
	fp := fingerprint("window")
	mk := func(i int, at time.Time) providers.Record {
		r := record(i, providers.StatusConfirmed, at)
		r.Fingerprint = fp
		return r
	}
	tooEarly := mk(0, start.Add(-fw-time.Second))
	first := mk(1, start.Add(-fw))
	middle := mk(2, start)
	last := mk(3, start.Add(fw))
	tooLate := mk(4, start.Add(fw+time.Second))
	p := s.provider(t, s.visibleAt(tooLate.CreatedAt), tooEarly, first, middle, last, tooLate)
	q := providers.Query{
		Provider: s.caps.Name, Operation: events.OpBook, Kind: providers.LookupFingerprint,
		Value: fp, From: start.Add(-fw), To: start.Add(fw),
	}
	got, err := lookup(t, p, q)
	wantRecords(t, q, got, err, first, middle, last)
}

func (s suite) testInvalidQuery(t *testing.T, k providers.LookupKind) {
	r := record(0, providers.StatusConfirmed, base)
	p := s.provider(t, s.visibleAt(base), r)
	q := s.query(k, r)
	q.Value = ""
	got, err := lookup(t, p, q)
	wantError(t, got, err, providers.ClassContract, providers.ErrContract)
}

func (s suite) testUnknownProvider(t *testing.T) {
	r := record(0, providers.StatusConfirmed, base)
	p := s.provider(t, s.visibleAt(base), r)
	k := providers.LookupProviderReference
	if len(s.caps.Lookups) > 0 {
		k = s.caps.Lookups[0]
	}
	q := s.query(k, r)
	q.Provider = s.caps.Name + "-not-in-map"
	got, err := lookup(t, p, q)
	wantError(t, got, err, providers.ClassContract, providers.ErrContract, providers.ErrUnknownProvider)
}

func (s suite) testCancelled(t *testing.T) {
	r := record(0, providers.StatusConfirmed, base)
	p := s.provider(t, s.visibleAt(base), r)
	k := providers.LookupProviderReference
	if len(s.caps.Lookups) > 0 {
		k = s.caps.Lookups[0]
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	got, err := p.Lookup(ctx, s.query(k, r))
	wantError(t, got, err, providers.ClassTimeout, providers.ErrTimeout, context.Canceled)
}
