package events

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestSplitMatchesUnmarshal: on values the canonicaliser accepts, splitObject and splitArray
// give exactly what json.Unmarshal into map[string]json.RawMessage and []json.RawMessage gives
// (parseRecord and the validator used it before), and refuse what it refuses.
func TestSplitMatchesUnmarshal(t *testing.T) {
	for _, s := range splitSeeds {
		checkSplit(t, []byte(s))
	}
	for _, line := range sampleLines(t, "attempts.jsonl") {
		checkSplit(t, line)
	}
}

// FuzzSplitMatchesUnmarshal is TestSplitMatchesUnmarshal on arbitrary input.
//
// Invariants: for every input canonicalize accepts (valid I-JSON without duplicate names),
// splitObject agrees with json.Unmarshal into map[string]json.RawMessage — same ok (an object,
// not null), same names, same raw values — and so does splitArray with []json.RawMessage; every
// object member and array element is split the same way too (the validator splits nested
// values); neither panics.
func FuzzSplitMatchesUnmarshal(f *testing.F) {
	for _, s := range splitSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if _, err := canonicalize(raw); err != nil {
			return
		}
		checkSplit(t, raw)
	})
}

var splitSeeds = []string{
	`{}`, ` { } `, `[]`, ` [ ] `, `null`, `"x"`, `1`, `true`, `{"a":1}`, "\n{\t\"a\" :\r 1 , \"b\":[1, {\"c\":\"}\"}] }\n",
	`{"a\"b":"x\\\"y","\u0041":null,"e":"\u00e9","n":-1.5e3,"t":true,"f":false,"o":{"p":{"q":[[],{}]}}}`,
	`[1,"a",{"b":[2]},[],null]`, `{"segments":[{"from":"AMS","to":"LHR"}, {"from":"LHR","to":"JFK"}]}`,
}

func checkSplit(t *testing.T, raw []byte) {
	t.Helper()
	var want map[string]json.RawMessage
	werr := json.Unmarshal(raw, &want)
	got, ok := splitObject(raw)
	if ok != (werr == nil && want != nil) || (ok && (len(got) != len(want) || !cmp.Equal(got.asMap(), want))) {
		t.Fatalf("splitObject(%q) = %q, %v; json.Unmarshal: %q, %v", raw, got, ok, want, werr)
	}
	var wantArr []json.RawMessage
	aerr := json.Unmarshal(raw, &wantArr)
	arr, aok := splitArray(raw)
	if aok != (aerr == nil && wantArr != nil) || (aok && !cmp.Equal(arr, wantArr)) {
		t.Fatalf("splitArray(%q) = %q, %v; json.Unmarshal: %q, %v", raw, arr, aok, wantArr, aerr)
	}
	for _, m := range got {
		checkSplit(t, m.raw)
	}
	for _, v := range arr {
		checkSplit(t, v)
	}
}

// asMap is o as a map of its names to their raw values (nil stays nil); with len(o) it says
// whether o equals what json.Unmarshal into map[string]json.RawMessage gives.
func (o object) asMap() map[string]json.RawMessage {
	if o == nil {
		return nil
	}
	m := make(map[string]json.RawMessage, len(o))
	for _, mem := range o {
		m[string(mem.name)] = mem.raw
	}
	return m
}
