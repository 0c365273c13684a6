package events

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// refOptions are the options the comparisons decode with: every provider known, and a stale
// bound inside the samples' days, so steps 7 and 9 both run.
var refOptions = []DecodeOptions{
	{},
	{KnownProvider: knownSampleProvider, MinOccurredAt: time.Date(2026, 11, 30, 9, 0, 30, 0, time.UTC)},
}

// loadgenKinds are one record of each kind internal/harness/loadgen writes (json.Marshal of a
// map: members sorted, no whitespace): a start, outcome_unknown, a success, a failure, not sent,
// a blind retry's v2 start and success, a key conflict's second start. TestLoadgenMatchesRef
// compares whole generated runs; these seed the fuzz target.
var loadgenKinds = []string{
	`{"bookingIntentId":"bi_0000000","eventId":"ev_bi_0000000_v1_started_1","eventType":"attempt.started","idempotencyKey":"book:bi_0000000:v1","occurredAt":"2026-11-30T09:00:00.001Z","operation":"BOOK","operationVersion":1,"provider":"sim-hotels","recovery":{"clientReference":"cr_bi_0000000_v1"},"request":{"amount":{"currency":"EUR","value":"120.00"},"offerVersion":"off:1","stay":{"checkIn":"2027-01-10","checkOut":"2027-01-12","propertyId":"h_1"},"travellerRef":"tr_bi_0000000"},"specVersion":1,"tenantId":"t_load"}`,
	`{"bookingIntentId":"bi_0000000","eventId":"ev_bi_0000000_v1_outcome_unknown_2","eventType":"attempt.outcome_unknown","idempotencyKey":"book:bi_0000000:v1","occurredAt":"2026-11-30T09:00:00.002Z","operation":"BOOK","operationVersion":1,"outcome":{"timeoutClass":"read_timeout"},"provider":"sim-hotels","specVersion":1,"tenantId":"t_load"}`,
	`{"bookingIntentId":"bi_0000001","eventId":"ev_bi_0000001_v1_succeeded_4","eventType":"attempt.succeeded","idempotencyKey":"book:bi_0000001:v1","occurredAt":"2026-11-30T09:00:00.004Z","operation":"BOOK","operationVersion":1,"outcome":{"providerReference":"HTL-0000001"},"provider":"sim-hotels","specVersion":1,"tenantId":"t_load"}`,
	`{"bookingIntentId":"bi_0000003","eventId":"ev_bi_0000003_v1_failed_8","eventType":"attempt.failed","idempotencyKey":"book:bi_0000003:v1","occurredAt":"2026-11-30T09:00:00.008Z","operation":"BOOK","operationVersion":1,"outcome":{"failureCode":"NO_AVAILABILITY","retryable":true},"provider":"sim-hotels","specVersion":1,"tenantId":"t_load"}`,
	`{"bookingIntentId":"bi_0000007","eventId":"ev_bi_0000007_v1_outcome_unknown_16","eventType":"attempt.outcome_unknown","idempotencyKey":"book:bi_0000007:v1","occurredAt":"2026-11-30T09:00:00.016Z","operation":"BOOK","operationVersion":1,"outcome":{"requestSent":false,"timeoutClass":"connect_timeout"},"provider":"sim-hotels","specVersion":1,"tenantId":"t_load"}`,
	`{"bookingIntentId":"bi_0000017","eventId":"ev_bi_0000017_v2_started_37","eventType":"attempt.started","idempotencyKey":"book:bi_0000017:v2","occurredAt":"2026-11-30T09:00:00.037Z","operation":"BOOK","operationVersion":2,"provider":"sim-hotels","recovery":{"clientReference":"cr_bi_0000017_v2"},"request":{"amount":{"currency":"EUR","value":"120.00"},"offerVersion":"off:1","stay":{"checkIn":"2027-01-10","checkOut":"2027-01-12","propertyId":"h_1"},"travellerRef":"tr_bi_0000017"},"specVersion":1,"tenantId":"t_load"}`,
	`{"bookingIntentId":"bi_0000017","eventId":"ev_bi_0000017_v2_succeeded_38","eventType":"attempt.succeeded","idempotencyKey":"book:bi_0000017:v2","occurredAt":"2026-11-30T09:00:00.038Z","operation":"BOOK","operationVersion":2,"outcome":{"providerReference":"HTL-0000017-2"},"provider":"sim-hotels","specVersion":1,"tenantId":"t_load"}`,
	`{"bookingIntentId":"bi_0000046","eventId":"ev_bi_0000046_v1_started_103","eventType":"attempt.started","idempotencyKey":"book:bi_0000046:v1","occurredAt":"2026-11-30T09:00:00.103Z","operation":"BOOK","operationVersion":1,"provider":"sim-hotels","recovery":{"clientReference":"cr_bi_0000046_v1"},"request":{"amount":{"currency":"EUR","value":"999.00"},"offerVersion":"off:1","stay":{"checkIn":"2027-01-10","checkOut":"2027-01-12","propertyId":"h_1"},"travellerRef":"tr_bi_0000046"},"specVersion":1,"tenantId":"t_load"}`,
}

