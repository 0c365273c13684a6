package idempotency

import (
	"crypto/sha256"
	"encoding/json"
	"net/http"

	"github.com/go-json-experiment/json/jsontext"
)

// Fingerprint is the SHA-256 of what makes two requests with one key the same request. A
// request whose fingerprint differs from the stored one gets 422 idempotency_key_reused.
type Fingerprint [sha256.Size]byte

// FingerprintFunc computes a route's fingerprint from the request and its whole body (already
// read, at most Config.MaxBody bytes). An error answers 400 invalid_request before anything is
// claimed; its text is not shown to the client (it may quote the body). The begin route of the
// Producer API supplies its own (docs/design.md: the operation's fields, recovery identities
// excluded); every other route takes DefaultFingerprint.
type FingerprintFunc func(r *http.Request, route string, body []byte) (Fingerprint, error)

// DefaultFingerprint is docs/design.md's fingerprint "for every other route": the SHA-256 of the
// RFC 8785 JSON of {method, route (the template the route was registered with), path (the
// request's path, so the path parameters), query, body}. The query is its parameters sorted by
// name (url.Values.Encode), omitted when empty: POST /x?dry_run=true and POST /x with one key
// are two requests (422), not a replay of the dry run. A body that is I-JSON is taken as JSON,
// so member order and whitespace do not change the fingerprint; any other body (empty, not
// JSON) is taken as its bytes (base64). It never fails.
func DefaultFingerprint(r *http.Request, route string, body []byte) (Fingerprint, error) {
	type doc struct {
		Method    string          `json:"method"`
		Route     string          `json:"route"`
		Path      string          `json:"path"`
		Query     string          `json:"query,omitempty"`
		Body      json.RawMessage `json:"body,omitempty"`
		BodyBytes []byte          `json:"bodyBytes,omitempty"`
	}
	d := doc{Method: r.Method, Route: route, Path: r.URL.EscapedPath(), Query: r.URL.Query().Encode()}
	if c := jsontext.Value(append([]byte(nil), body...)); len(body) > 0 && c.Canonicalize() == nil {
		d.Body = json.RawMessage(c)
	} else {
		d.BodyBytes = body
	}
	b, _ := json.Marshal(d) // strings, valid JSON and bytes: cannot fail
	c := jsontext.Value(b)
	_ = c.Canonicalize() // valid JSON by construction
	return sha256.Sum256(c), nil
}
