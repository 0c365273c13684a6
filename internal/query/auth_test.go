package query_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/bookrecon/bookrecon/events"
	"github.com/bookrecon/bookrecon/internal/auth"
	"github.com/bookrecon/bookrecon/internal/query"
)

// prob is the RFC 9457 body the API writes for status, code and detail (without the final
// newline).
func prob(status int, code, detail string) string {
	return fmt.Sprintf(`{"type":"about:blank","title":%q,"status":%d,"code":%q,"detail":%q}`, http.StatusText(status), status, code, detail)
}

// TestEveryRouteAuthorizes: every route of the API, the fallbacks included, refuses a missing,
// garbled, unknown, foreign-tenant and wrong-scope token with the exact problem, before it
// validates anything; the foreign tenant's answer is the same whether the intent exists there
// or not, and is counted.
func TestEveryRouteAuthorizes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const m = time.Minute
	// bi_exists exists in t_2, bi_absent nowhere.
	b.apply(t, ev{typ: events.EventStarted, tenant: "t_2", intent: "bi_exists", at: -10 * m})
	if code, _ := b.getAs(t, b.token["t_2"], "/v1/tenants/t_2/intents/bi_exists"); code != http.StatusOK {
		t.Fatalf("t_2's own token on its intent: %d, want 200", code)
	}
	unknown, _ := auth.NewToken()
	var (
		missing   = prob(401, "unauthenticated", "send Authorization: Bearer <token>; the operator issues tokens with bookrecon tokens add") + "\n"
		malformed = prob(401, "unauthenticated", "the Authorization header must be Bearer followed by one token") + "\n"
		invalid   = prob(401, "unauthenticated", "the token is not valid (mistyped, revoked, or of another deployment); ask the operator for a token") + "\n"
		foreign   = prob(403, "forbidden", "the token does not act for this tenant") + "\n"
		scope     = prob(403, "forbidden", "the token lacks the scope attempts:read") + "\n"
	)
	for _, route := range []struct{ name, method, path string }{
		{"IntentStatus", http.MethodGet, "/v1/tenants/t_2/intents/bi_exists"},
		{"IntentStatusAbsent", http.MethodGet, "/v1/tenants/t_2/intents/bi_absent"},
		{"IntentStatusInvalidIntent", http.MethodGet, "/v1/tenants/t_2/intents/bi!"},
		{"RetryGate", http.MethodGet, "/v1/tenants/t_2/intents/bi_exists/operations/BOOK/retry-gate"},
		{"RetryGateAbsent", http.MethodGet, "/v1/tenants/t_2/intents/bi_absent/operations/BOOK/retry-gate"},
		{"RetryGateInvalidOperation", http.MethodGet, "/v1/tenants/t_2/intents/bi_exists/operations/UPGRADE/retry-gate"},
		{"UnknownRoute", http.MethodGet, "/v1/tenants/t_2/bookings/bi_exists"},
		{"OtherMethod", http.MethodPost, "/v1/tenants/t_2/intents/bi_exists"},
	} {
		t.Run(route.name, func(t *testing.T) {
			t.Parallel()
			for _, c := range []struct {
				name, authz string
				code        int
				body        string
			}{
				{"Missing", "", 401, missing},
				{"Garbled", "Bearer " + b.token["t_2"][:10] + " " + b.token["t_2"][10:], 401, malformed},
				{"Unknown", "Bearer " + unknown, 401, invalid},
				{"ForeignTenant", "Bearer " + b.token["t_1"], 403, foreign},
				{"WrongScope", "Bearer " + b.writer, 403, scope},
			} {
				if c.name == "ForeignTenant" && (route.name == "UnknownRoute" || route.name == "OtherMethod") {
					// No {tenant} in the fallbacks' patterns: a token of any tenant reaches
					// the 404 or 405, which say nothing of tenant t_2.
					c.code, c.body = 404, prob(404, "not_found", "no such route")+"\n"
					if route.name == "OtherMethod" {
						c.code, c.body = 405, prob(405, "method_not_allowed", "the API only answers GET and HEAD")+"\n"
					}
				}
				req := httptest.NewRequest(route.method, route.path, nil)
				if c.authz != "" {
					req.Header.Set("Authorization", c.authz)
				}
				rec := httptest.NewRecorder()
				b.api.ServeHTTP(rec, req)
				if rec.Code != c.code || rec.Body.String() != c.body || rec.Header().Get("Content-Type") != "application/problem+json" {
					t.Errorf("%s %s with %s = %d %s (%s)\nwant %d %s", route.method, route.path, c.name, rec.Code, rec.Body.String(),
						rec.Header().Get("Content-Type"), c.code, c.body)
				}
			}
		})
	}
	t.Run("ForeignTenantSameAnswer", func(t *testing.T) {
		t.Parallel()
		var got []string
		for _, path := range []string{"/v1/tenants/t_2/intents/bi_exists", "/v1/tenants/t_2/intents/bi_absent",
			"/v1/tenants/t_2/intents/bi_exists/operations/BOOK/retry-gate", "/v1/tenants/t_2/intents/bi_absent/operations/BOOK/retry-gate",
			"/v1/tenants/t_3/intents/bi_exists"} {
			req := httptest.NewRequest(http.MethodGet, path, nil)
			req.Header.Set("Authorization", "Bearer "+b.token["t_1"])
			rec := httptest.NewRecorder()
			b.api.ServeHTTP(rec, req)
			got = append(got, fmt.Sprintf("%d %v %s", rec.Code, rec.Header(), rec.Body.String()))
		}
		for i, g := range got {
			if g != got[0] {
				t.Errorf("answer %d differs from answer 0:\n%s\n%s", i, g, got[0])
			}
		}
	})
}

