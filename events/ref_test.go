package events

// This file keeps the decode path as it was before its CPU was cut (branch decodecpu): the
// reference the new code must equal byte for byte (ref_cmp_test.go). Identifiers are the old
// ones with a ref prefix; the types, enums, constants, invalid and CurrencyExponent are shared.

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/big"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/shopspring/decimal"
)

var (
	// idPattern is the format of tenantId, bookingIntentId and key subjects
	// (docs/design.md#identities).
	refIdPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)
	// keyVersionPattern is the vN part of a key: N ≥ 1 without leading zeros.
	refKeyVersionPattern = regexp.MustCompile(`^v[1-9][0-9]{0,9}$`)
	// iataAirportPattern is an IATA airport code, either case.
	refIataAirportPattern = regexp.MustCompile(`^[A-Za-z]{3}$`)
	// flightPattern is an IATA flight designator: airline code, 1–4 digits, optional suffix.
	refFlightPattern = regexp.MustCompile(`^[A-Za-z0-9]{2}[0-9]{1,4}[A-Za-z]?$`)
)

// maxEventIDBytes bounds eventId, which is part of processed_event's primary key.

// DecodeAttempt decodes and validates one record value of booking.attempts.v1.
//
// The checks run in the normative order of docs/design.md#contract-v1 and the first failing step
// decides the error, an *InvalidError:
//
//  1. too_large: len(raw) > MaxRecordBytes, before parsing;
//  2. invalid_json: not UTF-8, not JSON, not an object, a duplicate key at any depth, or outside
//     I-JSON (lone surrogate escape, number beyond float64) — so every accepted record has a
//     CanonicalHash;
//  3. specVersion: absent or null missing_field; anything but the integer literal 1
//     unsupported_spec_version;
//  4. eventType: absent or null missing_field; not one of AttemptEventTypes unknown_event_type;
//  5. missing_field: a required member absent or null (request on started; outcome on the other
//     three with outcome.providerReference on succeeded, failureCode and retryable on failed,
//     timeoutClass on outcome_unknown; request's offerVersion, travellerRef, amount.value,
//     amount.currency and, for BOOK and MODIFY, one of stay or segments with all their members);
//  6. invalid_field: wrong type, format, range or enum (ids [A-Za-z0-9_-]{1,64}; operation one
//     of the six; operationVersion an integer literal 1..2^31−1; occurredAt RFC 3339; required
//     strings non-empty; amount exact in the currency's minor units, ≥ 0 and ≤ MaxMinorUnits;
//     currency in the ISO 4217 table; dates YYYY-MM-DD with checkOut after checkIn; both stay
//     and segments; segments empty; airports three letters; flight an IATA designator;
//     requestSent true, false or null; retryable a boolean; recovery members strings);
//  7. unknown_provider: opt.KnownProvider(provider) is false;
//  8. invalid_idempotency_key: the key is not operation's prefix, a subject
//     [A-Za-z0-9_-]{1,64} (the bookingIntentId for BOOK, PAYMENT_AUTHORIZE and PAYMENT_CAPTURE)
//     and v<operationVersion>;
//  9. stale_event: occurredAt before opt.MinOccurredAt.
//
// Within steps 5 and 6 every member is checked, and a missing member anywhere outranks an
// invalid one. Member names are matched exactly (case-sensitive); unknown members are ignored,
// and so is request on outcome events and outcome on attempt.started. On error the returned
// Attempt is the zero value.

// DecodeAttemptHashed is DecodeAttempt that also returns CanonicalHash(raw), computed from the
// same RFC 8785 pass that validation makes (one canonicalisation per record, not two).
func refDecodeAttemptHashed(raw []byte, opt DecodeOptions) (Attempt, string, error) {
	o, canonical, err := refParseRecord(raw)
	if err != nil {
		return Attempt{}, "", err
	}
	a, err := refDecodeAttemptObject(o, opt)
	if err != nil {
		return Attempt{}, "", err
	}
	return a, refSha256Hex(canonical), nil
}

