package idempotency

import (
	"net/http"
	"strconv"
	"time"

	httpproblem "github.com/bookrecon/bookrecon/internal/problem"
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

// problem writes an RFC 9457 problem ({type, title, status, code, detail}) with internal/problem,
// the one writer of bookrecon's error bodies, and Retry-After in whole seconds when retryAfter > 0.
func problem(w http.ResponseWriter, status int, code, detail string, retryAfter time.Duration) {
	d := httpproblem.New(status, code, detail)
	if retryAfter > 0 {
		d = d.With("Retry-After", strconv.Itoa(int((retryAfter+time.Second-1)/time.Second)))
	}
	httpproblem.Write(w, d)
}
