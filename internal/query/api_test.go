package query_test

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/bookrecon/bookrecon/events"
	"github.com/bookrecon/bookrecon/internal/attempt"
	"github.com/bookrecon/bookrecon/internal/auth"
	"github.com/bookrecon/bookrecon/internal/auth/authtest"
	"github.com/bookrecon/bookrecon/internal/query"
	"github.com/bookrecon/bookrecon/internal/service"
	"github.com/bookrecon/bookrecon/providers"
)

// TestRetryGate asks the gate about every case of docs/design.md#safe-retry-gate,
// each on its own intent seeded through the pipeline's own state machine, and compares the
// exact JSON answer.
func TestRetryGate(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const m = time.Minute
	for _, tt := range []struct {
		name  string
		seed  func(t *testing.T, intent string)
		path  string // after /v1/tenants/t_1/intents/{intent}/operations/; default BOOK/retry-gate
		other string // a different tenant to ask about, if set
		want  string
	}{
		{
			name: "NoAttempt",
			seed: func(*testing.T, string) {},
			want: `{"allowed":true,"reason":"no_attempt","latestVersion":0,"latestStatus":null}`,
		},
		{
			name: "NoAttemptInThisTenant", // the same intent id in another tenant is another intent
			seed: func(t *testing.T, intent string) {
				b.apply(t, started(intent, 1, -10*m), unknownEv(intent, 1, -9*m))
			},
			other: "t_2",
			want:  `{"allowed":true,"reason":"no_attempt","latestVersion":0,"latestStatus":null}`,
		},
		{
			name: "V1InProgress",
			seed: func(t *testing.T, intent string) { b.apply(t, started(intent, 1, -10*m)) },
			want: `{"allowed":false,"reason":"earlier_in_progress","latestVersion":1,"latestStatus":"IN_PROGRESS"}`,
		},
		{
			name: "V1Unknown",
			seed: func(t *testing.T, intent string) {
				b.apply(t, started(intent, 1, -10*m), unknownEv(intent, 1, -9*m))
			},
			want: `{"allowed":false,"reason":"earlier_unknown","latestVersion":1,"latestStatus":"UNKNOWN"}`,
		},
		{
			name: "V1UnknownByTransportTimeoutCode", // attempt.failed READ_TIMEOUT is not proof of failure
			seed: func(t *testing.T, intent string) {
				e := failedEv(intent, 1, -9*m, true)
				e.outcome["failureCode"] = "READ_TIMEOUT"
				b.apply(t, started(intent, 1, -10*m), e)
			},
			want: `{"allowed":false,"reason":"earlier_unknown","latestVersion":1,"latestStatus":"UNKNOWN"}`,
		},
		{
			name: "V1Confirmed",
			seed: func(t *testing.T, intent string) {
				b.apply(t, started(intent, 1, -10*m), succeededEv(intent, 1, -9*m, "HTL-"+intent))
			},
			want: `{"allowed":false,"reason":"earlier_confirmed","latestVersion":1,"latestStatus":"CONFIRMED"}`,
		},
		{
			name: "V1FailedByEventRetryable",
			seed: func(t *testing.T, intent string) {
				b.apply(t, started(intent, 1, -10*m), failedEv(intent, 1, -9*m, true))
			},
			want: `{"allowed":true,"reason":"safe_retry","latestVersion":1,"latestStatus":"FAILED"}`,
		},
		{
			name: "V1FailedNotSent", // connect_timeout with requestSent false
			seed: func(t *testing.T, intent string) {
				e := unknownEv(intent, 1, -9*m)
				e.outcome = map[string]any{"timeoutClass": "connect_timeout", "requestSent": false}
				b.apply(t, started(intent, 1, -10*m), e)
			},
			want: `{"allowed":true,"reason":"safe_retry","latestVersion":1,"latestStatus":"FAILED"}`,
		},
		{
			name: "V1ConnectTimeoutRequestSentNullIsUnknown",
			seed: func(t *testing.T, intent string) {
				e := unknownEv(intent, 1, -9*m)
				e.outcome = map[string]any{"timeoutClass": "connect_timeout", "requestSent": nil}
				b.apply(t, started(intent, 1, -10*m), e)
			},
			want: `{"allowed":false,"reason":"earlier_unknown","latestVersion":1,"latestStatus":"UNKNOWN"}`,
		},
		{
			name: "V1FailedAuthoritativeNotFound",
			seed: func(t *testing.T, intent string) {
				b.apply(t, started(intent, 1, -10*m), unknownEv(intent, 1, -9*m))
				b.settle(t, intent, "book:"+intent+":v1", attempt.Settlement{Status: attempt.StatusFailed,
					Source: attempt.SourceAuthoritativeNotFound, FailureCode: "NOT_FOUND", Retryable: true,
					CauseID: uuid.NewString(), Cause: "lookup", Lookup: map[string]any{"kind": "client_reference", "result": "not_found"}})
			},
			want: `{"allowed":true,"reason":"safe_retry","latestVersion":1,"latestStatus":"FAILED"}`,
		},
		{
			name: "V1FailedLookupRejected",
			seed: func(t *testing.T, intent string) {
				b.apply(t, started(intent, 1, -10*m), unknownEv(intent, 1, -9*m))
				b.settle(t, intent, "book:"+intent+":v1", attempt.Settlement{Status: attempt.StatusFailed,
					Source: attempt.SourceClientReference, Reference: "HTL-" + intent, FailureCode: "REJECTED", Retryable: true,
					CauseID: uuid.NewString(), Cause: "lookup", Lookup: map[string]any{"kind": "client_reference", "result": "found"}})
			},
			want: `{"allowed":true,"reason":"safe_retry","latestVersion":1,"latestStatus":"FAILED"}`,
		},
		{
			name: "V1FailedLookupCancelled",
			seed: func(t *testing.T, intent string) {
				b.apply(t, started(intent, 1, -10*m), unknownEv(intent, 1, -9*m))
				b.settle(t, intent, "book:"+intent+":v1", attempt.Settlement{Status: attempt.StatusFailed,
					Source: attempt.SourceProviderReference, Reference: "HTL-" + intent, FailureCode: "CANCELLED", Retryable: true,
					CauseID: uuid.NewString(), Cause: "lookup", Lookup: map[string]any{"kind": "provider_reference", "result": "found"}})
			},
			want: `{"allowed":true,"reason":"safe_retry","latestVersion":1,"latestStatus":"FAILED"}`,
		},
		{
			name: "V1FailedManual",
			seed: func(t *testing.T, intent string) {
				b.apply(t, started(intent, 1, -10*m), unknownEv(intent, 1, -9*m))
				b.decide(t, intent, "book:"+intent+":v1", map[string]any{"decision": "FAILED"})
			},
			want: `{"allowed":true,"reason":"safe_retry","latestVersion":1,"latestStatus":"FAILED"}`,
		},
		{
			name: "V1FailedRetryableFalse",
			seed: func(t *testing.T, intent string) {
				b.apply(t, started(intent, 1, -10*m), failedEv(intent, 1, -9*m, false))
			},
			want: `{"allowed":false,"reason":"not_retryable","latestVersion":1,"latestStatus":"FAILED"}`,
		},
		{
			name: "V1ManualFailedRetryableFalse",
			seed: func(t *testing.T, intent string) {
				b.apply(t, started(intent, 1, -10*m), unknownEv(intent, 1, -9*m))
				b.decide(t, intent, "book:"+intent+":v1", map[string]any{"decision": "FAILED", "retryable": false})
			},
			want: `{"allowed":false,"reason":"not_retryable","latestVersion":1,"latestStatus":"FAILED"}`,
		},
		{
			name: "V2AfterSafeRetryFailedRetryable",
			seed: func(t *testing.T, intent string) {
				b.apply(t, started(intent, 1, -10*m), failedEv(intent, 1, -9*m, true),
					started(intent, 2, -8*m), failedEv(intent, 2, -7*m, true))
			},
			want: `{"allowed":true,"reason":"safe_retry","latestVersion":2,"latestStatus":"FAILED"}`,
		},
		{
			name: "V2UnknownAfterV1Failed",
			seed: func(t *testing.T, intent string) {
				b.apply(t, started(intent, 1, -10*m), failedEv(intent, 1, -9*m, true),
					started(intent, 2, -8*m), unknownEv(intent, 2, -7*m))
			},
			want: `{"allowed":false,"reason":"earlier_unknown","latestVersion":2,"latestStatus":"UNKNOWN"}`,
		},
		{
			name: "V3AtMaxVersions3", // v4 would exceed the provider's maxVersions (3, the default)
			seed: func(t *testing.T, intent string) {
				b.apply(t, started(intent, 1, -10*m), failedEv(intent, 1, -9*m, true),
					started(intent, 2, -8*m), failedEv(intent, 2, -7*m, true),
					started(intent, 3, -6*m), failedEv(intent, 3, -5*m, true))
			},
			want: `{"allowed":false,"reason":"max_versions","latestVersion":3,"latestStatus":"FAILED"}`,
		},
		{
			name: "V2AtProviderMaxVersions2", // maxVersions comes from the latest version's provider
			seed: func(t *testing.T, intent string) {
				v1s, v1f, v2s, v2f := started(intent, 1, -10*m), failedEv(intent, 1, -9*m, true), started(intent, 2, -8*m), failedEv(intent, 2, -7*m, true)
				for _, e := range []*ev{&v1s, &v1f, &v2s, &v2f} {
					e.provider = "tight"
				}
				b.apply(t, v1s, v1f, v2s, v2f)
			},
			want: `{"allowed":false,"reason":"max_versions","latestVersion":2,"latestStatus":"FAILED"}`,
		},
		{
			name: "EarlierVersionMissing", // v1 never recorded: not FAILED, answered as earlier_unknown
			seed: func(t *testing.T, intent string) {
				b.apply(t, started(intent, 2, -8*m), failedEv(intent, 2, -7*m, true))
			},
			want: `{"allowed":false,"reason":"earlier_unknown","latestVersion":2,"latestStatus":"FAILED"}`,
		},
		{
			// A failure committed well after v1's own start (UNKNOWN first) but before now: the
			// gate judges at now, so it counts.
			name: "FailureAfterEarlierStartButBeforeNow",
			seed: func(t *testing.T, intent string) {
				b.apply(t, started(intent, 1, -10*m), unknownEv(intent, 1, -9*m), failedEv(intent, 1, -time.Second, true))
			},
			want: `{"allowed":true,"reason":"safe_retry","latestVersion":1,"latestStatus":"FAILED"}`,
		},
		{
			// failed_after_start cannot happen with start = now on one clock; it does when the
			// failing event's occurredAt (the producer's clock) is ahead of ours: at now, v1 had
			// not failed yet, so it is answered as still in flight.
			name: "FailureRecordedAfterNowClockSkew",
			seed: func(t *testing.T, intent string) {
				b.apply(t, started(intent, 1, -10*m), failedEv(intent, 1, time.Hour, true))
			},
			want: `{"allowed":false,"reason":"earlier_in_progress","latestVersion":1,"latestStatus":"FAILED"}`,
		},
		{
			name: "RefundOfOnePaymentFailedRetryable",
			seed: func(t *testing.T, intent string) {
				b.apply(t,
					ev{typ: events.EventStarted, intent: intent, op: events.OpRefund, subject: "pay_1", provider: "sim-pay", at: -10 * m},
					ev{typ: events.EventFailed, intent: intent, op: events.OpRefund, subject: "pay_1", provider: "sim-pay", at: -9 * m,
						outcome: map[string]any{"failureCode": "DECLINED", "retryable": true}})
			},
			path: "REFUND/retry-gate?subject=pay_1",
			want: `{"allowed":true,"reason":"safe_retry","latestVersion":1,"latestStatus":"FAILED"}`,
		},
		{
			name: "RefundOfAnotherPaymentIsAnotherOperation",
			seed: func(t *testing.T, intent string) {
				b.apply(t, ev{typ: events.EventStarted, intent: intent, op: events.OpRefund, subject: "pay_1", provider: "sim-pay", at: -10 * m})
			},
			path: "REFUND/retry-gate?subject=pay_2",
			want: `{"allowed":true,"reason":"no_attempt","latestVersion":0,"latestStatus":null}`,
		},
		{
			name: "CaptureSubjectDefaultsToIntent",
			seed: func(t *testing.T, intent string) {
				b.apply(t, ev{typ: events.EventStarted, intent: intent, op: events.OpPaymentCapture, provider: "sim-pay", at: -10 * m})
			},
			path: "PAYMENT_CAPTURE/retry-gate",
			want: `{"allowed":false,"reason":"earlier_in_progress","latestVersion":1,"latestStatus":"IN_PROGRESS"}`,
		},
		{
			name: "BookSubjectMayBeGivenAsTheIntent",
			seed: func(t *testing.T, intent string) {
				b.apply(t, started(intent, 1, -10*m), failedEv(intent, 1, -9*m, false))
			},
			path: "BOOK/retry-gate?subject={intent}",
			want: `{"allowed":false,"reason":"not_retryable","latestVersion":1,"latestStatus":"FAILED"}`,
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			intent := "bi_" + strings.ToLower(tt.name)
			if len(intent) > 64 {
				intent = intent[:64]
			}
			tt.seed(t, intent)
			tenant := "t_1"
			if tt.other != "" {
				tenant = tt.other
			}
			path := "/v1/tenants/" + tenant + "/intents/" + intent + "/operations/" +
				strings.ReplaceAll(cmpOr(tt.path, "BOOK/retry-gate"), "{intent}", intent)
			code, body := b.get(t, path)
			if code != http.StatusOK || body != tt.want+"\n" {
				t.Errorf("GET %s = %d %s\nwant 200 %s", path, code, body, tt.want)
			}
		})
	}

	// Every answer above is counted once under its operation, allowed and reason.
	for _, c := range []struct {
		op, allowed, reason string
		want                float64
	}{
		{"BOOK", "true", "no_attempt", 2}, {"BOOK", "true", "safe_retry", 8}, {"BOOK", "false", "earlier_in_progress", 2},
		{"BOOK", "false", "earlier_unknown", 5}, {"BOOK", "false", "earlier_confirmed", 1}, {"BOOK", "false", "not_retryable", 3},
		{"BOOK", "false", "max_versions", 2}, {"REFUND", "true", "safe_retry", 1}, {"REFUND", "true", "no_attempt", 1},
		{"PAYMENT_CAPTURE", "false", "earlier_in_progress", 1}, {"CANCEL", "false", "max_versions", 0},
	} {
		got := testutil.ToFloat64(b.api.Metrics().GateAnswers.WithLabelValues(c.op, c.allowed, c.reason))
		if got != c.want {
			t.Errorf("bookrecon_retry_gate_answers_total{%s,%s,%s} = %v, want %v", c.op, c.allowed, c.reason, got, c.want)
		}
	}
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// TestIntentStatus asks the traveller-facing status for every attempt status, the highest BOOK
// version, and the 404 and 400 answers.
func TestIntentStatus(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const m = time.Minute
	for _, tt := range []struct {
		name     string
		intent   string
		seed     func(t *testing.T, intent string)
		tenant   string // default t_1
		wantCode int
		want     string // {intent} is replaced
	}{
		{
			name: "Confirmed", intent: "bi_confirmed",
			seed: func(t *testing.T, i string) {
				b.apply(t, started(i, 1, -10*m), succeededEv(i, 1, -9*m, "HTL-1"))
			},
			wantCode: 200, want: `{"tenantId":"t_1","bookingIntentId":"{intent}","status":"confirmed","canBuyAgain":false,"latestVersion":1}`,
		},
		{
			name: "FailedRetryable", intent: "bi_failed_retryable",
			seed: func(t *testing.T, i string) {
				b.apply(t, started(i, 1, -10*m), failedEv(i, 1, -9*m, true))
			},
			wantCode: 200, want: `{"tenantId":"t_1","bookingIntentId":"{intent}","status":"failed","canBuyAgain":true,"latestVersion":1}`,
		},
		{
			name: "FailedNotRetryable", intent: "bi_failed_final",
			seed: func(t *testing.T, i string) {
				b.apply(t, started(i, 1, -10*m), failedEv(i, 1, -9*m, false))
			},
			wantCode: 200, want: `{"tenantId":"t_1","bookingIntentId":"{intent}","status":"failed","canBuyAgain":false,"latestVersion":1}`,
		},
		{
			name: "InProgressIsBeingVerified", intent: "bi_in_progress",
			seed:     func(t *testing.T, i string) { b.apply(t, started(i, 1, -10*m)) },
			wantCode: 200, want: `{"tenantId":"t_1","bookingIntentId":"{intent}","status":"being_verified","canBuyAgain":false,"latestVersion":1}`,
		},
		{
			name: "UnknownIsBeingVerified", intent: "bi_unknown",
			seed: func(t *testing.T, i string) {
				b.apply(t, started(i, 1, -10*m), unknownEv(i, 1, -9*m))
			},
			wantCode: 200, want: `{"tenantId":"t_1","bookingIntentId":"{intent}","status":"being_verified","canBuyAgain":false,"latestVersion":1}`,
		},
		{
			name: "HighestVersionCounts", intent: "bi_v2_confirmed",
			seed: func(t *testing.T, i string) {
				b.apply(t, started(i, 1, -10*m), failedEv(i, 1, -9*m, true), started(i, 2, -8*m), succeededEv(i, 2, -7*m, "HTL-2"))
			},
			wantCode: 200, want: `{"tenantId":"t_1","bookingIntentId":"{intent}","status":"confirmed","canBuyAgain":false,"latestVersion":2}`,
		},
		{
			name: "HighestVersionUnknownAfterFailure", intent: "bi_v2_unknown",
			seed: func(t *testing.T, i string) {
				b.apply(t, started(i, 1, -10*m), failedEv(i, 1, -9*m, true), started(i, 2, -8*m), unknownEv(i, 2, -7*m))
			},
			wantCode: 200, want: `{"tenantId":"t_1","bookingIntentId":"{intent}","status":"being_verified","canBuyAgain":false,"latestVersion":2}`,
		},
		{
			name: "NoAttempt", intent: "bi_nothing", seed: func(*testing.T, string) {},
			wantCode: 404, want: prob(http.StatusNotFound, "not_found", "the intent has no BOOK attempt"),
		},
		{
			name: "OnlyPaymentAttempts", intent: "bi_only_payment",
			seed: func(t *testing.T, i string) {
				b.apply(t, ev{typ: events.EventStarted, intent: i, op: events.OpPaymentAuthorize, provider: "sim-pay", at: -10 * m})
			},
			wantCode: 404, want: prob(http.StatusNotFound, "not_found", "the intent has no BOOK attempt"),
		},
		{
			name: "OtherTenant", intent: "bi_confirmed_elsewhere", tenant: "t_2",
			seed: func(t *testing.T, i string) {
				b.apply(t, started(i, 1, -10*m), succeededEv(i, 1, -9*m, "HTL-3"))
			},
			wantCode: 404, want: prob(http.StatusNotFound, "not_found", "the intent has no BOOK attempt"),
		},
		{
			// Authorization comes before validation: no token acts for a tenant that is not
			// one (the 400 invalid_tenant is TestValidationErrors').
			name: "InvalidTenant", intent: "bi_x", tenant: "t.1", seed: func(*testing.T, string) {},
			wantCode: 403, want: prob(http.StatusForbidden, "forbidden", "the token does not act for this tenant"),
		},
		{
			name: "InvalidIntentTooLong", intent: strings.Repeat("i", 65), seed: func(*testing.T, string) {},
			wantCode: 400, want: prob(http.StatusBadRequest, "invalid_intent", "intent must match [A-Za-z0-9_-]{1,64}"),
		},
		{
			name: "InvalidIntentCharacter", intent: "bi%21", seed: func(*testing.T, string) {},
			wantCode: 400, want: prob(http.StatusBadRequest, "invalid_intent", "intent must match [A-Za-z0-9_-]{1,64}"),
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.seed(t, tt.intent)
			path := "/v1/tenants/" + cmpOr(tt.tenant, "t_1") + "/intents/" + tt.intent
			code, body := b.get(t, path)
			want := strings.ReplaceAll(tt.want, "{intent}", tt.intent) + "\n"
			if code != tt.wantCode || body != want {
				t.Errorf("GET %s = %d %s\nwant %d %s", path, code, body, tt.wantCode, want)
			}
			var got struct{ Status any } // a problem's status is its HTTP code
			if err := json.Unmarshal([]byte(body), &got); err != nil {
				t.Fatal(err)
			}
			if code == http.StatusOK && !slices.Contains([]any{"confirmed", "failed", "being_verified"}, got.Status) {
				t.Errorf("status %q is not traveller-facing", got.Status)
			}
		})
	}
}