func refDecodeAttemptObject(o refObject, opt DecodeOptions) (Attempt, error) {
	et, err := refCheckHeader(o, AttemptEventTypes())
	if err != nil {
		return Attempt{}, err
	}

	var v refValidator
	a := Attempt{SpecVersion: SpecVersion, EventType: et}
	a.EventID, a.OccurredAt, a.TenantID, a.BookingIntentID = v.envelope(o)
	if s := v.str(o, "", "operation", true); s != "" && !Operation(s).Valid() {
		v.bad("operation", "must be one of "+refJoinOps())
	} else {
		a.Operation = Operation(s)
	}
	a.OperationVersion = v.version(o, "", "operationVersion")
	a.IdempotencyKey, _ = v.rawString(o, "", "idempotencyKey", true)
	a.Provider = v.str(o, "", "provider", true)
	a.Recovery = v.recovery(o)
	if et == EventStarted {
		a.Request = v.request(o, a.Operation)
	} else {
		a.Outcome = v.outcome(o, et)
	}
	if v.err != nil {
		return Attempt{}, v.err
	}

	if opt.KnownProvider != nil && !opt.KnownProvider(a.Provider) {
		return Attempt{}, invalid(ReasonUnknownProvider, "provider", "not in the capability map")
	}
	prefix, subject, version, err := refParseKey(a.IdempotencyKey)
	switch {
	case err != nil:
		return Attempt{}, err
	case prefix != a.Operation.KeyPrefix():
		return Attempt{}, refKeyError("prefix must be " + a.Operation.KeyPrefix() + " for the operation")
	case version != a.OperationVersion:
		return Attempt{}, refKeyError("version must equal operationVersion")
	case a.Operation.SubjectIsIntent() && subject != a.BookingIntentID:
		return Attempt{}, refKeyError("subject must be the bookingIntentId for this operation")
	}
	a.KeySubject = subject
	if err := refCheckStale(a.OccurredAt, opt); err != nil {
		return Attempt{}, err
	}
	return a, nil
}

// DecodeDecision decodes and validates one record value of booking.manual-decisions.v1
// (docs/design.md#cause-manual-decision): steps 1–6 as in DecodeAttempt with eventType
// decision.recorded only, then step 9 (stale_event), then the key's format
// (invalid_idempotency_key: a known prefix, a subject [A-Za-z0-9_-]{1,64} that is the
// bookingIntentId for book, authorize and capture, and vN with N ≥ 1).
//
// Required: specVersion, eventId, eventType, occurredAt, tenantId, bookingIntentId,
// idempotencyKey, decision (CONFIRMED or FAILED), actor, reason, and providerReference when the
// decision is CONFIRMED. Optional: escalationId (string), retryable (boolean, default true).
// Provider is not checked (step 7 does not apply). On error the returned Decision is the zero
// value and the error an *InvalidError.

// DecodeDecisionHashed is DecodeDecision that also returns CanonicalHash(raw) from the same
// canonicalisation pass.
func refDecodeDecisionHashed(raw []byte, opt DecodeOptions) (Decision, string, error) {
	o, canonical, err := refParseRecord(raw)
	if err != nil {
		return Decision{}, "", err
	}
	d, err := refDecodeDecisionObject(o, opt)
	if err != nil {
		return Decision{}, "", err
	}
	return d, refSha256Hex(canonical), nil
}

func refDecodeDecisionObject(o refObject, opt DecodeOptions) (Decision, error) {
	et, err := refCheckHeader(o, []EventType{EventDecisionRecorded})
	if err != nil {
		return Decision{}, err
	}

	var v refValidator
	d := Decision{SpecVersion: SpecVersion, EventType: et, Retryable: true}
	d.EventID, d.OccurredAt, d.TenantID, d.BookingIntentID = v.envelope(o)
	d.IdempotencyKey, _ = v.rawString(o, "", "idempotencyKey", true)
	d.Decision = v.str(o, "", "decision", true)
	if d.Decision != "" && d.Decision != DecisionConfirmed && d.Decision != DecisionFailed {
		v.bad("decision", "must be CONFIRMED or FAILED")
	}
	d.ProviderReference = v.str(o, "", "providerReference", d.Decision == DecisionConfirmed)
	d.Actor = v.str(o, "", "actor", true)
	d.Reason = v.str(o, "", "reason", true)
	d.EscalationID = v.str(o, "", "escalationId", false)
	if b := v.boolean(o, "", "retryable", false); b != nil {
		d.Retryable = *b
	}
	if v.err != nil {
		return Decision{}, v.err
	}

	if err := refCheckStale(d.OccurredAt, opt); err != nil {
		return Decision{}, err
	}
	prefix, subject, version, err := refParseKey(d.IdempotencyKey)
	if err != nil {
		return Decision{}, err
	}
	op, _ := OperationForKeyPrefix(prefix)
	if op.SubjectIsIntent() && subject != d.BookingIntentID {
		return Decision{}, refKeyError("subject must be the bookingIntentId for this operation")
	}
	d.Operation, d.OperationVersion, d.KeySubject = op, version, subject
	return d, nil
}

