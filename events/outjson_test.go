package events

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
)

// escapeClasses are strings with every class encoding/json escapes or keeps: plain ASCII, " and
// \, the short escapes, the other control characters, <, > and &, DEL, multi-byte UTF-8,
// U+2028 and U+2029, invalid UTF-8 (a lone continuation byte, a truncated sequence, an encoded
// surrogate, an overlong form) and the empty string.
var escapeClasses = []string{
	"", "plain-ASCII_09", `quote " and \ backslash`, "\b\f\n\r\t", "\x00\x01\x1f\x7f",
	"<script>&amp;</script>", "é – ✓ 𝄞", "line\u2028sep\u2029par", "\x80", "ab\xe2\x80", "\xed\xa0\x80",
	"\xc0\xaf", "mixed <\u2028\xff\"\x19>", "\xe2\x80\xa8\xe2\x80\xa9\xe2\x80\xaa",
}

// TestResolvedAppendJSON: AppendJSON writes exactly json.Marshal's bytes for every escape class
// in every string member, both null and set pointers, times in other zones and with and without
// nanoseconds, and appends to what dst held; a year json.Marshal refuses fails both.
func TestResolvedAppendJSON(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 1, 10, 30, 0, 123456789, time.UTC)
	for i, s := range escapeClasses {
		for _, r := range []Resolved{
			resolvedOf(s, at, nil, nil),
			resolvedOf(s, at.Truncate(time.Second), &s, &s),
			resolvedOf(s, at.In(time.FixedZone("", -(9*3600+30*60))), &s, nil),
			resolvedOf(s, time.Time{}, nil, &s),
		} {
			want, err := json.Marshal(r)
			if err != nil {
				t.Fatal(err)
			}
			got, err := r.AppendJSON([]byte("head"))
			if err != nil || !bytes.Equal(got, append([]byte("head"), want...)) {
				t.Errorf("class %d: AppendJSON = %s, %v\nwant head%s", i, got, err, want)
			}
		}
	}
	r := resolvedOf("x", time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), nil, nil)
	if _, err := json.Marshal(r); err == nil {
		t.Fatal("json.Marshal accepted year 10000")
	}
	if got, err := r.AppendJSON([]byte("head")); err == nil || string(got) != "head" {
		t.Errorf("year 10000: AppendJSON = %q, %v; want head and an error", got, err)
	}
}

// FuzzResolvedAppendJSON compares AppendJSON with json.Marshal on arbitrary member values.
//
// Invariants: both fail or neither does; when neither does, AppendJSON(prefix) is prefix followed
// by json.Marshal's bytes exactly; when both fail, AppendJSON returns prefix unchanged.
func FuzzResolvedAppendJSON(f *testing.F) {
	for i, s := range escapeClasses {
		f.Add(s, escapeClasses[(i+1)%len(escapeClasses)], int64(i)*1e17, int64(i)*7919, int32(i*3600-12*3600), i, i%2 == 0, i%3 == 0)
	}
	f.Add("a", "b", int64(999999999), int64(253402300799), int32(23*3600+59*60), -1, true, false) // 9999-12-31T23:59:59.999999999
	f.Add("a", "b", int64(0), int64(253402300800), int32(0), 0, false, true)                      // year 10000
	f.Add("a", "b", int64(0), int64(-62135596801), int32(0), 0, false, true)                      // year -1
	f.Add("a", "b", int64(0), int64(0), int32(24*3600), 0, false, true)                           // a 24-hour offset
	f.Fuzz(func(t *testing.T, s1, s2 string, n1, n2 int64, zone int32, v int, ref, code bool) {
		r := Resolved{
			OutputEnvelope: OutputEnvelope{SpecVersion: v, EventID: s1, EventType: EventType(s2),
				OccurredAt: time.Unix(0, n1).In(time.FixedZone("z", int(zone))), TenantID: s2, BookingIntentID: s1 + s2,
				IdempotencyKey: s2 + s1, Operation: Operation(s1), OperationVersion: -v, Provider: s2},
			Status: s1, ResolutionSource: s2, ResolvedAt: time.Unix(n2, n1).UTC(),
		}
		if ref {
			r.ProviderReference = &s2
		}
		if code {
			r.FailureCode = &s1
		}
		want, werr := json.Marshal(r)
		got, gerr := r.AppendJSON([]byte("{["))
		switch {
		case (werr == nil) != (gerr == nil):
			t.Fatalf("json.Marshal error %v, AppendJSON error %v", werr, gerr)
		case werr != nil && string(got) != "{[":
			t.Fatalf("AppendJSON failed and returned %q", got)
		case werr == nil && !bytes.Equal(got, append([]byte("{["), want...)):
			t.Fatalf("AppendJSON = %s\njson.Marshal = %s", got[2:], want)
		}
	})
}

