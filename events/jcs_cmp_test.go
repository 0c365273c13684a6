package events

import (
	"bytes"
	"testing"

	"github.com/gowebpki/jcs"
)

// canonicalCases are texts where RFC 8785 implementations are known to part ways: number
// formatting at the edges of the double range and of the exponent switch, escapes, key order
// by UTF-16 code units, and what I-JSON rejects.
var canonicalCases = []string{
	`{"b":1,"a":2}`, `{"x":1e400}`, `{"x":-1e400}`, `{"x":1e-400}`, `{"x":1.7976931348623157e308}`,
	`{"x":5e-324}`, `{"x":-0}`, `{"x":1E+2}`, `{"x":0.000001}`, `{"x":0.0000001}`, `{"x":1e21}`,
	`{"x":1e20}`, `{"x":9007199254740993}`, `{"x":249.90}`, `{"x":"\u00e9\u2028\ud83d\ude00\/\u0007"}`,
	`{"x":"\ud800"}`, `{"a":1,"a":2}`, `{"\u0061":1,"a":2}`, `{"€":1,"\ud83d\ude00":2,"z":3}`,
	`[1,2]`, ` {"a":[true,false,null]} `, `{"a":1} x`, `{"a":01}`, `{"a":.5}`, `{"a":+1}`, `{"a":1.}`,
	"{\"a\":\"\xff\"}", `{"e":"1e+308"}`,
}

// TestCanonicalizeMatchesJCS cross-checks the canonicaliser (jsontext) against gowebpki/jcs on
// every sample record and on canonicalCases: the same bytes, or both refuse.
func TestCanonicalizeMatchesJCS(t *testing.T) {
	inputs := sampleLines(t, "attempts.jsonl")
	for _, c := range canonicalCases {
		inputs = append(inputs, []byte(c))
	}
	for _, in := range inputs {
		sameAsJCS(t, in)
	}
}

// FuzzCanonicalizeMatchesJCS: for any input, canonicalize and gowebpki/jcs agree.
func FuzzCanonicalizeMatchesJCS(f *testing.F) {
	for _, line := range sampleLines(f, "attempts.jsonl") {
		f.Add(line)
	}
	for _, c := range canonicalCases {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, in []byte) { sameAsJCS(t, in) })
}

func sameAsJCS(t *testing.T, in []byte) {
	t.Helper()
	orig := bytes.Clone(in)
	got, err := canonicalize(in)
	want, jerr := jcs.Transform(orig)
	if !bytes.Equal(in, orig) {
		t.Fatalf("canonicalize changed its input %q", orig)
	}
	if (err == nil) != (jerr == nil) || err == nil && !bytes.Equal(got, want) {
		t.Errorf("%q: canonicalize = %q, %v; jcs = %q, %v", orig, got, err, want, jerr)
	}
}