// TestRetryGateBadRequests checks the 400 answers and their JSON errors, and that a bad request
// is no gate answer.
func TestRetryGateBadRequests(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, tt := range []struct {
		name, path string
		want       string
	}{
		// Authorization comes before validation: a t_1 token on a tenant that is not one is
		// refused as a foreign tenant (the 400 invalid_tenant is TestValidationErrors').
		{"InvalidTenant", "/v1/tenants/t%20one/intents/bi_1/operations/BOOK/retry-gate",
			prob(http.StatusForbidden, "forbidden", "the token does not act for this tenant")},
		{"TenantTooLong", "/v1/tenants/" + strings.Repeat("t", 65) + "/intents/bi_1/operations/BOOK/retry-gate",
			prob(http.StatusForbidden, "forbidden", "the token does not act for this tenant")},
		{"InvalidIntent", "/v1/tenants/t_1/intents/bi:1/operations/BOOK/retry-gate",
			prob(http.StatusBadRequest, "invalid_intent", "intent must match [A-Za-z0-9_-]{1,64}")},
		{"UnknownOperation", "/v1/tenants/t_1/intents/bi_1/operations/UPGRADE/retry-gate",
			prob(http.StatusBadRequest, "invalid_operation", "operation must be one of BOOK, PAYMENT_AUTHORIZE, PAYMENT_CAPTURE, MODIFY, CANCEL, REFUND")},
		{"LowerCaseOperation", "/v1/tenants/t_1/intents/bi_1/operations/book/retry-gate",
			prob(http.StatusBadRequest, "invalid_operation", "operation must be one of BOOK, PAYMENT_AUTHORIZE, PAYMENT_CAPTURE, MODIFY, CANCEL, REFUND")},
		{"CancelWithoutSubject", "/v1/tenants/t_1/intents/bi_1/operations/CANCEL/retry-gate",
			prob(http.StatusBadRequest, "missing_subject", "subject is required for CANCEL: the booking or payment acted on")},
		{"ModifyEmptySubject", "/v1/tenants/t_1/intents/bi_1/operations/MODIFY/retry-gate?subject=",
			prob(http.StatusBadRequest, "missing_subject", "subject is required for MODIFY: the booking or payment acted on")},
		{"RefundInvalidSubject", "/v1/tenants/t_1/intents/bi_1/operations/REFUND/retry-gate?subject=pay%2F1",
			prob(http.StatusBadRequest, "invalid_subject", "subject must match [A-Za-z0-9_-]{1,64}")},
		{"BookOtherSubject", "/v1/tenants/t_1/intents/bi_1/operations/BOOK/retry-gate?subject=bi_2",
			prob(http.StatusBadRequest, "invalid_subject", "subject must be the bookingIntentId (or absent) for BOOK")},
		{"UnknownRoute", "/v1/tenants/t_1/bookings/bi_1",
			prob(http.StatusNotFound, "not_found", "no such route")},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			code, body := b.get(t, tt.path)
			wantCode := cmp.Or(map[string]int{"UnknownRoute": http.StatusNotFound, "InvalidTenant": http.StatusForbidden,
				"TenantTooLong": http.StatusForbidden}[tt.name], http.StatusBadRequest)
			if code != wantCode || body != tt.want+"\n" {
				t.Errorf("GET %s = %d %s\nwant %d %s", tt.path, code, body, wantCode, tt.want)
			}
		})
	}
	t.Run("MethodNotAllowed", func(t *testing.T) {
		t.Parallel()
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodPost, "/v1/tenants/t_1/intents/bi_1", nil)
		req.Header.Set("Authorization", "Bearer "+b.token["t_1"])
		b.api.ServeHTTP(rec, req)
		want := prob(http.StatusMethodNotAllowed, "method_not_allowed", "the API only answers GET and HEAD") + "\n"
		if rec.Code != http.StatusMethodNotAllowed || rec.Body.String() != want || rec.Header().Get("Allow") != "GET, HEAD" {
			t.Errorf("POST = %d %q Allow %q, want 405 %q", rec.Code, rec.Body.String(), rec.Header().Get("Allow"), want)
		}
	})
}

