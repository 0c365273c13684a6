package events

import (
	"bytes"
	"sync"
	"unicode/utf8"
)

// jcsMaxDepth is the deepest nesting the fast canonicaliser takes; deeper text goes to jsontext.
const jcsMaxDepth = 64

// jcsWriter writes the RFC 8785 canonical form of the JSON texts records are made of, in one
// pass and without a token stream: objects with ASCII member names, strings without escapes,
// integers of at most 15 digits (exact as doubles, so written as they are), literals. Any other
// text — escapes, fractions, exponents, -0, long integers, non-ASCII names, deep nesting — and
// any text that is not valid JSON or has a duplicate name makes it report false, and
// canonicalize hands the text to jsontext, whose verdict (error or bytes) is then the answer.
// So when it reports true its output is exactly what jsontext writes (FuzzCanonicalizeMatchesRef).
type jcsWriter struct {
	in  []byte
	i   int
	out []byte
	// members are the members of the objects being written, innermost last.
	members []jcsMember
	// tmp holds an object's members while they are written back in order.
	tmp []byte
	// buf is the output buffer hashFast reuses.
	buf []byte
	// top are the members of the text when it is an object (topObject), as splitObject
	// returns them: names and values share in.
	top       []member
	topObject bool
}

// jcsMember is one member written to out: out[start:end] is `"name":value`, out[start+1:nameEnd]
// the name.
type jcsMember struct{ start, nameEnd, end int }

// scratch is the pooled working memory of one decode or hash: the fast canonicaliser's buffers
// and the members of the record's objects. Nothing a decode returns points into it (decoded
// strings are copies), so it is cleared and reused once the decode is done.
type scratch struct {
	jcs jcsWriter
	// members hold the objects split so far, each a capped sub-slice (splitObjectInto).
	members []member
}

var scratches = sync.Pool{New: func() any { return new(scratch) }}

func getScratch() *scratch { return scratches.Get().(*scratch) }

// release clears s (it must not keep records alive) and returns it to the pool.
func (s *scratch) release() {
	clear(s.jcs.top)
	clear(s.members[:cap(s.members)])
	s.jcs.top, s.members = s.jcs.top[:0], s.members[:0]
	if cap(s.jcs.buf) > MaxRecordBytes {
		s.jcs.buf = nil
	}
	scratches.Put(s)
}

// canonicalFast appends the canonical form of raw to out when the fast path takes raw; ok is
// false otherwise (raw may still be valid: ask jsontext).
func canonicalFast(out, raw []byte) (_ []byte, ok bool) {
	s := getScratch()
	out, ok = s.jcs.write(out, raw)
	s.release()
	return out, ok
}

// hashFast is sha256Hex(canonicalFast(raw)), written in s's buffer, and, when raw is an
// object, its members as splitObject returns them, from the same pass (o nil when raw is not an
// object). o lives in s.
func (s *scratch) hashFast(raw []byte) (hash string, o object, ok bool) {
	out, ok := s.jcs.write(s.jcs.buf[:0], raw)
	s.jcs.buf = out[:0]
	if !ok {
		return "", nil, false
	}
	if s.jcs.topObject {
		o = object(s.jcs.top[:len(s.jcs.top):len(s.jcs.top)])
		if o == nil {
			o = object{}
		}
	}
	return sha256Hex(out), o, true
}

func (w *jcsWriter) write(out, raw []byte) ([]byte, bool) {
	w.in, w.i, w.out = raw, 0, out
	w.top, w.topObject = w.top[:0], false
	ok := w.value(0)
	if ok {
		w.skipSpace()
		ok = w.i == len(w.in)
	}
	out = w.out
	w.in, w.out, w.members = nil, nil, w.members[:0]
	return out, ok
}

func (w *jcsWriter) skipSpace() {
	for w.i < len(w.in) {
		switch w.in[w.i] {
		case ' ', '\t', '\n', '\r':
			w.i++
		default:
			return
		}
	}
}

func (w *jcsWriter) value(depth int) bool {
	w.skipSpace()
	if w.i >= len(w.in) {
		return false
	}
	switch c := w.in[w.i]; {
	case c == '{':
		w.topObject = w.topObject || depth == 0
		return depth < jcsMaxDepth && w.object(depth+1)
	case c == '[':
		return depth < jcsMaxDepth && w.array(depth+1)
	case c == '"':
		return w.str()
	case c == 't':
		return w.literal("true")
	case c == 'f':
		return w.literal("false")
	case c == 'n':
		return w.literal("null")
	case c == '-' || c >= '0' && c <= '9':
		return w.integer()
	}
	return false
}

func (w *jcsWriter) literal(lit string) bool {
	if !bytes.HasPrefix(w.in[w.i:], []byte(lit)) {
		return false
	}
	w.out = append(w.out, lit...)
	w.i += len(lit)
	return true
}