// ParseKey splits an idempotency key "prefix:subject:vN" (docs/design.md#identities): prefix one of
// book, authorize, capture, modify, cancel, refund; subject [A-Za-z0-9_-]{1,64}; N an integer
// 1..2^31−1 without leading zeros. It does not check the subject against an intent. Errors are
// *InvalidError{Reason: ReasonInvalidIdempotencyKey, Field: "idempotencyKey"} and never quote
// the key.
func refParseKey(key string) (prefix, subject string, version int, err error) {
	parts := strings.Split(key, ":")
	if len(parts) != 3 {
		return "", "", 0, refKeyError("must be prefix:subject:vN")
	}
	if _, ok := OperationForKeyPrefix(parts[0]); !ok {
		return "", "", 0, refKeyError("prefix must be one of book, authorize, capture, modify, cancel, refund")
	}
	if !refIdPattern.MatchString(parts[1]) {
		return "", "", 0, refKeyError("subject must match [A-Za-z0-9_-]{1,64}")
	}
	n, convErr := strconv.ParseInt(strings.TrimPrefix(parts[2], "v"), 10, 32)
	if !refKeyVersionPattern.MatchString(parts[2]) || convErr != nil {
		return "", "", 0, refKeyError("version must be v1 to v2147483647")
	}
	return parts[0], parts[1], int(n), nil
}

func refKeyError(desc string) *InvalidError {
	return invalid(ReasonInvalidIdempotencyKey, "idempotencyKey", desc)
}

// object is a JSON object with its members still raw. Keys are exact (encoding/json only folds
// case when decoding into structs).
type refObject map[string]json.RawMessage

// parseRecord runs steps 1 and 2; a null value (a tombstone) or an empty one is invalid_json. Canonicalisation rejects duplicate keys at any depth, bad
// syntax, trailing data, lone surrogates and numbers beyond float64; splitObject then insists
// on an object.
func refParseRecord(raw []byte) (refObject, []byte, error) {
	switch {
	case raw == nil:
		return nil, nil, invalid(ReasonInvalidJSON, "", "record value is null (a Kafka tombstone)")
	case len(raw) == 0:
		return nil, nil, invalid(ReasonInvalidJSON, "", "record value is empty")
	}
	if len(raw) > MaxRecordBytes {
		return nil, nil, invalid(ReasonTooLarge, "", fmt.Sprintf("record exceeds %d bytes", MaxRecordBytes))
	}
	if !utf8.Valid(raw) {
		return nil, nil, invalid(ReasonInvalidJSON, "", "record is not UTF-8")
	}

	canonical, err := refCanonicalize(raw)
	if err != nil {
		return nil, nil, invalid(ReasonInvalidJSON, "",
			"record is not I-JSON (syntax, duplicate key, lone surrogate or number range)")
	}
	o, ok := refSplitObject(raw)
	if !ok {
		return nil, nil, invalid(ReasonInvalidJSON, "", "record is not a JSON object")
	}
	return o, canonical, nil
}

// checkHeader runs steps 3 and 4: specVersion, then eventType against allowed.
func refCheckHeader(o refObject, allowed []EventType) (EventType, error) {
	raw := o["specVersion"]
	if refIsAbsent(raw) {
		return "", invalid(ReasonMissingField, "specVersion", "required")
	}
	if n, err := strconv.Atoi(string(raw)); err != nil || n != SpecVersion {
		return "", invalid(ReasonUnsupportedSpecVersion, "specVersion", "must be the integer 1")
	}
	raw = o["eventType"]
	if refIsAbsent(raw) {
		return "", invalid(ReasonMissingField, "eventType", "required")
	}
	s, ok := refStringValue(raw)
	if !ok || !slices.Contains(allowed, EventType(s)) {
		return "", invalid(ReasonUnknownEventType, "eventType", "not an event type of this topic")
	}
	return EventType(s), nil
}

// checkStale runs step 9.
func refCheckStale(at time.Time, opt DecodeOptions) error {
	if !opt.MinOccurredAt.IsZero() && at.Before(opt.MinOccurredAt) {
		return invalid(ReasonStaleEvent, "occurredAt", "before the oldest kept processed_event day")
	}
	return nil
}

func refIsAbsent(raw json.RawMessage) bool { return len(raw) == 0 || string(raw) == "null" }