// jcsFastCases are texts at the edges of jcsWriter's fast path: integers of 15 and 16 digits,
// -0 and leading zeros, members out of order at every depth, duplicates sorted and not, names
// ordered by bytes below '"', whitespace everywhere, non-ASCII names and values, nesting around
// jcsMaxDepth, bad syntax the fast path must not accept.
var jcsFastCases = []string{
	`{"x":999999999999999}`, `{"x":-999999999999999}`, `{"x":9999999999999999}`, `{"x":-0}`, `{"x":-01}`,
	`{"x":0}`, `{"x":00}`, `{"x":1.0}`, `{"x":1e2}`, `{"x":-}`, `[1,]`, `{"a":1,}`, `{,}`, `[,1]`, `{"a"}`,
	`{"a":}`, `{"a" 1}`, `{"b":{"d":1,"c":[{"z":1,"y":2}]},"a":[{"z":1,"y":{"q":null,"p":true}}]}`,
	`{"a":1,"b":2,"a":3}`, `{"b":1,"a":2,"b":3}`, `{"a":{"x":1,"x":2}}`, `{"a!":1,"a":2,"a ":3,"":4}`,
	" \t\r\n{ \"b\" : [ 1 , 2 ] , \"a\" : { } } \n", `{"é":1,"e":2}`, `{"x":"é€😀\u0000"}`, `{"x":"é€😀"}`,
	"{\"x\":\"\x7f\ufffd\ufffe\"}", "{\"x\":\"a\tb\"}", "{\"x\":\"\xed\xa0\x80\"}", `"top"`, `123`, `true`,
	`nul`, `truex`, `[true false]`, `{"a":[[[]]],"b":[{}]}`, strings.Repeat("[", 63) + strings.Repeat("]", 63),
	strings.Repeat("[", 64) + strings.Repeat("]", 64), strings.Repeat("[", 65) + strings.Repeat("]", 65),
	strings.Repeat(`{"a":`, 70) + "1" + strings.Repeat("}", 70), `{"a":1}}`, `{"a":1`, `[1`, `"x`,
}

// refInputs are the table cases of the comparisons: every sample record of both topics, the
// loadgen kinds, the canonicaliser's and the splitter's edge cases, and the record shapes of
// the decode tests.
func refInputs(tb testing.TB) [][]byte {
	tb.Helper()
	var in [][]byte
	in = append(in, sampleLines(tb, "attempts.jsonl")...)
	in = append(in, sampleLines(tb, "manual-decisions.jsonl")...)
	for _, group := range [][]string{loadgenKinds, canonicalCases, jcsFastCases, splitSeeds, {hotelStarted, flightStarted,
		authStarted, cancelStarted, succeeded, failed, unknown, decision, "", "null", "{}", "\ufeff{}"}} {
		for _, s := range group {
			in = append(in, []byte(s))
		}
	}
	return in
}

// TestDecodeMatchesRef: on every table case the decode path gives exactly what the old one
// (ref_test.go) gives: the same Attempt or Decision, event hash, request hash, fingerprint,
// canonical request for every operation, and error (reason, field and detail).
func TestDecodeMatchesRef(t *testing.T) {
	t.Parallel()

	for _, in := range refInputs(t) {
		sameAsRef(t, in)
	}
}

