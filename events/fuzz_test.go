package events

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// FuzzDecodeAttempt feeds arbitrary record values to DecodeAttempt, seeded with every line of
// samples/attempts.jsonl and a few hostile shapes.
//
// Invariants:
//   - it never panics;
//   - it is deterministic: the same bytes give an equal Attempt and an equal error;
//   - on error the Attempt is the zero value and the error an *InvalidError whose Reason is one
//     of Reasons() and whose Detail starts with its Field;
//   - an accepted record has a CanonicalHash, its KeySubject is set, and an accepted
//     attempt.started has a RequestHash (and a Fingerprint for BOOK and MODIFY);
//   - decode → json.Marshal → decode gives an equal Attempt and the same request hash (when the
//     re-encoding fits MaxRecordBytes).
func FuzzDecodeAttempt(f *testing.F) {
	for _, line := range sampleLines(f, "attempts.jsonl") {
		f.Add(line)
	}
	for _, s := range []string{"", "null", "[]", "{}", `{"specVersion":1}`, `{"a":1,"a":2}`,
		"\ufeff{}", `{"specVersion":1,"eventType":"attempt.started"}`, decision} {
		f.Add([]byte(s))
	}
	opt := DecodeOptions{KnownProvider: knownSampleProvider}

	f.Fuzz(func(t *testing.T, raw []byte) {
		a, err := DecodeAttempt(raw, opt)
		a2, err2 := DecodeAttempt(raw, opt)
		if !cmp.Equal(a, a2) || !reflect.DeepEqual(err, err2) {
			t.Fatalf("not deterministic: %v / %v", err, err2)
		}
		if err != nil {
			ie, ok := AsInvalid(err)
			if !ok || !validReason(ie.Reason) || !strings.HasPrefix(ie.Detail, ie.Field) {
				t.Fatalf("bad error %#v", err)
			}
			if !cmp.Equal(a, Attempt{}) {
				t.Fatalf("Attempt %+v on error", a)
			}
			return
		}
		if _, err := CanonicalHash(raw); err != nil {
			t.Fatalf("accepted record has no canonical hash: %v", err)
		}
		if a.KeySubject == "" {
			t.Fatal("accepted record without KeySubject")
		}
		h, err := a.Hash()
		if err != nil || (a.EventType == EventStarted) != (h != "") {
			t.Fatalf("Hash() = %q, %v for %s", h, err, a.EventType)
		}
		if a.EventType == EventStarted && a.Operation.HasFingerprint() && Fingerprint(a.Operation, a.Request) == "" {
			t.Fatal("started BOOK/MODIFY without fingerprint")
		}

		b, err := json.Marshal(a)
		if err != nil {
			t.Fatalf("marshal: %v", err)
		}
		if len(b) > MaxRecordBytes {
			return
		}
		back, err := DecodeAttempt(b, opt)
		if err != nil {
			t.Fatalf("re-decode of %s: %v", b, err)
		}
		if diff := cmp.Diff(a, back); diff != "" {
			t.Fatalf("round trip (-first +second):\n%s", diff)
		}
		if h2, _ := back.Hash(); h2 != h {
			t.Fatalf("round trip changed the hash")
		}
	})
}

// FuzzRequestHash drives MinorUnits and RequestHash with arbitrary amount text and currency.
//
// Invariants:
//   - neither panics;
//   - a converted amount is in [0, MaxMinorUnits];
//   - appending trailing zeros to the fraction of value (before any exponent) never changes
//     the outcome: the same minor units and request hash, or the same error;
//   - when value is a JSON number, sending it as a JSON number or as a string decodes to the
//     same verdict and, when accepted, the same request hash (unless the record fails as a
//     whole: too_large, or invalid_json for a number beyond float64, which I-JSON forbids).
func FuzzRequestHash(f *testing.F) {
	for _, s := range []struct {
		value    string
		zeros    uint8
		currency string
	}{
		{"249.9", 1, "EUR"}, {"249.90", 2, "EUR"}, {"24990", 3, "TRY"}, {"1.234", 1, "KWD"},
		{"1000.5", 1, "JPY"}, {"1000", 4, "JPY"}, {"2.499e2", 2, "EUR"}, {"0", 0, "EUR"},
		{"-1", 1, "EUR"}, {"1e400", 1, "EUR"}, {"abc", 1, "eur"}, {"9007199254740991", 3, "JPY"},
	} {
		f.Add(s.value, s.zeros, s.currency)
	}

	f.Fuzz(func(t *testing.T, value string, zeros uint8, currency string) {
		n, err := MinorUnits(value, currency)
		if err == nil && (n < 0 || n > MaxMinorUnits) {
			t.Fatalf("MinorUnits = %d out of range", n)
		}
		h, herr := RequestHash(OpPaymentCapture, &Request{Amount: &Amount{Value: value, Currency: currency}})
		if (err == nil) != (herr == nil) {
			t.Fatalf("MinorUnits error %v, RequestHash error %v", err, herr)
		}

		if !isDecimal(value) {
			return // padding keeps the value of a decimal only
		}
		mantissa, exp, hasExp := strings.Cut(strings.ToLower(value), "e")
		if !strings.Contains(mantissa, ".") {
			mantissa += "."
		}
		padded := mantissa + strings.Repeat("0", int(zeros%64)+1)
		if hasExp {
			padded += "e" + exp
		}
		n2, err2 := MinorUnits(padded, currency)
		h2, _ := RequestHash(OpPaymentCapture, &Request{Amount: &Amount{Value: padded, Currency: currency}})
		if n != n2 || h != h2 || !reflect.DeepEqual(err, err2) {
			t.Fatalf("%q → %d %v, %q → %d %v", value, n, err, padded, n2, err2)
		}

		currencyJSON, _ := json.Marshal(currency)
		asString, _ := json.Marshal(value)
		hashOf := func(v string) (string, error) {
			raw := strings.Replace(authStarted, `{"value":"24990","currency":"TRY"}`,
				`{"value":`+v+`,"currency":`+string(currencyJSON)+`}`, 1)
			a, err := DecodeAttempt([]byte(raw), DecodeOptions{})
			if err != nil {
				return "", err
			}
			return a.Hash()
		}
		hs, errS := hashOf(string(asString))
		hn, errN := hashOf(value)
		if recordLevel(errS) || recordLevel(errN) {
			return // a number beyond float64 is not I-JSON; a long one may not fit the record
		}
		if hs != hn || !reflect.DeepEqual(errS, errN) {
			t.Fatalf("string %q → %s %v; number → %s %v", value, hs, errS, hn, errN)
		}
	})
}

func recordLevel(err error) bool {
	ie, ok := AsInvalid(err)
	return ok && (ie.Reason == ReasonTooLarge || ie.Reason == ReasonInvalidJSON)
}

func validReason(r Reason) bool {
	for _, known := range Reasons() {
		if r == known {
			return true
		}
	}
	return false
}
