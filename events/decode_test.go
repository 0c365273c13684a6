package events

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// checkVerdict asserts err is nil when want is "", else an *InvalidError with want and field,
// whose Detail starts with the field.
func checkVerdict(tb testing.TB, err error, want Reason, field string) {
	tb.Helper()
	if want == "" {
		if err != nil {
			tb.Fatalf("err = %v, want nil", err)
		}
		return
	}
	ie, ok := AsInvalid(err)
	if !ok {
		tb.Fatalf("err = %v, want *InvalidError %s", err, want)
	}
	if ie.Reason != want || ie.Field != field {
		tb.Fatalf("err = %s at %q, want %s at %q (%v)", ie.Reason, ie.Field, want, field, err)
	}
	if field != "" && !strings.HasPrefix(ie.Detail, field+": ") {
		tb.Fatalf("Detail %q does not start with the field", ie.Detail)
	}
}

func TestDecodeAttemptValidation(t *testing.T) {
	t.Parallel()

	occurred := mustTime(t, "2026-11-30T09:00:00.000Z")
	known := DecodeOptions{KnownProvider: knownSampleProvider}
	stale := DecodeOptions{KnownProvider: knownSampleProvider, MinOccurredAt: occurred.Add(time.Second)}
	long := strings.Repeat("a", 65)

	tests := []struct {
		name      string
		base      string
		edits     []edit
		opt       DecodeOptions
		want      Reason
		wantField string
	}{
		// Accepted.
		{name: "HotelStarted", base: hotelStarted},
		{name: "FlightStarted", base: flightStarted},
		{name: "PaymentStarted", base: authStarted},
		{name: "CancelSubjectIsNotTheIntent", base: cancelStarted},
		{name: "Succeeded", base: succeeded},
		{name: "Failed", base: failed},
		{name: "OutcomeUnknown", base: unknown},
		{name: "UnknownMembersIgnored", base: hotelStarted, edits: []edit{set("channel", "mobile-app"), set("request.stay.extra", map[string]any{"x": 1})}},
		{name: "AmountAsJSONNumber", base: hotelStarted, edits: []edit{set("request.amount.value", json.Number("249.90"))}},
		{name: "AmountExponent", base: hotelStarted, edits: []edit{set("request.amount.value", json.Number("2.499e2"))}},
		{name: "AmountZero", base: hotelStarted, edits: []edit{set("request.amount.value", "0.00")}},
		{name: "LowerCaseAirports", base: flightStarted, edits: []edit{set("request.segments.0.from", "ist"), set("request.segments.0.flight", "xq101")}},
		{name: "TimeoutClassIsNotAnEnum", base: unknown, edits: []edit{set("outcome.timeoutClass", "gateway_gave_up")}},
		{name: "RequestSentNull", base: unknown, edits: []edit{set("outcome.requestSent", nil)}},
		{name: "RequestSentAbsent", base: unknown, edits: []edit{del("outcome.requestSent")}},
		{name: "RequestIgnoredOnOutcome", base: succeeded, edits: []edit{set("request", 5)}},
		{name: "OutcomeIgnoredOnStarted", base: hotelStarted, edits: []edit{set("outcome", "x")}},
		{name: "StayIgnoredOnPayment", base: authStarted, edits: []edit{set("request.stay", "x")}},
		{name: "RecoveryOptional", base: hotelStarted, edits: []edit{del("recovery")}},
		{name: "RecoveryMemberNull", base: hotelStarted, edits: []edit{set("recovery.clientReference", nil)}},
		{name: "OccurredAtWithOffset", base: hotelStarted, edits: []edit{set("occurredAt", "2026-11-30T12:00:00+03:00")}},
		{name: "NilKnownProviderKnowsAll", base: hotelStarted, edits: []edit{set("provider", "sim-new")}},
		{name: "OccurredAtOnTheBound", base: hotelStarted, opt: DecodeOptions{MinOccurredAt: occurred}},
		{name: "FailedMayCarryAReference", base: failed, edits: []edit{set("outcome.providerReference", "HTL-1")}},
		{name: "Version2", base: hotelStarted, edits: []edit{set("operationVersion", 2), set("idempotencyKey", "book:bi_sc01:v2")}},

		// Step 3.
		{name: "SpecVersionAbsent", base: hotelStarted, edits: []edit{del("specVersion")}, want: ReasonMissingField, wantField: "specVersion"},
		{name: "SpecVersionNull", base: hotelStarted, edits: []edit{set("specVersion", nil)}, want: ReasonMissingField, wantField: "specVersion"},
		{name: "SpecVersion2", base: hotelStarted, edits: []edit{set("specVersion", 2)}, want: ReasonUnsupportedSpecVersion, wantField: "specVersion"},
		{name: "SpecVersionString", base: hotelStarted, edits: []edit{set("specVersion", "1")}, want: ReasonUnsupportedSpecVersion, wantField: "specVersion"},
		{name: "SpecVersionFloat", base: hotelStarted, edits: []edit{set("specVersion", json.Number("1.0"))}, want: ReasonUnsupportedSpecVersion, wantField: "specVersion"},
		{name: "SpecVersionBeforeEventType", base: hotelStarted, edits: []edit{set("specVersion", 2), set("eventType", "x")}, want: ReasonUnsupportedSpecVersion, wantField: "specVersion"},

		// Step 4.
		{name: "EventTypeAbsent", base: hotelStarted, edits: []edit{del("eventType")}, want: ReasonMissingField, wantField: "eventType"},
		{name: "EventTypeNull", base: hotelStarted, edits: []edit{set("eventType", nil)}, want: ReasonMissingField, wantField: "eventType"},
		{name: "EventTypeUnknown", base: hotelStarted, edits: []edit{set("eventType", "attempt.exploded")}, want: ReasonUnknownEventType, wantField: "eventType"},
		{name: "EventTypeOfOtherTopic", base: hotelStarted, edits: []edit{set("eventType", "decision.recorded")}, want: ReasonUnknownEventType, wantField: "eventType"},
		{name: "EventTypeCase", base: hotelStarted, edits: []edit{set("eventType", "Attempt.Started")}, want: ReasonUnknownEventType, wantField: "eventType"},
		{name: "EventTypeNotString", base: hotelStarted, edits: []edit{set("eventType", 5)}, want: ReasonUnknownEventType, wantField: "eventType"},
		{name: "EventTypeBeforeMissing", base: hotelStarted, edits: []edit{set("eventType", "x"), del("tenantId")}, want: ReasonUnknownEventType, wantField: "eventType"},

		// Step 5.
		{name: "EventIDAbsent", base: hotelStarted, edits: []edit{del("eventId")}, want: ReasonMissingField, wantField: "eventId"},
		{name: "OccurredAtAbsent", base: hotelStarted, edits: []edit{del("occurredAt")}, want: ReasonMissingField, wantField: "occurredAt"},
		{name: "TenantIDAbsent", base: hotelStarted, edits: []edit{del("tenantId")}, want: ReasonMissingField, wantField: "tenantId"},
		{name: "TenantIDNull", base: hotelStarted, edits: []edit{set("tenantId", nil)}, want: ReasonMissingField, wantField: "tenantId"},
		{name: "TenantIDWrongCase", base: hotelStarted, edits: []edit{del("tenantId"), set("TenantId", "t_globetrek")}, want: ReasonMissingField, wantField: "tenantId"},
		{name: "IntentAbsent", base: hotelStarted, edits: []edit{del("bookingIntentId")}, want: ReasonMissingField, wantField: "bookingIntentId"},
		{name: "OperationAbsent", base: hotelStarted, edits: []edit{del("operation")}, want: ReasonMissingField, wantField: "operation"},
		{name: "OperationVersionAbsent", base: hotelStarted, edits: []edit{del("operationVersion")}, want: ReasonMissingField, wantField: "operationVersion"},
		{name: "KeyAbsent", base: hotelStarted, edits: []edit{del("idempotencyKey")}, want: ReasonMissingField, wantField: "idempotencyKey"},
		{name: "ProviderAbsent", base: hotelStarted, edits: []edit{del("provider")}, want: ReasonMissingField, wantField: "provider"},
		{name: "RequestAbsent", base: hotelStarted, edits: []edit{del("request")}, want: ReasonMissingField, wantField: "request"},
		{name: "RequestNull", base: hotelStarted, edits: []edit{set("request", nil)}, want: ReasonMissingField, wantField: "request"},
		{name: "OfferVersionAbsent", base: hotelStarted, edits: []edit{del("request.offerVersion")}, want: ReasonMissingField, wantField: "request.offerVersion"},
		{name: "TravellerRefAbsent", base: hotelStarted, edits: []edit{del("request.travellerRef")}, want: ReasonMissingField, wantField: "request.travellerRef"},
		{name: "AmountAbsent", base: hotelStarted, edits: []edit{del("request.amount")}, want: ReasonMissingField, wantField: "request.amount"},
		{name: "AmountValueAbsent", base: hotelStarted, edits: []edit{del("request.amount.value")}, want: ReasonMissingField, wantField: "request.amount.value"},
		{name: "CurrencyAbsent", base: hotelStarted, edits: []edit{del("request.amount.currency")}, want: ReasonMissingField, wantField: "request.amount.currency"},
		{name: "NeitherStayNorSegments", base: hotelStarted, edits: []edit{del("request.stay")}, want: ReasonMissingField, wantField: "request.stay"},
		{name: "CheckInAbsent", base: hotelStarted, edits: []edit{del("request.stay.checkIn")}, want: ReasonMissingField, wantField: "request.stay.checkIn"},
		{name: "PropertyAbsent", base: hotelStarted, edits: []edit{del("request.stay.propertyId")}, want: ReasonMissingField, wantField: "request.stay.propertyId"},
		{name: "FlightAbsent", base: flightStarted, edits: []edit{del("request.segments.0.flight")}, want: ReasonMissingField, wantField: "request.segments[0].flight"},
		{name: "OutcomeAbsentOnSucceeded", base: succeeded, edits: []edit{del("outcome")}, want: ReasonMissingField, wantField: "outcome"},
		{name: "OutcomeAbsentOnFailed", base: failed, edits: []edit{del("outcome")}, want: ReasonMissingField, wantField: "outcome"},
		{name: "OutcomeAbsentOnUnknown", base: unknown, edits: []edit{del("outcome")}, want: ReasonMissingField, wantField: "outcome"},
		{name: "ReferenceAbsentOnSucceeded", base: succeeded, edits: []edit{set("outcome", map[string]any{})}, want: ReasonMissingField, wantField: "outcome.providerReference"},
		{name: "FailureCodeAbsent", base: failed, edits: []edit{del("outcome.failureCode")}, want: ReasonMissingField, wantField: "outcome.failureCode"},
		{name: "RetryableAbsent", base: failed, edits: []edit{del("outcome.retryable")}, want: ReasonMissingField, wantField: "outcome.retryable"},
		{name: "RetryableNull", base: failed, edits: []edit{set("outcome.retryable", nil)}, want: ReasonMissingField, wantField: "outcome.retryable"},
		{name: "TimeoutClassAbsent", base: unknown, edits: []edit{del("outcome.timeoutClass")}, want: ReasonMissingField, wantField: "outcome.timeoutClass"},
		{name: "MissingBeatsEarlierInvalid", base: hotelStarted, edits: []edit{set("tenantId", "bad id"), set("operationVersion", 0), del("request.amount.currency")}, want: ReasonMissingField, wantField: "request.amount.currency"},

		// Step 6.
		{name: "EventIDEmpty", base: hotelStarted, edits: []edit{set("eventId", "")}, want: ReasonInvalidField, wantField: "eventId"},
		{name: "EventIDNotString", base: hotelStarted, edits: []edit{set("eventId", 7)}, want: ReasonInvalidField, wantField: "eventId"},
		{name: "EventIDTooLong", base: hotelStarted, edits: []edit{set("eventId", strings.Repeat("e", 257))}, want: ReasonInvalidField, wantField: "eventId"},
		{name: "OccurredAtNotRFC3339", base: hotelStarted, edits: []edit{set("occurredAt", "2026-11-30 09:00:00")}, want: ReasonInvalidField, wantField: "occurredAt"},
		{name: "OccurredAtNoZone", base: hotelStarted, edits: []edit{set("occurredAt", "2026-11-30T09:00:00")}, want: ReasonInvalidField, wantField: "occurredAt"},
		{name: "OccurredAtNumber", base: hotelStarted, edits: []edit{set("occurredAt", 1764493200)}, want: ReasonInvalidField, wantField: "occurredAt"},
		{name: "TenantIDSpace", base: hotelStarted, edits: []edit{set("tenantId", "t globetrek")}, want: ReasonInvalidField, wantField: "tenantId"},
		{name: "TenantIDTooLong", base: hotelStarted, edits: []edit{set("tenantId", long)}, want: ReasonInvalidField, wantField: "tenantId"},
		{name: "TenantIDEmpty", base: hotelStarted, edits: []edit{set("tenantId", "")}, want: ReasonInvalidField, wantField: "tenantId"},
		{name: "IntentNonASCII", base: hotelStarted, edits: []edit{set("bookingIntentId", "bi_é")}, want: ReasonInvalidField, wantField: "bookingIntentId"},
		{name: "OperationLowerCase", base: hotelStarted, edits: []edit{set("operation", "book")}, want: ReasonInvalidField, wantField: "operation"},
		{name: "OperationUnknown", base: hotelStarted, edits: []edit{set("operation", "TRANSFER")}, want: ReasonInvalidField, wantField: "operation"},
		{name: "OperationVersionZero", base: hotelStarted, edits: []edit{set("operationVersion", 0)}, want: ReasonInvalidField, wantField: "operationVersion"},
		{name: "OperationVersionNegative", base: hotelStarted, edits: []edit{set("operationVersion", -1)}, want: ReasonInvalidField, wantField: "operationVersion"},
		{name: "OperationVersionFraction", base: hotelStarted, edits: []edit{set("operationVersion", json.Number("1.5"))}, want: ReasonInvalidField, wantField: "operationVersion"},
		{name: "OperationVersionString", base: hotelStarted, edits: []edit{set("operationVersion", "1")}, want: ReasonInvalidField, wantField: "operationVersion"},
		{name: "OperationVersionOverflow", base: hotelStarted, edits: []edit{set("operationVersion", 2147483648)}, want: ReasonInvalidField, wantField: "operationVersion"},
		{name: "KeyNotString", base: hotelStarted, edits: []edit{set("idempotencyKey", 7)}, want: ReasonInvalidField, wantField: "idempotencyKey"},
		{name: "ProviderEmpty", base: hotelStarted, edits: []edit{set("provider", "")}, want: ReasonInvalidField, wantField: "provider"},
		{name: "RecoveryNotObject", base: hotelStarted, edits: []edit{set("recovery", "cr_sc01")}, want: ReasonInvalidField, wantField: "recovery"},
		{name: "RecoveryMemberNotString", base: hotelStarted, edits: []edit{set("recovery.clientReference", 5)}, want: ReasonInvalidField, wantField: "recovery.clientReference"},
		{name: "RequestNotObject", base: hotelStarted, edits: []edit{set("request", []any{})}, want: ReasonInvalidField, wantField: "request"},
		{name: "OfferVersionEmpty", base: hotelStarted, edits: []edit{set("request.offerVersion", "")}, want: ReasonInvalidField, wantField: "request.offerVersion"},
		{name: "AmountNotObject", base: hotelStarted, edits: []edit{set("request.amount", "249.90 EUR")}, want: ReasonInvalidField, wantField: "request.amount"},
		{name: "AmountNegative", base: hotelStarted, edits: []edit{set("request.amount.value", "-1")}, want: ReasonInvalidField, wantField: "request.amount.value"},
		{name: "AmountNegativeNumber", base: hotelStarted, edits: []edit{set("request.amount.value", -1)}, want: ReasonInvalidField, wantField: "request.amount.value"},
		{name: "AmountTooPrecise", base: hotelStarted, edits: []edit{set("request.amount.value", "249.901")}, want: ReasonInvalidField, wantField: "request.amount.value"},
		{name: "AmountNotDecimal", base: hotelStarted, edits: []edit{set("request.amount.value", "249,90")}, want: ReasonInvalidField, wantField: "request.amount.value"},
		{name: "AmountEmpty", base: hotelStarted, edits: []edit{set("request.amount.value", "")}, want: ReasonInvalidField, wantField: "request.amount.value"},
		{name: "AmountBoolean", base: hotelStarted, edits: []edit{set("request.amount.value", true)}, want: ReasonInvalidField, wantField: "request.amount.value"},
		{name: "AmountTooLarge", base: hotelStarted, edits: []edit{set("request.amount.value", "1e20")}, want: ReasonInvalidField, wantField: "request.amount.value"},
		{name: "CurrencyLowerCase", base: hotelStarted, edits: []edit{set("request.amount.currency", "eur")}, want: ReasonInvalidField, wantField: "request.amount.currency"},
		{name: "CurrencyUnknown", base: hotelStarted, edits: []edit{set("request.amount.currency", "XXX")}, want: ReasonInvalidField, wantField: "request.amount.currency"},
		{name: "CurrencyNumber", base: hotelStarted, edits: []edit{set("request.amount.currency", 978)}, want: ReasonInvalidField, wantField: "request.amount.currency"},
		{name: "YenFraction", base: hotelStarted, edits: []edit{set("request.amount", map[string]any{"value": "1000.5", "currency": "JPY"})}, want: ReasonInvalidField, wantField: "request.amount.value"},
		{name: "StayNotObject", base: hotelStarted, edits: []edit{set("request.stay", "h_1042")}, want: ReasonInvalidField, wantField: "request.stay"},
		{name: "CheckOutEqualsCheckIn", base: hotelStarted, edits: []edit{set("request.stay.checkOut", "2027-02-03")}, want: ReasonInvalidField, wantField: "request.stay.checkOut"},
		{name: "CheckOutBeforeCheckIn", base: hotelStarted, edits: []edit{set("request.stay.checkOut", "2027-02-01")}, want: ReasonInvalidField, wantField: "request.stay.checkOut"},
		{name: "CheckInNoSuchDay", base: hotelStarted, edits: []edit{set("request.stay.checkIn", "2027-02-30")}, want: ReasonInvalidField, wantField: "request.stay.checkIn"},
		{name: "CheckInShortMonth", base: hotelStarted, edits: []edit{set("request.stay.checkIn", "2027-2-03")}, want: ReasonInvalidField, wantField: "request.stay.checkIn"},
		{name: "CheckInTimestamp", base: hotelStarted, edits: []edit{set("request.stay.checkIn", "2027-02-03T00:00:00Z")}, want: ReasonInvalidField, wantField: "request.stay.checkIn"},
		{name: "StayAndSegments", base: hotelStarted, edits: []edit{set("request.segments", []any{map[string]any{"from": "IST", "to": "LHR", "date": "2027-01-14", "flight": "XQ101"}})}, want: ReasonInvalidField, wantField: "request.segments"},
		{name: "SegmentsEmpty", base: flightStarted, edits: []edit{set("request.segments", []any{})}, want: ReasonInvalidField, wantField: "request.segments"},
		{name: "SegmentsNotArray", base: flightStarted, edits: []edit{set("request.segments", "IST-LHR")}, want: ReasonInvalidField, wantField: "request.segments"},
		{name: "SegmentNotObject", base: flightStarted, edits: []edit{set("request.segments.0", 1)}, want: ReasonInvalidField, wantField: "request.segments[0]"},
		{name: "SegmentAirport", base: flightStarted, edits: []edit{set("request.segments.0.from", "IS")}, want: ReasonInvalidField, wantField: "request.segments[0].from"},
		{name: "SegmentFlight", base: flightStarted, edits: []edit{set("request.segments.0.flight", "XQ 101")}, want: ReasonInvalidField, wantField: "request.segments[0].flight"},
		{name: "SegmentDate", base: flightStarted, edits: []edit{set("request.segments.0.date", "14/01/2027")}, want: ReasonInvalidField, wantField: "request.segments[0].date"},
		{name: "OutcomeNotObject", base: succeeded, edits: []edit{set("outcome", "HTL-10101")}, want: ReasonInvalidField, wantField: "outcome"},
		{name: "ReferenceNotString", base: succeeded, edits: []edit{set("outcome.providerReference", 10101)}, want: ReasonInvalidField, wantField: "outcome.providerReference"},
		{name: "ReferenceEmpty", base: succeeded, edits: []edit{set("outcome.providerReference", "")}, want: ReasonInvalidField, wantField: "outcome.providerReference"},
		{name: "FailureCodeEmpty", base: failed, edits: []edit{set("outcome.failureCode", "")}, want: ReasonInvalidField, wantField: "outcome.failureCode"},
		{name: "RetryableString", base: failed, edits: []edit{set("outcome.retryable", "false")}, want: ReasonInvalidField, wantField: "outcome.retryable"},
		{name: "TimeoutClassEmpty", base: unknown, edits: []edit{set("outcome.timeoutClass", "")}, want: ReasonInvalidField, wantField: "outcome.timeoutClass"},
		{name: "TimeoutClassNotString", base: unknown, edits: []edit{set("outcome.timeoutClass", 5)}, want: ReasonInvalidField, wantField: "outcome.timeoutClass"},
		{name: "RequestSentString", base: unknown, edits: []edit{set("outcome.requestSent", "yes")}, want: ReasonInvalidField, wantField: "outcome.requestSent"},
		{name: "InvalidBeforeUnknownProvider", base: hotelStarted, opt: known, edits: []edit{set("provider", "sim-unknown"), set("operationVersion", 0)}, want: ReasonInvalidField, wantField: "operationVersion"},

		// Step 7.
		{name: "UnknownProvider", base: hotelStarted, opt: known, edits: []edit{set("provider", "sim-unknown")}, want: ReasonUnknownProvider, wantField: "provider"},
		{name: "ProviderCase", base: hotelStarted, opt: known, edits: []edit{set("provider", "SIM-HOTELS")}, want: ReasonUnknownProvider, wantField: "provider"},
		{name: "UnknownProviderBeforeKey", base: hotelStarted, opt: known, edits: []edit{set("provider", "sim-unknown"), set("idempotencyKey", "nope")}, want: ReasonUnknownProvider, wantField: "provider"},

		// Step 8.
		{name: "KeyEmpty", base: hotelStarted, edits: []edit{set("idempotencyKey", "")}, want: ReasonInvalidIdempotencyKey, wantField: "idempotencyKey"},
		{name: "KeyPersonalData", base: hotelStarted, edits: []edit{set("idempotencyKey", "book:jane.doe@example.com:v1")}, want: ReasonInvalidIdempotencyKey, wantField: "idempotencyKey"},
		{name: "KeyOtherPrefix", base: hotelStarted, edits: []edit{set("idempotencyKey", "cancel:bi_sc01:v1")}, want: ReasonInvalidIdempotencyKey, wantField: "idempotencyKey"},
		{name: "KeyOtherVersion", base: hotelStarted, edits: []edit{set("idempotencyKey", "book:bi_sc01:v2")}, want: ReasonInvalidIdempotencyKey, wantField: "idempotencyKey"},
		{name: "KeyOtherIntent", base: hotelStarted, edits: []edit{set("idempotencyKey", "book:bi_sc02:v1")}, want: ReasonInvalidIdempotencyKey, wantField: "idempotencyKey"},
		{name: "KeyOtherIntentOnCapture", base: authStarted, edits: []edit{set("idempotencyKey", "authorize:pay_sc14:v1")}, want: ReasonInvalidIdempotencyKey, wantField: "idempotencyKey"},
		{name: "KeyNoV", base: hotelStarted, edits: []edit{set("idempotencyKey", "book:bi_sc01:1")}, want: ReasonInvalidIdempotencyKey, wantField: "idempotencyKey"},
		{name: "KeyExtraPart", base: hotelStarted, edits: []edit{set("idempotencyKey", "book:bi_sc01:v1:x")}, want: ReasonInvalidIdempotencyKey, wantField: "idempotencyKey"},
		{name: "KeyBeforeStale", base: hotelStarted, opt: stale, edits: []edit{set("idempotencyKey", "book:bi_sc01:v9")}, want: ReasonInvalidIdempotencyKey, wantField: "idempotencyKey"},

		// Step 9.
		{name: "Stale", base: hotelStarted, opt: stale, want: ReasonStaleEvent, wantField: "occurredAt"},
		{name: "StaleByOffset", base: hotelStarted, opt: stale, edits: []edit{set("occurredAt", "2026-11-30T12:00:00+03:00")}, want: ReasonStaleEvent, wantField: "occurredAt"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			raw := mutate(t, tt.base, tt.edits...)
			a, err := DecodeAttempt(raw, tt.opt)
			checkVerdict(t, err, tt.want, tt.wantField)
			if err != nil && !cmp.Equal(a, Attempt{}) {
				t.Errorf("Attempt = %+v on error, want the zero value", a)
			}
		})
	}
}