// FuzzDecodeMatchesRef is TestDecodeMatchesRef on arbitrary input.
//
// Invariants, for every input and both refOptions: DecodeAttemptHashed, Attempt.Digests,
// CanonicalRequest and RequestHash (for each operation and an invalid one) on the decoded
// request, Fingerprint, DecodeDecisionHashed, CanonicalHash and canonicalize all return what
// their ref versions return, deeply equal, errors included; none of them changes its input.
func FuzzDecodeMatchesRef(f *testing.F) {
	for _, in := range refInputs(f) {
		f.Add(in)
	}
	f.Fuzz(sameAsRef)
}

// FuzzCanonicalizeMatchesRef: for any input, canonicalize (the fast path first) returns what
// the ref version (jsontext alone) returns: the same bytes, or an error for both; it never
// changes its input; when the fast path takes the input, its hash is that of the ref bytes and
// the members it split are splitObject's (none when the input is not an object).
func FuzzCanonicalizeMatchesRef(f *testing.F) {
	for _, in := range refInputs(f) {
		f.Add(in)
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		orig := bytes.Clone(raw)
		c, err := canonicalize(raw)
		rc, rerr := refCanonicalize(raw)
		if !bytes.Equal(c, rc) || (err == nil) != (rerr == nil) || !bytes.Equal(raw, orig) {
			t.Fatalf("%q: canonicalize = %q, %v; ref %q, %v", orig, c, err, rc, rerr)
		}
		if h, err := canonicalHash(raw); err == nil && h != refSha256Hex(rc) {
			t.Fatalf("%q: canonicalHash = %s, want %s", orig, h, refSha256Hex(rc))
		}
		s := getScratch()
		defer s.release()
		if h, o, ok := s.hashFast(raw); ok {
			so, sok := splitObject(raw)
			if h != refSha256Hex(rc) || (o != nil) != sok || !reflect.DeepEqual(o, so) {
				t.Fatalf("%q: hashFast = %s, %q; want %s, splitObject %q, %v", orig, h, o, refSha256Hex(rc), so, sok)
			}
		}
	})
}

func sameAsRef(t *testing.T, raw []byte) {
	t.Helper()
	orig := bytes.Clone(raw)
	for _, opt := range refOptions {
		a, h, err := DecodeAttemptHashed(raw, opt)
		ra, rh, rerr := refDecodeAttemptHashed(raw, opt)
		if !reflect.DeepEqual(a, ra) || h != rh || !reflect.DeepEqual(err, rerr) {
			t.Fatalf("%q: DecodeAttemptHashed = %q, %v; ref %q, %v; attempt (-ref +new):\n%s",
				orig, h, err, rh, rerr, cmp.Diff(ra, a))
		}
		if err == nil {
			d, derr := a.Digests()
			rd, rderr := refDigests(ra)
			if d != rd || !reflect.DeepEqual(derr, rderr) {
				t.Fatalf("%q: Digests = %+v, %v; ref %+v, %v", orig, d, derr, rd, rderr)
			}
			sameRequestAsRef(t, a.Request)
		}

		dd, dh, derr := DecodeDecisionHashed(raw, opt)
		rdd, rdh, rderr := refDecodeDecisionHashed(raw, opt)
		if !reflect.DeepEqual(dd, rdd) || dh != rdh || !reflect.DeepEqual(derr, rderr) {
			t.Fatalf("%q: DecodeDecisionHashed = %q, %v; ref %q, %v; decision (-ref +new):\n%s",
				orig, dh, derr, rdh, rderr, cmp.Diff(rdd, dd))
		}
	}

	ch, cerr := CanonicalHash(raw)
	rch, rcerr := refCanonicalHash(raw)
	if ch != rch || !reflect.DeepEqual(cerr, rcerr) {
		t.Fatalf("%q: CanonicalHash = %q, %v; ref %q, %v", orig, ch, cerr, rch, rcerr)
	}
	c, cerr := canonicalize(raw)
	rc, rcerr := refCanonicalize(raw)
	if !bytes.Equal(c, rc) || (cerr == nil) != (rcerr == nil) {
		t.Fatalf("%q: canonicalize = %q, %v; ref %q, %v", orig, c, cerr, rc, rcerr)
	}
	if !bytes.Equal(raw, orig) {
		t.Fatalf("input changed: %q, was %q", raw, orig)
	}
}

