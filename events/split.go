package events

import (
	"bytes"
	"encoding/json"
)

// splitObject returns the members of raw when it is a JSON object, in their order: each name
// unquoted, each value its raw bytes (both sharing raw's memory, the name unless it has an
// escape). raw must be valid JSON without duplicate member names at any depth — a record
// parseRecord's canonicalisation accepted, or a value inside one — and for such input the
// members are what json.Unmarshal into map[string]json.RawMessage returns, in one pass without
// reflection (docs/performance.md "Where the end-to-end time goes"). The second result is false
// when raw is not an object.
func splitObject(raw []byte) (object, bool) {
	var members []member
	return splitObjectInto(&members, raw)
}

// splitObjectInto is splitObject with the members appended to *members, the object being the
// capped sub-slice they fill (so later appends never reach into it): one allocation for all the
// objects of a record, in the pooled scratch.
func splitObjectInto(members *[]member, raw []byte) (object, bool) {
	start := len(*members)
	ms, ok := appendMembers(*members, raw)
	if !ok {
		clear(ms[start:])
		*members = ms[:start]
		return nil, false
	}
	*members = ms
	if len(ms) == start {
		return object{}, true
	}
	return object(ms[start:len(ms):len(ms)]), true
}

// appendMembers appends the members of the object raw to ms; ok is false when raw is not an
// object.
func appendMembers(ms []member, raw []byte) (_ []member, ok bool) {
	i := skipSpace(raw, 0)
	if i >= len(raw) || raw[i] != '{' {
		return ms, false
	}
	i = skipSpace(raw, i+1)
	if i < len(raw) && raw[i] == '}' {
		return ms, true
	}
	for i < len(raw) && raw[i] == '"' {
		end := valueEnd(raw, i)
		name, ok := unquoteBytes(raw[i:end])
		if !ok {
			return ms, false
		}
		i = skipSpace(raw, end)
		if i >= len(raw) || raw[i] != ':' {
			return ms, false
		}
		i = skipSpace(raw, i+1)
		end = valueEnd(raw, i)
		if end <= i {
			return ms, false
		}
		ms = append(ms, member{name: name, raw: json.RawMessage(raw[i:end:end])})
		i = skipSpace(raw, end)
		if i >= len(raw) {
			return ms, false
		}
		switch raw[i] {
		case '}':
			return ms, true
		case ',':
			i = skipSpace(raw, i+1)
		default:
			return ms, false
		}
	}
	return ms, false
}

// splitArray returns the elements of raw when it is a JSON array, each its raw bytes: what
// json.Unmarshal into []json.RawMessage returns, for input as splitObject takes. ok is false when
// raw is not an array.
func splitArray(raw []byte) (elems []json.RawMessage, ok bool) {
	i := skipSpace(raw, 0)
	if i >= len(raw) || raw[i] != '[' {
		return nil, false
	}
	elems = []json.RawMessage{}
	i = skipSpace(raw, i+1)
	if i < len(raw) && raw[i] == ']' {
		return elems, true
	}
	for i < len(raw) {
		end := valueEnd(raw, i)
		if end <= i {
			return nil, false
		}
		elems = append(elems, json.RawMessage(raw[i:end:end]))
		i = skipSpace(raw, end)
		if i >= len(raw) {
			return nil, false
		}
		switch raw[i] {
		case ']':
			return elems, true
		case ',':
			i = skipSpace(raw, i+1)
		default:
			return nil, false
		}
	}
	return nil, false
}

// unquoteBytes is the value of the JSON string q (quotes included): its bytes between the quotes
// (sharing q's memory) when it has no escape, else encoding/json's reading of it.
func unquoteBytes(q []byte) ([]byte, bool) {
	if len(q) < 2 || q[0] != '"' || q[len(q)-1] != '"' {
		return nil, false
	}
	if bytes.IndexByte(q, '\\') < 0 {
		return q[1 : len(q)-1 : len(q)-1], true
	}
	var s string
	if json.Unmarshal(q, &s) != nil {
		return nil, false
	}
	return []byte(s), true
}

func skipSpace(raw []byte, i int) int {
	for i < len(raw) {
		switch raw[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// valueEnd is the index just past the JSON value that starts at raw[i] (i itself when there is
// none), for valid JSON: a string to its closing quote, an object or array to its closing
// bracket, a number or literal to the next delimiter.
func valueEnd(raw []byte, i int) int {
	if i >= len(raw) {
		return i
	}
	switch raw[i] {
	case '"':
		return stringEnd(raw, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(raw); j++ {
			switch raw[j] {
			case '"':
				j = stringEnd(raw, j) - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return j + 1
				}
			}
		}
		return len(raw)
	case ',', ':', '}', ']':
		return i
	}
	j := i
	for j < len(raw) {
		switch raw[j] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return j
		}
		j++
	}
	return j
}

// stringEnd is the index just past the string that starts at raw[i] (a quote).
func stringEnd(raw []byte, i int) int {
	for j := i + 1; j < len(raw); j++ {
		switch raw[j] {
		case '\\':
			j++
		case '"':
			return j + 1
		}
	}
	return len(raw)
}