// TestGateMetricsPreCreated checks that every valid (operation, allowed, reason) series exists
// before the first answer, and no impossible one.
func TestGateMetricsPreCreated(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m, err := query.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(m.GateAnswers); n != 6*7 {
		t.Errorf("%d gate series, want 42 (6 operations × 7 reasons)", n)
	}
	if n := testutil.CollectAndCount(m.Requests); n != 3*6 {
		t.Errorf("%d request series, want 18 (3 routes × 200, 400, 401, 403, 404, 500)", n)
	}
	// The spec, written out: no_attempt and safe_retry allow, the other five refuse.
	allowed := map[string]string{"no_attempt": "true", "safe_retry": "true", "earlier_in_progress": "false",
		"earlier_unknown": "false", "earlier_confirmed": "false", "not_retryable": "false", "max_versions": "false"}
	var want strings.Builder
	want.WriteString("# HELP bookrecon_retry_gate_answers_total Retry-gate answers given by the query API (retry-gate endpoint and canBuyAgain), by operation, allowed and reason.\n")
	want.WriteString("# TYPE bookrecon_retry_gate_answers_total counter\n")
	for _, op := range []string{"BOOK", "PAYMENT_AUTHORIZE", "PAYMENT_CAPTURE", "MODIFY", "CANCEL", "REFUND"} {
		for reason, a := range allowed {
			fmt.Fprintf(&want, "bookrecon_retry_gate_answers_total{allowed=%q,operation=%q,reason=%q} 0\n", a, op, reason)
		}
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want.String()), "bookrecon_retry_gate_answers_total"); err != nil {
		t.Error(err)
	}
}