// sameRequestAsRef compares the request digests for every operation, and an invalid one.
func sameRequestAsRef(t *testing.T, r *Request) {
	t.Helper()
	for _, op := range append(Operations(), "", "book") {
		c, err := CanonicalRequest(op, r)
		rc, rerr := refCanonicalRequest(op, r)
		if !bytes.Equal(c, rc) || !reflect.DeepEqual(err, rerr) {
			t.Fatalf("CanonicalRequest(%s, %+v) = %q, %v; ref %q, %v", op, r, c, err, rc, rerr)
		}
		h, err := RequestHash(op, r)
		rh, rerr := refRequestHash(op, r)
		if h != rh || !reflect.DeepEqual(err, rerr) {
			t.Fatalf("RequestHash(%s, %+v) = %q, %v; ref %q, %v", op, r, h, err, rh, rerr)
		}
		if fp, rfp := Fingerprint(op, r), refFingerprint(op, r); fp != rfp {
			t.Fatalf("Fingerprint(%s, %+v) = %q; ref %q", op, r, fp, rfp)
		}
	}
}

// refDigests is Attempt.Digests as it was.
func refDigests(a Attempt) (Digests, error) {
	if a.Request == nil {
		return Digests{}, nil
	}
	h, err := refRequestHash(a.Operation, a.Request)
	if err != nil || h == "" {
		return Digests{}, err
	}
	return Digests{RequestHash: h, Fingerprint: refFingerprint(a.Operation, a.Request)}, nil
}

// minorUnitsCases are amount values at the edges of plainMinorUnits: zeros and negative zeros,
// trailing fraction zeros, 18 and 19 digits, MaxMinorUnits and one above, exponents.
var minorUnitsCases = []string{
	"0", "-0", "0.000", "-0.00", "-0.50", "-1", "249.9", "249.90", "249.900", "1000.5", "1.2340", "1.23450",
	"123456789012345678", "1234567890123456789", "12345678901234567.8", "90071992547409.91",
	"90071992547409.92", "9007199254740991", "9007199254740992", "900719925474099.1", "999999999999999999",
	"0.0000000000000000001", "1e2", "1E-2", "2.499e2", "-1e2", "1e400", "01", "1.", "", "abc",
}

// TestMinorUnitsMatchesRef: MinorUnits equals the old one on minorUnitsCases in currencies of
// exponent 0, 2, 3 and 4 and a code outside the table.
func TestMinorUnitsMatchesRef(t *testing.T) {
	t.Parallel()

	for _, value := range minorUnitsCases {
		for _, currency := range []string{"JPY", "EUR", "KWD", "CLF", "eur", "XXX"} {
			n, err := MinorUnits(value, currency)
			rn, rerr := refMinorUnits(value, currency)
			if n != rn || !reflect.DeepEqual(err, rerr) {
				t.Errorf("MinorUnits(%q, %q) = %d, %v; ref %d, %v", value, currency, n, err, rn, rerr)
			}
		}
	}
}

// FuzzRequestDigestsMatchRef drives MinorUnits, CanonicalRequest, RequestHash and Fingerprint
// with arbitrary member text (invalid UTF-8, control characters and quotes included, which a
// decoded record never holds but a caller may pass), shape choosing which of amount, stay and
// segments are set.
//
// Invariants: each returns what its ref version returns, for every operation and an invalid
// one: the same bytes, hash or fingerprint, and deeply equal errors.
func FuzzRequestDigestsMatchRef(f *testing.F) {
	f.Add("off_1:1", "tr_0001", "249.90", "EUR", "h_1042", "2027-02-03", "2027-02-06", "ist", "LHR", "XQ101", uint8(1))
	f.Add("", "", "2.499e2", "JPY", "", "", "", "a\u2028b", "\x00\"\\", "\xff\xfe", uint8(6))
	f.Add("<&>", "é\u00e9\U0001F600", "-0", "KWD", "\x7f", "\u2029", "\ufffd", "ıi", "ß", "\ud7ff", uint8(7))
	for _, v := range minorUnitsCases {
		f.Add("o", "t", v, "CLF", "p", "2027-01-01", "2027-01-02", "AMS", "LHR", "KL1", uint8(1))
	}
	f.Fuzz(func(t *testing.T, offer, traveller, value, currency, property, checkIn, checkOut, from, to, flight string, shape uint8) {
		n, err := MinorUnits(value, currency)
		rn, rerr := refMinorUnits(value, currency)
		if n != rn || !reflect.DeepEqual(err, rerr) {
			t.Fatalf("MinorUnits(%q, %q) = %d, %v; ref %d, %v", value, currency, n, err, rn, rerr)
		}
		r := &Request{OfferVersion: offer, TravellerRef: traveller}
		if shape&1 != 0 {
			r.Amount = &Amount{Value: value, Currency: currency}
		}
		if shape&2 != 0 {
			r.Stay = &Stay{PropertyID: property, CheckIn: checkIn, CheckOut: checkOut}
		}
		if shape&4 != 0 {
			for range 1 + int(shape>>3)%3 {
				r.Segments = append(r.Segments, Segment{From: from, To: to, Date: checkIn, Flight: flight})
			}
		}
		sameRequestAsRef(t, r)
		sameRequestAsRef(t, nil)
	})
}

