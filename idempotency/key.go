package idempotency

import (
	"errors"
	"net/http"
	"strings"
)

// HeaderKey is the request header carrying the key (draft-ietf-httpapi-idempotency-key-header).
const HeaderKey = "Idempotency-Key"

// HeaderReplayed marks a replayed answer: "Idempotent-Replayed: true".
const HeaderReplayed = "Idempotent-Replayed"

// MaxKeyLen is the longest key accepted, in bytes (docs/design.md "Producer API": 1–255 visible
// ASCII characters).
const MaxKeyLen = 255

var (
	// ErrKeyMissing: no Idempotency-Key header (400 idempotency_key_missing).
	ErrKeyMissing = errors.New("idempotency: no Idempotency-Key header")
	// ErrKeyInvalid: a key that is empty, longer than MaxKeyLen, not visible ASCII, sent twice,
	// or a quoted string left open (400 idempotency_key_invalid).
	ErrKeyInvalid = errors.New("idempotency: Idempotency-Key must be 1-255 visible ASCII characters, sent once")
)

// ParseKey returns the key of h's Idempotency-Key header. The draft makes the field an RFC 8941
// sf-string ("…"); docs/design.md accepts the quoted form with its quotes stripped (and the \" and
// \\ escapes undone) and the bare token as it is. The key must then be 1–255 characters of
// visible ASCII (0x21–0x7e). Errors: ErrKeyMissing, ErrKeyInvalid.
func ParseKey(h http.Header) (string, error) {
	vs := h.Values(HeaderKey)
	switch len(vs) {
	case 0:
		return "", ErrKeyMissing
	case 1:
	default:
		return "", ErrKeyInvalid
	}
	v := strings.Trim(vs[0], " \t")
	if strings.HasPrefix(v, `"`) {
		var b strings.Builder
		closed := false
		for i := 1; i < len(v); i++ {
			c := v[i]
			switch {
			case c == '\\' && i+1 < len(v) && (v[i+1] == '"' || v[i+1] == '\\'):
				b.WriteByte(v[i+1])
				i++
			case c == '\\':
				return "", ErrKeyInvalid
			case c == '"':
				if i != len(v)-1 {
					return "", ErrKeyInvalid
				}
				closed = true
			default:
				b.WriteByte(c)
			}
		}
		if !closed {
			return "", ErrKeyInvalid
		}
		v = b.String()
	}
	if len(v) == 0 || len(v) > MaxKeyLen {
		return "", ErrKeyInvalid
	}
	for i := 0; i < len(v); i++ {
		if v[i] < 0x21 || v[i] > 0x7e {
			return "", ErrKeyInvalid
		}
	}
	return v, nil
}