// TestJudgeIsPure checks the gate's mapping of the state machine's internal reasons without a
// database.
func TestJudgeIsPure(t *testing.T) {
	t.Parallel()
	now := time.Now()
	failed := func(v int) query.Version {
		return query.Version{Provider: "nowhere", Sibling: attempt.Sibling{Version: v, Status: attempt.StatusFailed,
			Source: attempt.SourceEvent, Retryable: true, FailedFactAt: now.Add(-time.Minute)}}
	}
	for _, tt := range []struct {
		name     string
		versions []query.Version
		want     attempt.GateReason
	}{
		{"Missing", []query.Version{failed(2)}, attempt.GateEarlierUnknown},
		{"Gap", []query.Version{failed(1), failed(3)}, attempt.GateMaxVersions}, // v4 > 3: checked first
		{"FutureFailure", []query.Version{{Provider: "nowhere", Sibling: attempt.Sibling{Version: 1, Status: attempt.StatusFailed,
			Source: attempt.SourceEvent, Retryable: true, FailedFactAt: now.Add(time.Minute)}}}, attempt.GateEarlierInProgress},
		{"UnknownProviderDefaultsToThree", []query.Version{failed(1), failed(2)}, attempt.GateSafeRetry},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := query.Judge(tt.versions, nil, now); got.Reason != tt.want || got.Allowed != query.Allows(tt.want) {
				t.Errorf("Judge = %+v, want reason %s", got, tt.want)
			}
		})
	}
}