// FuzzMatchersMatchRegexps: the hand-written format checks accept exactly what the regular
// expressions they replace (ref_test.go) accept, for any string, invalid UTF-8 included.
func FuzzMatchersMatchRegexps(f *testing.F) {
	for _, s := range []string{"", "a", "bi_sc01", strings.Repeat("a", 64), strings.Repeat("a", 65), "a b", "é",
		"v1", "v0", "v01", "v2147483647", "v12345678901", "v", "V1", "IST", "ist", "IS1", "ISTA", "XQ101",
		"XQ1", "XQ12345", "1A2345B", "XQ101BB", "XQ", "X-101", "0", "-0", "249.90", "2.499e2", "1E+2", "1e",
		"1.", ".5", "01", "-", "1.5e-3", "1\n", "\xff", "a\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, c := range []struct {
			name string
			got  bool
			ref  bool
		}{
			{"isID", isID(s), refIdPattern.MatchString(s)},
			{"isKeyVersion", isKeyVersion(s), refKeyVersionPattern.MatchString(s)},
			{"isIATAAirport", isIATAAirport(s), refIataAirportPattern.MatchString(s)},
			{"isFlight", isFlight(s), refFlightPattern.MatchString(s)},
			{"isDecimal", isDecimal(s), refDecimalPattern.MatchString(s)},
		} {
			if c.got != c.ref {
				t.Errorf("%s(%q) = %v, the regexp says %v", c.name, s, c.got, c.ref)
			}
		}
	})
}

// TestDecodeResultsOwnTheirMemory: a decoded Attempt or Decision points neither into the record
// it came from nor into the pooled scratch (cleared and reused by the next decode): every sample
// is decoded from a copy, the copy is overwritten and every sample decoded again, in parallel,
// and the first results still equal the old path's.
func TestDecodeResultsOwnTheirMemory(t *testing.T) {
	t.Parallel()

	lines := refInputs(t)
	type result struct {
		a Attempt
		d Decision
	}
	kept := make([]result, len(lines))
	for i, line := range lines {
		in := bytes.Clone(line)
		kept[i].a, _, _ = DecodeAttemptHashed(in, refOptions[1])
		kept[i].d, _, _ = DecodeDecisionHashed(in, refOptions[1])
		for j := range in {
			in[j] = 'x'
		}
	}
	done := make(chan struct{})
	for range 2 {
		go func() {
			defer func() { done <- struct{}{} }()
			for _, line := range lines {
				_, _, _ = DecodeAttemptHashed(line, refOptions[1])
				_, _, _ = DecodeDecisionHashed(line, refOptions[1])
			}
		}()
	}
	<-done
	<-done
	for i, line := range lines {
		ra, _, _ := refDecodeAttemptHashed(line, refOptions[1])
		rd, _, _ := refDecodeDecisionHashed(line, refOptions[1])
		if !reflect.DeepEqual(kept[i].a, ra) || !reflect.DeepEqual(kept[i].d, rd) {
			t.Fatalf("%q: kept results changed (-ref +kept):\n%s%s", line, cmp.Diff(ra, kept[i].a), cmp.Diff(rd, kept[i].d))
		}
	}
}