func TestDecodeAttemptRecordLevel(t *testing.T) {
	t.Parallel()

	// pad returns hotelStarted padded with an unknown member to exactly n bytes.
	pad := func(n int) string {
		head := hotelStarted[:len(hotelStarted)-1] + `,"padding":"`
		return head + strings.Repeat("x", n-len(head)-2) + `"}`
	}
	tests := []struct {
		name string
		raw  string
		want Reason
	}{
		{"ExactlyMaxBytes", pad(MaxRecordBytes), ""},
		{"OneByteOver", pad(MaxRecordBytes + 1), ReasonTooLarge},
		{"OverBeforeParsing", strings.Repeat("\xff", MaxRecordBytes+1), ReasonTooLarge},
		{"Empty", "", ReasonInvalidJSON},
		{"Null", "null", ReasonInvalidJSON},
		{"Array", "[" + hotelStarted + "]", ReasonInvalidJSON},
		{"Number", "1", ReasonInvalidJSON},
		{"String", `"attempt.started"`, ReasonInvalidJSON},
		{"Truncated", hotelStarted[:70], ReasonInvalidJSON},
		{"TrailingObject", hotelStarted + "{}", ReasonInvalidJSON},
		{"TrailingComma", hotelStarted[:len(hotelStarted)-1] + ",}", ReasonInvalidJSON},
		{"TrailingWhitespaceOK", " \n" + hotelStarted + "\r\n\t", ""},
		{"ByteOrderMark", "\ufeff" + hotelStarted, ReasonInvalidJSON},
		{"NotUTF8", strings.Replace(hotelStarted, "tr_0001", "tr_\xff0001", 1), ReasonInvalidJSON},
		{"LoneSurrogate", strings.Replace(hotelStarted, "tr_0001", `tr_\ud800`, 1), ReasonInvalidJSON},
		{"NumberOutOfRange", strings.Replace(hotelStarted, `"recovery"`, `"x":1e400,"recovery"`, 1), ReasonInvalidJSON},
		{"DuplicateTopLevel", strings.Replace(hotelStarted, `"provider"`, `"tenantId":"t_other","provider"`, 1), ReasonInvalidJSON},
		{"DuplicateNested", strings.Replace(hotelStarted, `"currency":"EUR"`, `"currency":"EUR","value":"1.00"`, 1), ReasonInvalidJSON},
		{"DuplicateInUnknownMember", strings.Replace(hotelStarted, `"recovery"`, `"x":{"a":1,"a":2},"recovery"`, 1), ReasonInvalidJSON},
		{"DuplicateByEscape", strings.Replace(hotelStarted, `"provider"`, `"tenant\u0049d":"t_other","provider"`, 1), ReasonInvalidJSON},
		{"DuplicateInArray", strings.Replace(flightStarted, `"flight":"XQ101"`, `"flight":"XQ101","from":"SAW"`, 1), ReasonInvalidJSON},
		{"TooDeep", strings.Replace(hotelStarted, `"recovery"`, `"x":`+strings.Repeat("[", 20000)+strings.Repeat("]", 20000)+`,"recovery"`, 1), ReasonInvalidJSON},
		{"EscapedNamesMatch", strings.Replace(hotelStarted, `"tenantId"`, `"tenant\u0049d"`, 1), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			_, err := DecodeAttempt([]byte(tt.raw), DecodeOptions{})
			checkVerdict(t, err, tt.want, "")
			_, err = DecodeDecision([]byte(strings.Replace(tt.raw, hotelStarted, decision, 1)), DecodeOptions{})
			if tt.want == ReasonInvalidJSON || tt.want == ReasonTooLarge {
				checkVerdict(t, err, tt.want, "")
			}
		})
	}
}