// TestDenialsCounted: a refused request is counted under its route and code, and is no gate
// answer.
func TestDenialsCounted(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.getAs(t, "", "/v1/tenants/t_1/intents/bi_1")
	b.getAs(t, b.token["t_2"], "/v1/tenants/t_1/intents/bi_1/operations/BOOK/retry-gate")
	b.getAs(t, b.token["t_2"], "/v1/tenants/t_1/intents/bi_1/operations/BOOK/retry-gate")
	for _, c := range []struct {
		route, code string
		want        float64
	}{{"intent_status", "401", 1}, {"retry_gate", "403", 2}, {"intent_status", "200", 0}, {"retry_gate", "200", 0}} {
		if got := testutil.ToFloat64(b.api.Metrics().Requests.WithLabelValues(c.route, c.code)); got != c.want {
			t.Errorf("bookrecon_query_requests_total{route=%s,code=%s} = %v, want %v", c.route, c.code, got, c.want)
		}
	}
	if got := testutil.ToFloat64(b.api.Metrics().GateAnswers.WithLabelValues("BOOK", "true", "no_attempt")); got != 0 {
		t.Errorf("a refused request counted as a gate answer (%v)", got)
	}
}

// TestValidationErrors: the invalid-tenant answer the API can no longer give over HTTP
// (authorization comes first, and no token acts for a tenant that is not one) is still the
// query's own: moved here from TestIntentStatus/InvalidTenant and
// TestRetryGateBadRequests/InvalidTenant and /TenantTooLong.
func TestValidationErrors(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	for _, tenant := range []string{"t.1", "t one", "tttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttt"[:65]} {
		_, _, err := query.Status(ctx, b.pool, b.caps, tenant, "bi_x", b.now)
		var inv *query.InvalidError
		if !errors.As(err, &inv) || inv.Code != "invalid_tenant" || inv.Param+" "+inv.Detail != "tenant must match [A-Za-z0-9_-]{1,64}" {
			t.Errorf("Status(%q) = %v, want invalid_tenant: tenant must match [A-Za-z0-9_-]{1,64}", tenant, err)
		}
		_, err = query.Gate(ctx, b.pool, b.caps, query.Subject{TenantID: tenant, BookingIntentID: "bi_1", Operation: events.OpBook}, b.now)
		if !errors.As(err, &inv) || inv.Code != "invalid_tenant" || inv.Param+" "+inv.Detail != "tenant must match [A-Za-z0-9_-]{1,64}" {
			t.Errorf("Gate(%q) = %v, want invalid_tenant: tenant must match [A-Za-z0-9_-]{1,64}", tenant, err)
		}
	}
}