func refJoin(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

func refJoinOps() string {
	var names []string
	for _, o := range Operations() {
		names = append(names, string(o))
	}
	return strings.Join(names, ", ")
}

// validator runs steps 5 and 6 over the whole record and keeps the verdict: the first
// missing_field if any, else the first invalid_field.
type refValidator struct{ err *InvalidError }

func (v *refValidator) set(e *InvalidError) {
	if v.err == nil || (v.err.Reason == ReasonInvalidField && e.Reason == ReasonMissingField) {
		v.err = e
	}
}

func (v *refValidator) fail(r Reason, field, desc string) { v.set(invalid(r, field, desc)) }

func (v *refValidator) missing(field, desc string) { v.fail(ReasonMissingField, field, desc) }

func (v *refValidator) bad(field, desc string) { v.fail(ReasonInvalidField, field, desc) }

// get returns the member name of o, nil when absent or null (recorded as missing when
// required), and its path.
func (v *refValidator) get(o refObject, path, name string, required bool) (json.RawMessage, string) {
	p := refJoin(path, name)
	raw := o[name]
	if refIsAbsent(raw) {
		if required {
			v.missing(p, "required")
		}
		return nil, p
	}
	return raw, p
}

// rawString returns a string member and whether it is present and a string; "" when absent.
func (v *refValidator) rawString(o refObject, path, name string, required bool) (string, bool) {
	raw, p := v.get(o, path, name, required)
	if raw == nil {
		return "", false
	}
	s, ok := refStringValue(raw)
	if !ok {
		v.bad(p, "must be a string")
		return "", false
	}
	return s, true
}

// stringValue returns the value of raw when it is a JSON string. raw is a member of a record
// parseRecord accepted, so it is one valid JSON value: a string without escapes is its bytes
// between the quotes; one with escapes is unquoted by encoding/json.
func refStringValue(raw []byte) (string, bool) {
	if len(raw) < 2 || raw[0] != '"' {
		return "", false
	}
	if bytes.IndexByte(raw, '\\') < 0 {
		return string(raw[1 : len(raw)-1]), true
	}
	var s string
	return s, json.Unmarshal(raw, &s) == nil
}

// str returns a string member; "" when absent. A required one must be non-empty.
func (v *refValidator) str(o refObject, path, name string, required bool) string {
	s, ok := v.rawString(o, path, name, required)
	if ok && required && s == "" {
		v.bad(refJoin(path, name), "must not be empty")
	}
	return s
}

// match returns a required string member that must match re.
func (v *refValidator) match(o refObject, path, name string, re *regexp.Regexp, desc string) string {
	s := v.str(o, path, name, true)
	if s != "" && !re.MatchString(s) {
		v.bad(refJoin(path, name), desc)
	}
	return s
}

// date returns a required YYYY-MM-DD member and its parsed value.
func (v *refValidator) date(o refObject, path, name string) (string, time.Time) {
	s := v.str(o, path, name, true)
	if s == "" {
		return "", time.Time{}
	}
	t, err := time.Parse(time.DateOnly, s)
	if err != nil {
		v.bad(refJoin(path, name), "must be a date YYYY-MM-DD")
	}
	return s, t
}

// version returns a required integer member in 1..2^31−1, written as an integer literal.
func (v *refValidator) version(o refObject, path, name string) int {
	raw, p := v.get(o, path, name, true)
	if raw == nil {
		return 0
	}
	n, err := strconv.ParseInt(string(raw), 10, 32)
	if err != nil || n < 1 || n > math.MaxInt32 {
		v.bad(p, "must be an integer from 1 to 2147483647")
		return 0
	}
	return int(n)
}

// boolean returns a boolean member; nil when absent or null.
func (v *refValidator) boolean(o refObject, path, name string, required bool) *bool {
	raw, p := v.get(o, path, name, required)
	switch string(raw) {
	case "":
		return nil
	case "true", "false":
		b := string(raw) == "true"
		return &b
	}
	v.bad(p, "must be true or false")
	return nil
}

// obj returns an object member; nil when absent or null.
func (v *refValidator) obj(o refObject, path, name string, required bool) refObject {
	raw, p := v.get(o, path, name, required)
	if raw == nil {
		return nil
	}
	return v.asObject(raw, p)
}

func (v *refValidator) asObject(raw json.RawMessage, p string) refObject {
	m, ok := refSplitObject(raw)
	if !ok {
		v.bad(p, "must be an object")
		return nil
	}
	return m
}

// envelope checks the members common to both input topics.
func (v *refValidator) envelope(o refObject) (eventID string, at time.Time, tenant, intent string) {
	eventID = v.str(o, "", "eventId", true)
	if len(eventID) > maxEventIDBytes {
		v.bad("eventId", fmt.Sprintf("must be at most %d bytes", maxEventIDBytes))
	}
	if s := v.str(o, "", "occurredAt", true); s != "" {
		var err error
		if at, err = time.Parse(time.RFC3339, s); err != nil {
			v.bad("occurredAt", "must be an RFC 3339 timestamp")
		}
	}
	tenant = v.match(o, "", "tenantId", refIdPattern, "must match [A-Za-z0-9_-]{1,64}")
	intent = v.match(o, "", "bookingIntentId", refIdPattern, "must match [A-Za-z0-9_-]{1,64}")
	return eventID, at, tenant, intent
}

func (v *refValidator) recovery(o refObject) Recovery {
	ro := v.obj(o, "", "recovery", false)
	if ro == nil {
		return Recovery{}
	}
	return Recovery{
		ClientReference:        v.str(ro, "recovery", "clientReference", false),
		ProviderSessionID:      v.str(ro, "recovery", "providerSessionId", false),
		CorrelationID:          v.str(ro, "recovery", "correlationId", false),
		PaymentReference:       v.str(ro, "recovery", "paymentReference", false),
		ProviderReference:      v.str(ro, "recovery", "providerReference", false),
		ProviderIdempotencyKey: v.str(ro, "recovery", "providerIdempotencyKey", false),
	}
}

// request checks attempt.started's request; stay and segments only for BOOK and MODIFY.
func (v *refValidator) request(o refObject, op Operation) *Request {
	ro := v.obj(o, "", "request", true)
	if ro == nil {
		return nil
	}
	r := &Request{
		OfferVersion: v.str(ro, "request", "offerVersion", true),
		TravellerRef: v.str(ro, "request", "travellerRef", true),
		Amount:       v.amount(ro),
	}
	if !op.HasFingerprint() {
		return r
	}
	hasStay, hasSegments := !refIsAbsent(ro["stay"]), !refIsAbsent(ro["segments"])
	switch {
	case !hasStay && !hasSegments:
		v.missing("request.stay", "one of stay or segments is required")
	case hasStay && hasSegments:
		v.bad("request.segments", "must not be sent together with stay")
	case hasStay:
		r.Stay = v.stay(ro)
	default:
		r.Segments = v.segments(ro)
	}
	return r
}

func (v *refValidator) amount(ro refObject) *Amount {
	const p = "request.amount"
	ao := v.obj(ro, "request", "amount", true)
	if ao == nil {
		return nil
	}
	a := &Amount{}
	raw, vp := v.get(ao, p, "value", true)
	typed := false
	switch {
	case raw == nil:
	case raw[0] == '"':
		a.Value, typed = refStringValue(raw)
	case raw[0] == '-' || raw[0] >= '0' && raw[0] <= '9':
		a.Value, typed = string(raw), true
	}
	if raw != nil && !typed {
		v.bad(vp, "must be a decimal string or a JSON number")
	}
	a.Currency = v.str(ao, p, "currency", true)
	if typed && a.Currency != "" {
		if _, err := refMinorUnitsAt(a.Value, a.Currency, p); err != nil {
			v.set(err)
		}
	}
	return a
}

func (v *refValidator) stay(ro refObject) *Stay {
	const p = "request.stay"
	so := v.obj(ro, "request", "stay", true)
	if so == nil {
		return nil
	}
	s := &Stay{PropertyID: v.str(so, p, "propertyId", true)}
	var in, out time.Time
	s.CheckIn, in = v.date(so, p, "checkIn")
	s.CheckOut, out = v.date(so, p, "checkOut")
	if !in.IsZero() && !out.IsZero() && !out.After(in) {
		v.bad(p+".checkOut", "must be after checkIn")
	}
	return s
}

func (v *refValidator) segments(ro refObject) []Segment {
	raw, p := v.get(ro, "request", "segments", true)
	elems, ok := refSplitArray(raw)
	if raw == nil || !ok {
		v.bad(p, "must be an array")
		return nil
	}
	if len(elems) == 0 {
		v.bad(p, "must not be empty")
		return nil
	}
	segs := make([]Segment, 0, len(elems))
	for i, e := range elems {
		ep := fmt.Sprintf("%s[%d]", p, i)
		so := v.asObject(e, ep)
		if so == nil {
			continue
		}
		s := Segment{
			From: v.match(so, ep, "from", refIataAirportPattern, "must be a three-letter IATA code"),
			To:   v.match(so, ep, "to", refIataAirportPattern, "must be a three-letter IATA code"),
		}
		s.Date, _ = v.date(so, ep, "date")
		s.Flight = v.match(so, ep, "flight", refFlightPattern, "must be an IATA flight designator")
		segs = append(segs, s)
	}
	return segs
}

// outcome checks the outcome members defined for et.
func (v *refValidator) outcome(o refObject, et EventType) *Outcome {
	const p = "outcome"
	oo := v.obj(o, "", p, true)
	if oo == nil {
		return nil
	}
	out := &Outcome{ProviderReference: v.str(oo, p, "providerReference", et == EventSucceeded)}
	switch et {
	case EventFailed:
		out.FailureCode = v.str(oo, p, "failureCode", true)
		out.Retryable = v.boolean(oo, p, "retryable", true)
	case EventOutcomeUnknown:
		out.TimeoutClass = TimeoutClass(v.str(oo, p, "timeoutClass", true))
		out.RequestSent = v.boolean(oo, p, "requestSent", false)
	}
	return out
}

// splitObject returns the members of raw when it is a JSON object: each name unquoted, each
// value its raw bytes (sharing raw's memory). raw must be valid JSON without duplicate member
// names at any depth — a record parseRecord's canonicalisation accepted, or a value inside one
// — and for such input the result is what json.Unmarshal into map[string]json.RawMessage
// returns, in one pass without reflection (the decode path's largest cost,
// docs/performance.md "Where the end-to-end time goes"). ok is false when raw is not an object.
func refSplitObject(raw []byte) (o refObject, ok bool) {
	i := refSkipSpace(raw, 0)
	if i >= len(raw) || raw[i] != '{' {
		return nil, false
	}
	o = refObject{}
	i = refSkipSpace(raw, i+1)
	if i < len(raw) && raw[i] == '}' {
		return o, true
	}
	for i < len(raw) && raw[i] == '"' {
		end := refValueEnd(raw, i)
		name, ok := refUnquote(raw[i:end])
		if !ok {
			return nil, false
		}
		i = refSkipSpace(raw, end)
		if i >= len(raw) || raw[i] != ':' {
			return nil, false
		}
		i = refSkipSpace(raw, i+1)
		end = refValueEnd(raw, i)
		if end <= i {
			return nil, false
		}
		o[name] = json.RawMessage(raw[i:end:end])
		i = refSkipSpace(raw, end)
		if i >= len(raw) {
			return nil, false
		}
		switch raw[i] {
		case '}':
			return o, true
		case ',':
			i = refSkipSpace(raw, i+1)
		default:
			return nil, false
		}
	}
	return nil, false
}

// splitArray returns the elements of raw when it is a JSON array, each its raw bytes: what
// json.Unmarshal into []json.RawMessage returns, for input as splitObject takes. ok is false when
// raw is not an array.
func refSplitArray(raw []byte) (elems []json.RawMessage, ok bool) {
	i := refSkipSpace(raw, 0)
	if i >= len(raw) || raw[i] != '[' {
		return nil, false
	}
	elems = []json.RawMessage{}
	i = refSkipSpace(raw, i+1)
	if i < len(raw) && raw[i] == ']' {
		return elems, true
	}
	for i < len(raw) {
		end := refValueEnd(raw, i)
		if end <= i {
			return nil, false
		}
		elems = append(elems, json.RawMessage(raw[i:end:end]))
		i = refSkipSpace(raw, end)
		if i >= len(raw) {
			return nil, false
		}
		switch raw[i] {
		case ']':
			return elems, true
		case ',':
			i = refSkipSpace(raw, i+1)
		default:
			return nil, false
		}
	}
	return nil, false
}

// unquote is the value of the JSON string q (quotes included): its bytes between the quotes
// when it has no escape, else encoding/json's reading of it.
func refUnquote(q []byte) (string, bool) {
	if len(q) < 2 || q[0] != '"' || q[len(q)-1] != '"' {
		return "", false
	}
	if bytes.IndexByte(q, '\\') < 0 {
		return string(q[1 : len(q)-1]), true
	}
	var s string
	return s, json.Unmarshal(q, &s) == nil
}

func refSkipSpace(raw []byte, i int) int {
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
func refValueEnd(raw []byte, i int) int {
	if i >= len(raw) {
		return i
	}
	switch raw[i] {
	case '"':
		return refStringEnd(raw, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(raw); j++ {
			switch raw[j] {
			case '"':
				j = refStringEnd(raw, j) - 1
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
func refStringEnd(raw []byte, i int) int {
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

// MaxMinorUnits is the largest amount accepted, in minor units: 2^53−1, the largest integer an
// RFC 8785 (IEEE 754 double) number holds exactly, so the canonical request stays exact.

// decimalPattern is the RFC 8259 number grammar, used for amount values in either form.
var refDecimalPattern = regexp.MustCompile(`^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?$`)

// MinorUnits converts value, an amount in major units, to an integer count of currency's minor
// units, exactly (docs/design.md#request-hash): minor = value × 10^CurrencyExponent(currency).
//
// value uses JSON number syntax ("249.90", "24990", "2.499e2"); it is parsed as a decimal, never
// as float64, so "249.9", "249.90" and "249.900" give the same result. Errors, all
// *InvalidError{Reason: ReasonInvalidField} with Field "amount.value" or "amount.currency", in
// this order: value not in that syntax; value negative; currency not an upper-case code of the
// table; a significant digit beyond the currency's exponent (e.g. JPY "1000.5"); a result above
// MaxMinorUnits.
func refMinorUnits(value, currency string) (int64, error) {
	n, err := refMinorUnitsAt(value, currency, "amount")
	if err != nil {
		return 0, err
	}
	return n, nil
}

func refMinorUnitsAt(value, currency, path string) (int64, *InvalidError) {
	bad := func(name, desc string) (int64, *InvalidError) {
		return 0, invalid(ReasonInvalidField, refJoin(path, name), desc)
	}
	if !refDecimalPattern.MatchString(value) {
		return bad("value", "must be a decimal number")
	}

	mantissa, exponent, hasExp := strings.Cut(strings.ToLower(value), "e")
	if strings.Contains(mantissa, ".") {
		mantissa = strings.TrimSuffix(strings.TrimRight(mantissa, "0"), ".")
	}
	if hasExp {
		mantissa += "e" + exponent
	}
	d, err := decimal.NewFromString(mantissa)
	if err != nil {
		return bad("value", "exponent out of range")
	}
	if d.IsNegative() {
		return bad("value", "must not be negative")
	}
	exp, ok := CurrencyExponent(currency)
	if !ok {
		return bad("currency", "must be an upper-case ISO 4217 code")
	}
	if d.IsZero() {
		return 0, nil
	}
	minor := d.Shift(int32(exp)).Normalize()
	switch {
	case minor.Exponent() < 0:
		return bad("value", "has more decimal places than the currency allows")
	case minor.Exponent() > 15:
		return bad("value", "exceeds the largest amount")
	}
	n := new(big.Int).Mul(minor.Coefficient(), new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(minor.Exponent())), nil))
	if !n.IsInt64() || n.Int64() > MaxMinorUnits {
		return bad("value", "exceeds the largest amount")
	}
	return n.Int64(), nil
}

// canonicalAmount is amount as hashed: currency and integer minor units.
type refCanonicalAmount struct {
	Currency string `json:"currency"`
	Minor    int64  `json:"minor"`
}

// canonicalRequest is the hashed projection of a request; absent members are omitted.
type refCanonicalRequestDoc struct {
	Operation    Operation           `json:"operation"`
	OfferVersion string              `json:"offerVersion,omitempty"`
	TravellerRef string              `json:"travellerRef,omitempty"`
	Amount       *refCanonicalAmount `json:"amount,omitempty"`
	Stay         *Stay               `json:"stay,omitempty"`
	Segments     []Segment           `json:"segments,omitempty"`
}

// CanonicalRequest returns the RFC 8785 canonical JSON that RequestHash digests
// (docs/design.md#request-hash): an object of operation, offerVersion, travellerRef, amount
// {currency, minor} and, for BOOK and MODIFY only, stay {propertyId, checkIn, checkOut} or segments
// [{from, to, date, flight}] in the order given, values as sent. Empty strings, a nil Amount, a nil
// Stay and empty Segments are absent and omitted; nothing else of the request is included. For
// sc01:
//
//	{"amount":{"currency":"EUR","minor":24990},"offerVersion":"off_1:1","operation":"BOOK","stay":{"checkIn":"2027-02-03","checkOut":"2027-02-06","propertyId":"h_1042"},"travellerRef":"tr_0001"}
//
// Errors are *InvalidError: op not valid (invalid_field "operation"), r nil (missing_field
// "request"), or an amount MinorUnits rejects (invalid_field "request.amount.value" or
// "request.amount.currency").
func refCanonicalRequest(op Operation, r *Request) ([]byte, error) {
	if !op.Valid() {
		return nil, invalid(ReasonInvalidField, "operation", "must be one of "+refJoinOps())
	}
	if r == nil {
		return nil, invalid(ReasonMissingField, "request", "required")
	}
	c := refCanonicalRequestDoc{Operation: op, OfferVersion: r.OfferVersion, TravellerRef: r.TravellerRef}
	if r.Amount != nil {
		minor, err := refMinorUnitsAt(r.Amount.Value, r.Amount.Currency, "request.amount")
		if err != nil {
			return nil, err
		}
		c.Amount = &refCanonicalAmount{Currency: r.Amount.Currency, Minor: minor}
	}
	if op.HasFingerprint() {
		c.Stay, c.Segments = r.Stay, r.Segments
	}
	return refCanonicalJSON(c)
}

// RequestHash returns the request hash of r for op: the lowercase hex SHA-256 of
// CanonicalRequest(op, r) (docs/design.md#request-hash). Equal amounts hash alike whatever their
// trailing zeros or form (string or JSON number); member order and whitespace of the original
// record never matter. Errors are those of CanonicalRequest.
func refRequestHash(op Operation, r *Request) (string, error) {
	b, err := refCanonicalRequest(op, r)
	if err != nil {
		return "", err
	}
	return refSha256Hex(b), nil
}

// fingerprintDoc is the projection Fingerprint digests.
type refFingerprintDoc struct {
	TravellerRef string    `json:"travellerRef,omitempty"`
	Stay         *Stay     `json:"stay,omitempty"`
	Segments     []Segment `json:"segments,omitempty"`
}

// Fingerprint returns the lookup fingerprint of a BOOK or MODIFY request
// (docs/design.md#request-hash): the lowercase hex SHA-256 of the RFC 8785 canonical JSON of
//
//	{"travellerRef": r.TravellerRef, "stay": {"checkIn", "checkOut", "propertyId"}}
//
// or, for a flight,
//
//	{"segments": [{"date", "flight", "from", "to"}, ...], "travellerRef": r.TravellerRef}
//
// with from, to and flight upper-cased, segments in the order given, other values as sent, and
// an empty travellerRef omitted. Stay wins when a request has both. It returns "" when op has no
// fingerprint (not BOOK or MODIFY), r is nil, or r has neither stay nor segments. The
// fingerprint does not include the operation, amount or offer.
func refFingerprint(op Operation, r *Request) string {
	if !op.HasFingerprint() || r == nil || (r.Stay == nil && len(r.Segments) == 0) {
		return ""
	}
	doc := refFingerprintDoc{TravellerRef: r.TravellerRef, Stay: r.Stay}
	if r.Stay == nil {
		for _, s := range r.Segments {
			doc.Segments = append(doc.Segments, Segment{
				From:   strings.ToUpper(s.From),
				To:     strings.ToUpper(s.To),
				Date:   s.Date,
				Flight: strings.ToUpper(s.Flight),
			})
		}
	}
	b, err := refCanonicalJSON(doc)
	if err != nil {
		return ""
	}
	return refSha256Hex(b)
}

// CanonicalHash returns the lowercase hex SHA-256 of the RFC 8785 canonical form of a whole JSON
// record, as processed_event keeps it (docs/design.md#insert-first-dedup): member order and
// whitespace do not change it. Numbers are canonicalised as IEEE 754 doubles (RFC 8785), so 249.9
// and 249.90 hash alike. Every record DecodeAttempt or DecodeDecision accepts has one; the error
// (not an *InvalidError; it never quotes the record) is for input that is not I-JSON.
func refCanonicalHash(raw []byte) (string, error) {
	b, err := refCanonicalize(raw)
	if err != nil {
		return "", errors.New("events: canonical hash: record is not I-JSON")
	}
	return refSha256Hex(b), nil
}

// canonicalJSON marshals v and canonicalises it with RFC 8785.
func refCanonicalJSON(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	c := jsontext.Value(b)
	if err := c.Canonicalize(); err != nil {
		return nil, err
	}
	return c, nil
}

// canonicalize returns the RFC 8785 canonical form of the JSON text raw, in a new slice (raw is
// left as it is). It fails on anything that is not I-JSON (RFC 7493): bad syntax, trailing data,
// duplicate member names at any depth, invalid UTF-8 or lone surrogates, numbers beyond float64.
// The implementation is jsontext's (the Go team's encoding/json/v2 text layer, as a module);
// the tests cross-check it against github.com/gowebpki/jcs, of the RFC's reference lineage.
func refCanonicalize(raw []byte) ([]byte, error) {
	c := jsontext.Value(bytes.Clone(raw))
	if err := c.Canonicalize(); err != nil {
		return nil, err
	}

	if bytes.Contains(c, []byte("e+308")) {
		if err := refFiniteNumbers(raw); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// errNumberRange: a JSON number beyond the IEEE 754 double range (RFC 7493 §2.2).
var errRefNumberRange = errors.New("events: number beyond the IEEE 754 double range")

// finiteNumbers reports errNumberRange when a number of the valid JSON text raw overflows
// float64.
func refFiniteNumbers(raw []byte) error {
	dec := jsontext.NewDecoder(bytes.NewReader(raw))
	for {
		tok, err := dec.ReadToken()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if tok.Kind() == '0' {
			if _, err := strconv.ParseFloat(tok.String(), 64); err != nil {
				return errRefNumberRange
			}
		}
	}
}

func refSha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