// TestDecodeNullAndEmptyValue: a Kafka tombstone (nil value) and an empty value are invalid_json
// for both topics, and the detail says which.
func TestDecodeNullAndEmptyValue(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name   string
		raw    []byte
		detail string
	}{
		{"Null", nil, "record value is null (a Kafka tombstone)"},
		{"Empty", []byte{}, "record value is empty"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, errA := DecodeAttempt(tt.raw, DecodeOptions{})
			_, errD := DecodeDecision(tt.raw, DecodeOptions{})
			for _, err := range []error{errA, errD} {
				inv, ok := AsInvalid(err)
				if !ok || inv.Reason != ReasonInvalidJSON || inv.Detail != tt.detail {
					t.Errorf("error = %v, want invalid_json with detail %q", err, tt.detail)
				}
			}
		})
	}
}

func TestDecodeAttemptShapes(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name string
		raw  []byte
		want Attempt
	}{
		{
			name: "HotelStarted",
			raw:  []byte(hotelStarted),
			want: Attempt{
				SpecVersion: 1, EventID: "evt_0001", EventType: EventStarted,
				OccurredAt: mustTime(t, "2026-11-30T09:00:00Z"), TenantID: "t_globetrek",
				BookingIntentID: "bi_sc01", Operation: OpBook, OperationVersion: 1,
				IdempotencyKey: "book:bi_sc01:v1", Provider: "sim-hotels",
				Request: &Request{
					OfferVersion: "off_1:1", TravellerRef: "tr_0001",
					Amount: &Amount{Value: "249.90", Currency: "EUR"},
					Stay:   &Stay{PropertyID: "h_1042", CheckIn: "2027-02-03", CheckOut: "2027-02-06"},
				},
				Recovery:   Recovery{ClientReference: "cr_sc01", CorrelationID: "corr_sc01"},
				KeySubject: "bi_sc01",
			},
		},
		{
			name: "FlightStartedNumberAmount",
			raw:  mutate(t, flightStarted, set("request.amount.value", json.Number("420.0"))),
			want: Attempt{
				SpecVersion: 1, EventID: "evt_0011", EventType: EventStarted,
				OccurredAt: mustTime(t, "2026-11-30T09:00:09Z"), TenantID: "t_globetrek",
				BookingIntentID: "bi_sc06", Operation: OpBook, OperationVersion: 1,
				IdempotencyKey: "book:bi_sc06:v1", Provider: "sim-air",
				Request: &Request{
					OfferVersion: "off_2:1", TravellerRef: "tr_0007",
					Amount:   &Amount{Value: "420.0", Currency: "EUR"},
					Segments: []Segment{{From: "IST", To: "LHR", Date: "2027-01-14", Flight: "XQ101"}},
				},
				Recovery:   Recovery{ClientReference: "cr_sc06"},
				KeySubject: "bi_sc06",
			},
		},
		{
			name: "Cancel",
			raw:  []byte(cancelStarted),
			want: Attempt{
				SpecVersion: 1, EventID: "evt_0036", EventType: EventStarted,
				OccurredAt: mustTime(t, "2026-11-30T09:00:35Z"), TenantID: "t_globetrek",
				BookingIntentID: "bi_sc15", Operation: OpCancel, OperationVersion: 1,
				IdempotencyKey: "cancel:bk_sc15:v1", Provider: "sim-hotels",
				Request: &Request{OfferVersion: "off_15:1", TravellerRef: "tr_0016",
					Amount: &Amount{Value: "0", Currency: "EUR"}},
				Recovery:   Recovery{ClientReference: "cr_sc15_cancel", ProviderReference: "HTL-15150"},
				KeySubject: "bk_sc15",
			},
		},
		{
			name: "Failed",
			raw:  []byte(failed),
			want: Attempt{
				SpecVersion: 1, EventID: "evt_0030", EventType: EventFailed,
				OccurredAt: mustTime(t, "2026-11-30T09:00:29Z"), TenantID: "t_globetrek",
				BookingIntentID: "bi_sc13", Operation: OpBook, OperationVersion: 1,
				IdempotencyKey: "book:bi_sc13:v1", Provider: "sim-hotels",
				Outcome:    &Outcome{FailureCode: "SOLD_OUT", Retryable: ptr(false)},
				KeySubject: "bi_sc13",
			},
		},
		{
			name: "OutcomeUnknownMembersOfOtherTypesIgnored",
			raw:  mutate(t, unknown, set("outcome.failureCode", "X"), set("outcome.retryable", "junk"), set("outcome.requestSent", false)),
			want: Attempt{
				SpecVersion: 1, EventID: "evt_0018", EventType: EventOutcomeUnknown,
				OccurredAt: mustTime(t, "2026-11-30T09:00:45Z"), TenantID: "t_globetrek",
				BookingIntentID: "bi_sc09", Operation: OpBook, OperationVersion: 1,
				IdempotencyKey: "book:bi_sc09:v1", Provider: "sim-hotels",
				Outcome: &Outcome{ProviderReference: "HTL-90909", TimeoutClass: TimeoutBusiness,
					RequestSent: ptr(false)},
				KeySubject: "bi_sc09",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			got, err := DecodeAttempt(tt.raw, DecodeOptions{KnownProvider: knownSampleProvider})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestDecodeAttemptRoundTrip: every valid sample survives decode → json.Marshal → decode.
func TestDecodeAttemptRoundTrip(t *testing.T) {
	t.Parallel()

	for i, line := range sampleLines(t, "attempts.jsonl") {
		a, err := DecodeAttempt(line, DecodeOptions{})
		if err != nil {
			continue
		}
		b, err := json.Marshal(a)
		if err != nil {
			t.Fatalf("line %d: %v", i+1, err)
		}
		back, err := DecodeAttempt(b, DecodeOptions{})
		if err != nil {
			t.Fatalf("line %d: re-decode: %v", i+1, err)
		}
		if diff := cmp.Diff(a, back); diff != "" {
			t.Errorf("line %d (-first +second):\n%s", i+1, diff)
		}
	}
}

func TestDecodeDecision(t *testing.T) {
	t.Parallel()

	occurred := mustTime(t, "2026-11-30T09:01:30Z")
	stale := DecodeOptions{MinOccurredAt: occurred.Add(time.Hour)}
	tests := []struct {
		name      string
		edits     []edit
		opt       DecodeOptions
		want      Reason
		wantField string
		check     func(t *testing.T, d Decision)
	}{
		{name: "Confirmed", check: func(t *testing.T, d Decision) {
			if d.Decision != DecisionConfirmed || d.ProviderReference != "LEG-2020" || !d.Retryable || d.KeySubject != "bi_sc20" {
				t.Errorf("got %+v", d)
			}
		}},
		{name: "FailedWithoutReference", edits: []edit{set("decision", "FAILED"), del("providerReference")}, check: func(t *testing.T, d Decision) {
			if d.Decision != DecisionFailed || d.ProviderReference != "" || !d.Retryable {
				t.Errorf("got %+v", d)
			}
		}},
		{name: "NotRetryable", edits: []edit{set("decision", "FAILED"), set("retryable", false)}, check: func(t *testing.T, d Decision) {
			if d.Retryable {
				t.Errorf("Retryable = true, want false")
			}
		}},
		{name: "RetryableNullIsDefault", edits: []edit{set("retryable", nil)}, check: func(t *testing.T, d Decision) {
			if !d.Retryable {
				t.Errorf("Retryable = false, want true")
			}
		}},
		{name: "EscalationID", edits: []edit{set("escalationId", "esc_1")}, check: func(t *testing.T, d Decision) {
			if d.EscalationID != "esc_1" {
				t.Errorf("EscalationID = %q", d.EscalationID)
			}
		}},
		{name: "RefundKey", edits: []edit{set("idempotencyKey", "refund:pay_456:v2")}, check: func(t *testing.T, d Decision) {
			if d.Operation != OpRefund || d.OperationVersion != 2 || d.KeySubject != "pay_456" {
				t.Errorf("got %s %d %s", d.Operation, d.OperationVersion, d.KeySubject)
			}
		}},
		{name: "NoProviderCheck", opt: DecodeOptions{KnownProvider: func(string) bool { return false }}},
		{name: "SpecVersion2", edits: []edit{set("specVersion", 2)}, want: ReasonUnsupportedSpecVersion, wantField: "specVersion"},
		{name: "EventTypeAbsent", edits: []edit{del("eventType")}, want: ReasonMissingField, wantField: "eventType"},
		{name: "AttemptEventType", edits: []edit{set("eventType", "attempt.started")}, want: ReasonUnknownEventType, wantField: "eventType"},
		{name: "DecisionAbsent", edits: []edit{del("decision")}, want: ReasonMissingField, wantField: "decision"},
		{name: "ReferenceAbsentWhenConfirmed", edits: []edit{del("providerReference")}, want: ReasonMissingField, wantField: "providerReference"},
		{name: "ActorAbsent", edits: []edit{del("actor")}, want: ReasonMissingField, wantField: "actor"},
		{name: "ReasonAbsent", edits: []edit{del("reason")}, want: ReasonMissingField, wantField: "reason"},
		{name: "KeyAbsent", edits: []edit{del("idempotencyKey")}, want: ReasonMissingField, wantField: "idempotencyKey"},
		{name: "MissingBeatsInvalid", edits: []edit{set("decision", "MAYBE"), del("actor")}, want: ReasonMissingField, wantField: "actor"},
		{name: "DecisionUnknown", edits: []edit{set("decision", "MAYBE")}, want: ReasonInvalidField, wantField: "decision"},
		{name: "DecisionLowerCase", edits: []edit{set("decision", "confirmed")}, want: ReasonInvalidField, wantField: "decision"},
		{name: "ReasonEmpty", edits: []edit{set("reason", "")}, want: ReasonInvalidField, wantField: "reason"},
		{name: "EscalationIDNotString", edits: []edit{set("escalationId", 5)}, want: ReasonInvalidField, wantField: "escalationId"},
		{name: "RetryableString", edits: []edit{set("retryable", "no")}, want: ReasonInvalidField, wantField: "retryable"},
		{name: "TenantIDInvalid", edits: []edit{set("tenantId", "t/globetrek")}, want: ReasonInvalidField, wantField: "tenantId"},
		{name: "OccurredAtInvalid", edits: []edit{set("occurredAt", "now")}, want: ReasonInvalidField, wantField: "occurredAt"},
		{name: "Stale", opt: stale, want: ReasonStaleEvent, wantField: "occurredAt"},
		{name: "StaleBeforeKey", opt: stale, edits: []edit{set("idempotencyKey", "nope")}, want: ReasonStaleEvent, wantField: "occurredAt"},
		{name: "KeyFormat", edits: []edit{set("idempotencyKey", "book:bi_sc20")}, want: ReasonInvalidIdempotencyKey, wantField: "idempotencyKey"},
		{name: "KeyUnknownPrefix", edits: []edit{set("idempotencyKey", "rebook:bi_sc20:v1")}, want: ReasonInvalidIdempotencyKey, wantField: "idempotencyKey"},
		{name: "KeyOtherIntent", edits: []edit{set("idempotencyKey", "book:bi_sc21:v1")}, want: ReasonInvalidIdempotencyKey, wantField: "idempotencyKey"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			d, err := DecodeDecision(mutate(t, decision, tt.edits...), tt.opt)
			checkVerdict(t, err, tt.want, tt.wantField)
			if err != nil && !cmp.Equal(d, Decision{}) {
				t.Errorf("Decision = %+v on error, want the zero value", d)
			}
			if tt.check != nil {
				tt.check(t, d)
			}
		})
	}
}

func TestParseKey(t *testing.T) {
	t.Parallel()

	tests := []struct {
		key                  string
		wantPrefix, wantSubj string
		wantVersion          int
		wantErr              bool
	}{
		{key: "book:bi_123:v1", wantPrefix: "book", wantSubj: "bi_123", wantVersion: 1},
		{key: "capture:bi_123:v1", wantPrefix: "capture", wantSubj: "bi_123", wantVersion: 1},
		{key: "cancel:bk_987:v1", wantPrefix: "cancel", wantSubj: "bk_987", wantVersion: 1},
		{key: "refund:pay_456:v12", wantPrefix: "refund", wantSubj: "pay_456", wantVersion: 12},
		{key: "authorize:A-b_9:v2147483647", wantPrefix: "authorize", wantSubj: "A-b_9", wantVersion: 2147483647},
		{key: "modify:" + strings.Repeat("s", 64) + ":v3", wantPrefix: "modify", wantSubj: strings.Repeat("s", 64), wantVersion: 3},
		{key: "", wantErr: true},
		{key: "book:bi_123", wantErr: true},
		{key: "book:bi_123:v1:x", wantErr: true},
		{key: "BOOK:bi_123:v1", wantErr: true},
		{key: "payment:bi_123:v1", wantErr: true},
		{key: "book::v1", wantErr: true},
		{key: "book:" + strings.Repeat("s", 65) + ":v1", wantErr: true},
		{key: "book:jane.doe@example.com:v1", wantErr: true},
		{key: "book:bi 123:v1", wantErr: true},
		{key: "book:bi_123:v0", wantErr: true},
		{key: "book:bi_123:v01", wantErr: true},
		{key: "book:bi_123:V1", wantErr: true},
		{key: "book:bi_123:1", wantErr: true},
		{key: "book:bi_123:v-1", wantErr: true},
		{key: "book:bi_123:v+1", wantErr: true},
		{key: "book:bi_123:v2147483648", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%q", tt.key), func(t *testing.T) {
			t.Parallel()

			prefix, subject, version, err := ParseKey(tt.key)
			if tt.wantErr {
				checkVerdict(t, err, ReasonInvalidIdempotencyKey, "idempotencyKey")
				if tt.key != "" && strings.Contains(err.Error(), tt.key) {
					t.Errorf("error %q quotes the key", err)
				}
				return
			}
			if err != nil || prefix != tt.wantPrefix || subject != tt.wantSubj || version != tt.wantVersion {
				t.Errorf("ParseKey = %q, %q, %d, %v; want %q, %q, %d", prefix, subject, version, err,
					tt.wantPrefix, tt.wantSubj, tt.wantVersion)
			}
		})
	}
}

func TestInvalidError(t *testing.T) {
	t.Parallel()

	_, err := MinorUnits("1", "eur")
	const want = "events: invalid_field: amount.currency: must be an upper-case ISO 4217 code"
	if err == nil || err.Error() != want {
		t.Fatalf("Error() = %v, want %q", err, want)
	}
	wrapped := fmt.Errorf("topic %s offset %d: %w", TopicAttempts, 7, err)
	ie, ok := AsInvalid(wrapped)
	if !ok || ie.Reason != ReasonInvalidField || ie.Field != "amount.currency" ||
		ie.Detail != "amount.currency: must be an upper-case ISO 4217 code" {
		t.Errorf("AsInvalid = %+v, %v", ie, ok)
	}
	if _, ok := AsInvalid(fmt.Errorf("other")); ok {
		t.Error("AsInvalid matched a plain error")
	}
	if _, ok := AsInvalid(nil); ok {
		t.Error("AsInvalid matched nil")
	}
}