// TestRun serves the API and, on their own address, its admin endpoints on real listeners, on
// a pool of its own, re-reads the tokens file on change, and stops.
func TestRun(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx, cancel := context.WithCancel(context.Background())
	reg := prometheus.NewRegistry()
	path, toks := authtest.File(t, authtest.Reader("t_1", "checkout"))
	tokens, err := auth.Open(path, slog.New(slog.DiscardHandler), reg)
	if err != nil {
		t.Fatal(err)
	}
	addrc, adminc := make(chan string, 1), make(chan string, 1)
	var wg sync.WaitGroup
	var runErr error
	wg.Go(func() {
		runErr = query.Run(ctx, query.Config{Infra: service.Infra{DatabaseURL: b.pool.Config().ConnString(), AdminAddr: "127.0.0.1:0"},
			Addr: "127.0.0.1:0", Started: func(a string) { addrc <- a }, Providers: b.caps, Tokens: tokens},
			query.Deps{Logger: slog.New(slog.DiscardHandler), Registry: reg, AdminStarted: func(a string) { adminc <- a }})
	})
	addr, admin := <-addrc, <-adminc
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	get := func(url, token string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, string(body)
	}
	for _, c := range []struct {
		url, token string
		code       int
		contains   string
	}{
		{"http://" + admin + "/livez", "", 200, "ok"},
		{"http://" + admin + "/readyz", "", 200, "ok"},
		{"http://" + addr + "/v1/tenants/t_1/intents/bi_none/operations/BOOK/retry-gate", toks[0], 200, `"reason":"no_attempt"`},
		{"http://" + admin + "/metrics", "", 200, `bookrecon_retry_gate_answers_total{allowed="true",operation="BOOK",reason="no_attempt"} 1`},
		{"http://" + addr + "/v1/tenants/t_1/intents/bi_none", toks[0], 404,
			`{"type":"about:blank","title":"Not Found","status":404,"code":"not_found","detail":"the intent has no BOOK attempt"}`},
		{"http://" + addr + "/v1/tenants/t_1/intents/bi_none", "", 401, `"code":"unauthenticated"`},
		// The admin endpoints are not on the API's address.
		{"http://" + addr + "/metrics", toks[0], 404, `"detail":"no such route"`},
		{"http://" + addr + "/readyz", "", 401, `"code":"unauthenticated"`},
		{"http://" + admin + "/metrics", "", 200, `bookrecon_auth_denials_total{reason="missing"} 2`},
	} {
		if code, body := get(c.url, c.token); code != c.code || !strings.Contains(body, c.contains) {
			t.Errorf("GET %s = %d %s, want %d containing %s", c.url, code, body, c.code, c.contains)
		}
	}
	// A token added to the file is accepted without a restart (Run watches the file).
	f, err := auth.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	tok, hash := auth.NewToken()
	f.Tokens = append(f.Tokens, auth.Entry{SHA256: hash, Tenant: "t_1", Principal: "new", Scopes: []auth.Scope{auth.ScopeAttemptsRead}})
	if err := auth.WriteFile(path, f); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for code, _ := get("http://"+addr+"/v1/tenants/t_1/intents/bi_none", tok); code != 404; code, _ = get("http://"+addr+"/v1/tenants/t_1/intents/bi_none", tok) {
		if time.Now().After(deadline) {
			t.Fatalf("the added token still gets %d after 5s", code)
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	wg.Wait()
	if runErr != nil {
		t.Errorf("Run = %v, want nil after cancel", runErr)
	}
}

// TestRunRefuses checks what stops Run at once, before it dials PostgreSQL (here a closed
// port, which Run would wait out): no admin address, and an API address in use.
func TestRunRefuses(t *testing.T) {
	t.Parallel()
	path, _ := authtest.File(t)
	tokens, err := auth.Open(path, slog.New(slog.DiscardHandler), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	closedDB := service.Infra{DatabaseURL: "postgres://bookrecon@127.0.0.1:1/bookrecon?sslmode=disable"}
	noAdmin, adminFree := closedDB, closedDB
	noAdmin.AdminAddr, adminFree.AdminAddr = "-", "127.0.0.1:0"
	for _, tt := range []struct {
		name string
		cfg  query.Config
		want string
	}{
		{"NoAdminAddr", query.Config{Infra: noAdmin, Addr: "127.0.0.1:0", Providers: &providers.Map{}, Tokens: tokens},
			`query: Config.AdminAddr must not be "-": /metrics, /livez and /readyz are served only there, never on the API's address`},
		{"AddrInUse", query.Config{Infra: adminFree, Addr: busy.Addr().String(), Providers: &providers.Map{}, Tokens: tokens},
			"query API address " + busy.Addr().String() + ": listen tcp " + busy.Addr().String() +
				": bind: address already in use (is another process listening there? choose another with BOOKRECON_QUERY_ADDR)"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := query.Run(ctx, tt.cfg, query.Deps{Logger: slog.New(slog.DiscardHandler)}); err == nil || err.Error() != tt.want {
				t.Errorf("Run = %v, want %s", err, tt.want)
			}
		})
	}
}