// TestRequestAppendJSON: Request.AppendJSON writes exactly json.Marshal's bytes for every escape
// class in every member, with and without amount, stay and segments (nil, empty, one, several),
// and appends to what dst held.
func TestRequestAppendJSON(t *testing.T) {
	t.Parallel()
	for i, s := range escapeClasses {
		seg := Segment{From: s, To: s + "x", Date: s, Flight: s}
		for _, r := range []Request{
			{OfferVersion: s, TravellerRef: s},
			{OfferVersion: s, TravellerRef: s, Amount: &Amount{Value: s, Currency: s}, Segments: []Segment{}},
			{OfferVersion: s, Amount: &Amount{Value: s}, Stay: &Stay{PropertyID: s, CheckIn: s, CheckOut: s}},
			{TravellerRef: s, Amount: &Amount{Currency: s}, Segments: []Segment{seg}},
			{OfferVersion: s, Stay: &Stay{}, Segments: []Segment{seg, {}, seg}},
		} {
			want, err := json.Marshal(r)
			if err != nil {
				t.Fatal(err)
			}
			if got := r.AppendJSON([]byte("head")); !bytes.Equal(got, append([]byte("head"), want...)) {
				t.Errorf("class %d: AppendJSON = %s\nwant head%s", i, got, want)
			}
		}
	}
}

// FuzzRequestAppendJSON compares Request.AppendJSON with json.Marshal on arbitrary member values
// and shapes (shape's bits: amount, stay, segments non-nil; n segments).
//
// Invariant: AppendJSON(prefix) is prefix followed by json.Marshal's bytes exactly.
func FuzzRequestAppendJSON(f *testing.F) {
	for i, s := range escapeClasses {
		f.Add(s, escapeClasses[(i+1)%len(escapeClasses)], uint8(i), uint8(i%4))
	}
	f.Fuzz(func(t *testing.T, s1, s2 string, shape, n uint8) {
		r := Request{OfferVersion: s1, TravellerRef: s2}
		if shape&1 != 0 {
			r.Amount = &Amount{Value: s2, Currency: s1}
		}
		if shape&2 != 0 {
			r.Stay = &Stay{PropertyID: s1 + s2, CheckIn: s2, CheckOut: s1}
		}
		if shape&4 != 0 {
			r.Segments = []Segment{}
		}
		for i := range int(n % 5) {
			r.Segments = append(r.Segments, Segment{From: s1, To: s2, Date: s1[:min(i, len(s1))], Flight: s2 + s1})
		}
		want, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		if got := r.AppendJSON([]byte("{[")); !bytes.Equal(got, append([]byte("{["), want...)) {
			t.Fatalf("AppendJSON = %s\njson.Marshal = %s", got[2:], want)
		}
	})
}

// TestOutputIDIsNewSHA1: OutputID is uuid.NewSHA1 over the namespace and its four parts joined by
// NUL, for parts of every escape class and parts long enough that the name leaves OutputID's
// stack buffer.
func TestOutputIDIsNewSHA1(t *testing.T) {
	t.Parallel()
	long := string(bytes.Repeat([]byte("k"), 300))
	for _, p := range append(escapeClasses, long) {
		want := uuid.NewSHA1(outputNamespace, []byte(p+"\x00"+"key\x00attempt.resolved\x00"+p)).String()
		if got := OutputID(p, "key", "attempt.resolved", p); got != want {
			t.Errorf("OutputID(%q) = %s, want %s", p, got, want)
		}
	}
	// One value as main computed it before (uuid.NewSHA1), so the namespace itself is held too.
	if got, want := OutputID("t1", "book:bi_1:v1", "attempt.resolved", "ev_1"), "048504c6-dd12-59f0-b0e2-611945a7933f"; got != want {
		t.Errorf("OutputID = %s, want %s", got, want)
	}
}

// FuzzOutputID: OutputID equals uuid.NewSHA1(outputNamespace, tenant NUL key NUL kind NUL cause)
// for arbitrary parts.
func FuzzOutputID(f *testing.F) {
	f.Add("t1", "book:bi_1:v1", "attempt.resolved", "ev_1")
	f.Add("", "", "", "")
	f.Add("\x00", "\xff", string(bytes.Repeat([]byte("x"), 250)), "\u2028")
	f.Fuzz(func(t *testing.T, tenant, key, kind, cause string) {
		want := uuid.NewSHA1(outputNamespace, []byte(tenant+"\x00"+key+"\x00"+kind+"\x00"+cause)).String()
		if got := OutputID(tenant, key, kind, cause); got != want {
			t.Fatalf("OutputID = %s, want %s", got, want)
		}
	})
}

func resolvedOf(s string, at time.Time, ref, code *string) Resolved {
	return Resolved{
		OutputEnvelope: OutputEnvelope{SpecVersion: SpecVersion, EventID: s, EventType: EventType(s), OccurredAt: at,
			TenantID: s, BookingIntentID: s, IdempotencyKey: s, Operation: Operation(s), OperationVersion: 7, Provider: s},
		Status: s, ResolutionSource: s, ProviderReference: ref, FailureCode: code, ResolvedAt: at,
	}
}
