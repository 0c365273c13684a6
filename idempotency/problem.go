package idempotency

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"
)

// Problem codes the package answers with (application/problem+json, RFC 9457, member code).
const (
	CodeKeyMissing      = "idempotency_key_missing" // 400
	CodeKeyInvalid      = "idempotency_key_invalid" // 400
	CodeInvalidRequest  = "invalid_request"         // 400: the route's FingerprintFunc refused the body
	CodeUnauthenticated = "unauthenticated"         // 401: Config.Scope found no principal
	CodeBodyTooLarge    = "body_too_large"          // 413
	CodeKeyReused       = "idempotency_key_reused"  // 422
	CodeInProgress      = "request_in_progress"     // 409, Retry-After
	CodeOutcomeUnknown  = "request_outcome_unknown" // 409
	CodeUnavailable     = "idempotency_unavailable" // 503, Retry-After: PostgreSQL failed before the answer was stored
)

// problem writes an RFC 9457 problem: {type, title, status, code, detail}.
func problem(w http.ResponseWriter, status int, code, detail string, retryAfter time.Duration) {
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	if retryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(int((retryAfter+time.Second-1)/time.Second)))
	}
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(struct {
		Type   string `json:"type"`
		Title  string `json:"title"`
		Status int    `json:"status"`
		Code   string `json:"code"`
		Detail string `json:"detail"`
	}{"about:blank", http.StatusText(status), status, code, detail})
}