// integer takes -?(0|[1-9][0-9]*) of 1 to 15 digits, not -0, not followed by a fraction or an
// exponent: a double holds it exactly and RFC 8785 writes it as it is.
func (w *jcsWriter) integer() bool {
	j := w.i
	if w.in[j] == '-' {
		j++
	}
	digits := j
	for j < len(w.in) && w.in[j] >= '0' && w.in[j] <= '9' {
		j++
	}
	n := j - digits
	switch {
	case n == 0 || n > 15 || (w.in[digits] == '0' && (n > 1 || digits > w.i)):
		return false
	case j < len(w.in) && (w.in[j] == '.' || w.in[j] == 'e' || w.in[j] == 'E'):
		return false
	}
	w.out = append(w.out, w.in[w.i:j]...)
	w.i = j
	return true
}

// jcsPlain marks the bytes a string is written with as they are, without a second look: ASCII
// but for control characters, '"' and '\\'.
var jcsPlain = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// str takes a string of valid UTF-8 without escapes or control characters: RFC 8785 writes it
// as it is.
func (w *jcsWriter) str() bool {
	for j := w.i + 1; j < len(w.in); {
		for j < len(w.in) && jcsPlain[w.in[j]] {
			j++
		}
		if j == len(w.in) {
			break
		}
		switch c := w.in[j]; {
		case c == '"':
			w.out = append(w.out, w.in[w.i:j+1]...)
			w.i = j + 1
			return true
		case c < utf8.RuneSelf: // '\\' or a control character
			return false
		default:
			r, size := utf8.DecodeRune(w.in[j:])
			if r == utf8.RuneError && size == 1 {
				return false
			}
			j += size
		}
	}
	return false
}

func (w *jcsWriter) array(depth int) bool {
	w.i++
	w.out = append(w.out, '[')
	w.skipSpace()
	if w.i < len(w.in) && w.in[w.i] == ']' {
		w.i++
		w.out = append(w.out, ']')
		return true
	}
	for {
		if !w.value(depth) {
			return false
		}
		w.skipSpace()
		if w.i >= len(w.in) {
			return false
		}
		switch w.in[w.i] {
		case ',':
			w.i++
			w.out = append(w.out, ',')
		case ']':
			w.i++
			w.out = append(w.out, ']')
			return true
		default:
			return false
		}
	}
}

func (w *jcsWriter) object(depth int) bool {
	w.i++
	open := len(w.out)
	w.out = append(w.out, '{')
	w.skipSpace()
	if w.i < len(w.in) && w.in[w.i] == '}' {
		w.i++
		w.out = append(w.out, '}')
		return true
	}
	base := len(w.members)
	for {
		w.skipSpace()
		if w.i >= len(w.in) || w.in[w.i] != '"' {
			return false
		}
		start, nameIn := len(w.out), w.i+1
		if !w.str() {
			return false
		}
		nameEnd, nameInEnd := len(w.out)-1, w.i-1
		for _, c := range w.out[start+1 : nameEnd] {
			if c >= utf8.RuneSelf { // UTF-16 order may differ from byte order
				return false
			}
		}
		w.skipSpace()
		if w.i >= len(w.in) || w.in[w.i] != ':' {
			return false
		}
		w.i++
		w.out = append(w.out, ':')
		w.skipSpace()
		value := w.i
		if !w.value(depth) {
			return false
		}
		if depth == 1 {
			w.top = append(w.top, member{name: w.in[nameIn:nameInEnd:nameInEnd], raw: w.in[value:w.i:w.i]})
		}
		w.members = append(w.members, jcsMember{start, nameEnd, len(w.out)})
		w.skipSpace()
		if w.i >= len(w.in) {
			return false
		}
		if w.in[w.i] == '}' {
			w.i++
			break
		}
		if w.in[w.i] != ',' {
			return false
		}
		w.i++
		w.out = append(w.out, ',')
	}
	ok := w.order(open, w.members[base:])
	w.members = w.members[:base]
	w.out = append(w.out, '}')
	return ok
}

// order puts the members of the object opened at out[open] in RFC 8785 order (names compared
// as bytes: they are ASCII, so as UTF-16 code units), reporting false on a duplicate name.
func (w *jcsWriter) order(open int, ms []jcsMember) bool {
	name := func(m jcsMember) []byte { return w.out[m.start+1 : m.nameEnd] }
	sorted := true
	for k := 1; k < len(ms); k++ {
		switch c := bytes.Compare(name(ms[k-1]), name(ms[k])); {
		case c == 0:
			return false
		case c > 0:
			sorted = false
		}
	}
	if sorted {
		return true
	}
	for k := 1; k < len(ms); k++ { // insertion sort: an object has a dozen members
		for j := k; j > 0 && bytes.Compare(name(ms[j-1]), name(ms[j])) > 0; j-- {
			ms[j-1], ms[j] = ms[j], ms[j-1]
		}
	}
	for k := 1; k < len(ms); k++ {
		if bytes.Equal(name(ms[k-1]), name(ms[k])) {
			return false
		}
	}
	w.tmp = append(w.tmp[:0], w.out[open+1:]...)
	w.out = w.out[:open+1]
	for k, m := range ms {
		if k > 0 {
			w.out = append(w.out, ',')
		}
		w.out = append(w.out, w.tmp[m.start-open-1:m.end-open-1]...)
	}
	return true
}
