package events

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// isID reports whether s is a tenantId, bookingIntentId or key subject: [A-Za-z0-9_-]{1,64}
// (docs/design.md#identities).
func isID(s string) bool {
	if len(s) < 1 || len(s) > 64 {
		return false
	}
	for i := range len(s) {
		if c := s[i]; !isAlnum(c) && c != '_' && c != '-' {
			return false
		}
	}
	return true
}

// isKeyVersion reports whether s is the vN part of a key, N ≥ 1 without leading zeros:
// v[1-9][0-9]{0,9}.
func isKeyVersion(s string) bool {
	return len(s) >= 2 && len(s) <= 11 && s[0] == 'v' && s[1] >= '1' && s[1] <= '9' && isDigits(s[2:])
}

// isIATAAirport reports whether s is an IATA airport code, either case: [A-Za-z]{3}.
func isIATAAirport(s string) bool {
	return len(s) == 3 && isLetter(s[0]) && isLetter(s[1]) && isLetter(s[2])
}

// isFlight reports whether s is an IATA flight designator: airline code, 1–4 digits, optional
// suffix, [A-Za-z0-9]{2}[0-9]{1,4}[A-Za-z]?.
func isFlight(s string) bool {
	if len(s) < 3 || !isAlnum(s[0]) || !isAlnum(s[1]) {
		return false
	}
	number := s[2:]
	if isLetter(number[len(number)-1]) {
		number = number[:len(number)-1]
	}
	return len(number) >= 1 && len(number) <= 4 && isDigits(number)
}

// isDigits reports whether every byte of s is an ASCII digit ("" is).
func isDigits(s string) bool {
	for i := range len(s) {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

func isLetter(c byte) bool { return c|0x20 >= 'a' && c|0x20 <= 'z' }

func isAlnum(c byte) bool { return isLetter(c) || c >= '0' && c <= '9' }

// maxEventIDBytes bounds eventId, which is part of processed_event's primary key.
const maxEventIDBytes = 256

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
func DecodeAttempt(raw []byte, opt DecodeOptions) (Attempt, error) {
	a, _, err := DecodeAttemptHashed(raw, opt)
	return a, err
}

// DecodeAttemptHashed is DecodeAttempt that also returns CanonicalHash(raw), computed from the
// same RFC 8785 pass that validation makes (one canonicalisation per record, not two).
func DecodeAttemptHashed(raw []byte, opt DecodeOptions) (Attempt, string, error) {
	s := getScratch()
	defer s.release()
	o, hash, err := parseRecord(raw, s)
	if err != nil {
		return Attempt{}, "", err
	}
	a, err := decodeAttempt(o, opt, s)
	if err != nil {
		return Attempt{}, "", err
	}
	return a, hash, nil
}

func decodeAttempt(o object, opt DecodeOptions, s *scratch) (Attempt, error) {
	et, err := checkHeader(o, AttemptEventTypes())
	if err != nil {
		return Attempt{}, err
	}

	v := validator{s: s}
	a := Attempt{SpecVersion: SpecVersion, EventType: et}
	a.EventID, a.OccurredAt, a.TenantID, a.BookingIntentID = v.envelope(o)
	if s := v.str(o, "", "operation", true); s != "" && !Operation(s).Valid() {
		v.bad("operation", "must be one of "+joinOps())
	} else {
		a.Operation = Operation(s)
	}
	a.OperationVersion = v.version(o, "", "operationVersion")
	a.IdempotencyKey, _ = v.rawString(o, "", "idempotencyKey", true) // format: step 8
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
	prefix, subject, version, err := ParseKey(a.IdempotencyKey)
	switch {
	case err != nil:
		return Attempt{}, err
	case prefix != a.Operation.KeyPrefix():
		return Attempt{}, keyError("prefix must be " + a.Operation.KeyPrefix() + " for the operation")
	case version != a.OperationVersion:
		return Attempt{}, keyError("version must equal operationVersion")
	case a.Operation.SubjectIsIntent() && subject != a.BookingIntentID:
		return Attempt{}, keyError("subject must be the bookingIntentId for this operation")
	}
	a.KeySubject = subject
	if err := checkStale(a.OccurredAt, opt); err != nil {
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
func DecodeDecision(raw []byte, opt DecodeOptions) (Decision, error) {
	d, _, err := DecodeDecisionHashed(raw, opt)
	return d, err
}

// DecodeDecisionHashed is DecodeDecision that also returns CanonicalHash(raw) from the same
// canonicalisation pass.
func DecodeDecisionHashed(raw []byte, opt DecodeOptions) (Decision, string, error) {
	s := getScratch()
	defer s.release()
	o, hash, err := parseRecord(raw, s)
	if err != nil {
		return Decision{}, "", err
	}
	d, err := decodeDecision(o, opt, s)
	if err != nil {
		return Decision{}, "", err
	}
	return d, hash, nil
}

func decodeDecision(o object, opt DecodeOptions, s *scratch) (Decision, error) {
	et, err := checkHeader(o, []EventType{EventDecisionRecorded})
	if err != nil {
		return Decision{}, err
	}

	v := validator{s: s}
	d := Decision{SpecVersion: SpecVersion, EventType: et, Retryable: true}
	d.EventID, d.OccurredAt, d.TenantID, d.BookingIntentID = v.envelope(o)
	d.IdempotencyKey, _ = v.rawString(o, "", "idempotencyKey", true) // format: after step 9
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

	if err := checkStale(d.OccurredAt, opt); err != nil {
		return Decision{}, err
	}
	prefix, subject, version, err := ParseKey(d.IdempotencyKey)
	if err != nil {
		return Decision{}, err
	}
	op, _ := OperationForKeyPrefix(prefix)
	if op.SubjectIsIntent() && subject != d.BookingIntentID {
		return Decision{}, keyError("subject must be the bookingIntentId for this operation")
	}
	d.Operation, d.OperationVersion, d.KeySubject = op, version, subject
	return d, nil
}

// ParseKey splits an idempotency key "prefix:subject:vN" (docs/design.md#identities): prefix one of
// book, authorize, capture, modify, cancel, refund; subject [A-Za-z0-9_-]{1,64}; N an integer
// 1..2^31−1 without leading zeros. It does not check the subject against an intent. Errors are
// *InvalidError{Reason: ReasonInvalidIdempotencyKey, Field: "idempotencyKey"} and never quote
// the key.
func ParseKey(key string) (prefix, subject string, version int, err error) {
	parts := strings.Split(key, ":")
	if len(parts) != 3 {
		return "", "", 0, keyError("must be prefix:subject:vN")
	}
	if _, ok := OperationForKeyPrefix(parts[0]); !ok {
		return "", "", 0, keyError("prefix must be one of book, authorize, capture, modify, cancel, refund")
	}
	if !isID(parts[1]) {
		return "", "", 0, keyError("subject must match [A-Za-z0-9_-]{1,64}")
	}
	n, convErr := strconv.ParseInt(strings.TrimPrefix(parts[2], "v"), 10, 32)
	if !isKeyVersion(parts[2]) || convErr != nil {
		return "", "", 0, keyError("version must be v1 to v2147483647")
	}
	return parts[0], parts[1], int(n), nil
}

func keyError(desc string) *InvalidError {
	return invalid(ReasonInvalidIdempotencyKey, "idempotencyKey", desc)
}

// object is a JSON object with its members still raw, in the order written and without
// duplicate names (parseRecord's canonicalisation refuses them). Names are exact (encoding/json
// only folds case when decoding into structs). A record has about a dozen members, so a lookup
// is a scan, not a map.
type object []member

// member is one member of an object: its unquoted name and its raw value.
type member struct {
	name []byte
	raw  json.RawMessage
}

// get returns the raw value of the member name, nil when there is none.
func (o object) get(name string) json.RawMessage {
	for i := range o {
		if string(o[i].name) == name {
			return o[i].raw
		}
	}
	return nil
}

// parseRecord runs steps 1 and 2 and returns the record's members and CanonicalHash; a null
// value (a tombstone) or an empty one is invalid_json. Canonicalisation rejects duplicate keys at
// any depth, bad syntax, trailing data, lone surrogates and numbers beyond float64; splitObject
// then insists on an object.
func parseRecord(raw []byte, s *scratch) (object, string, error) {
	switch {
	case raw == nil:
		return nil, "", invalid(ReasonInvalidJSON, "", "record value is null (a Kafka tombstone)")
	case len(raw) == 0:
		return nil, "", invalid(ReasonInvalidJSON, "", "record value is empty")
	}
	if len(raw) > MaxRecordBytes {
		return nil, "", invalid(ReasonTooLarge, "", fmt.Sprintf("record exceeds %d bytes", MaxRecordBytes))
	}
	if !utf8.Valid(raw) {
		return nil, "", invalid(ReasonInvalidJSON, "", "record is not UTF-8")
	}
	if hash, o, ok := s.hashFast(raw); ok && o != nil {
		return o, hash, nil // the record's members split in the same pass
	}
	// The canonicaliser's error text may quote the record, so it is dropped.
	hash, err := canonicalHash(raw)
	if err != nil {
		return nil, "", invalid(ReasonInvalidJSON, "",
			"record is not I-JSON (syntax, duplicate key, lone surrogate or number range)")
	}
	o, ok := splitObjectInto(&s.members, raw)
	if !ok {
		return nil, "", invalid(ReasonInvalidJSON, "", "record is not a JSON object")
	}
	return o, hash, nil
}

// checkHeader runs steps 3 and 4: specVersion, then eventType against allowed.
func checkHeader(o object, allowed []EventType) (EventType, error) {
	raw := o.get("specVersion")
	if isAbsent(raw) {
		return "", invalid(ReasonMissingField, "specVersion", "required")
	}
	if n, err := strconv.Atoi(string(raw)); err != nil || n != SpecVersion {
		return "", invalid(ReasonUnsupportedSpecVersion, "specVersion", "must be the integer 1")
	}
	raw = o.get("eventType")
	if isAbsent(raw) {
		return "", invalid(ReasonMissingField, "eventType", "required")
	}
	s, ok := stringValue(raw)
	if !ok || !slices.Contains(allowed, EventType(s)) {
		return "", invalid(ReasonUnknownEventType, "eventType", "not an event type of this topic")
	}
	return EventType(s), nil
}

// checkStale runs step 9.
func checkStale(at time.Time, opt DecodeOptions) error {
	if !opt.MinOccurredAt.IsZero() && at.Before(opt.MinOccurredAt) {
		return invalid(ReasonStaleEvent, "occurredAt", "before the oldest kept processed_event day")
	}
	return nil
}

func isAbsent(raw json.RawMessage) bool { return len(raw) == 0 || string(raw) == "null" }

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

func joinOps() string {
	var names []string
	for _, o := range Operations() {
		names = append(names, string(o))
	}
	return strings.Join(names, ", ")
}

// validator runs steps 5 and 6 over the whole record and keeps the verdict: the first
// missing_field if any, else the first invalid_field. The objects it splits go in s.
type validator struct {
	err *InvalidError
	s   *scratch
}

func (v *validator) set(e *InvalidError) {
	if v.err == nil || (v.err.Reason == ReasonInvalidField && e.Reason == ReasonMissingField) {
		v.err = e
	}
}

func (v *validator) fail(r Reason, field, desc string) { v.set(invalid(r, field, desc)) }

func (v *validator) missing(field, desc string) { v.fail(ReasonMissingField, field, desc) }

func (v *validator) bad(field, desc string) { v.fail(ReasonInvalidField, field, desc) }

// get returns the member name of o, nil when absent or null (recorded as missing when
// required). The member's path, join(path, name), is built only for an error.
func (v *validator) get(o object, path, name string, required bool) json.RawMessage {
	raw := o.get(name)
	if isAbsent(raw) {
		if required {
			v.missing(join(path, name), "required")
		}
		return nil
	}
	return raw
}

// rawString returns a string member and whether it is present and a string; "" when absent.
func (v *validator) rawString(o object, path, name string, required bool) (string, bool) {
	raw := v.get(o, path, name, required)
	if raw == nil {
		return "", false
	}
	s, ok := stringValue(raw)
	if !ok {
		v.bad(join(path, name), "must be a string")
		return "", false
	}
	return s, true
}

// stringValue returns the value of raw when it is a JSON string. raw is a member of a record
// parseRecord accepted, so it is one valid JSON value: a string without escapes is its bytes
// between the quotes; one with escapes is unquoted by encoding/json.
func stringValue(raw []byte) (string, bool) {
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
func (v *validator) str(o object, path, name string, required bool) string {
	s, ok := v.rawString(o, path, name, required)
	if ok && required && s == "" {
		v.bad(join(path, name), "must not be empty")
	}
	return s
}

// match returns a required string member that must be well formed.
func (v *validator) match(o object, path, name string, wellFormed func(string) bool, desc string) string {
	s := v.str(o, path, name, true)
	if s != "" && !wellFormed(s) {
		v.bad(join(path, name), desc)
	}
	return s
}

// date returns a required YYYY-MM-DD member and its parsed value.
func (v *validator) date(o object, path, name string) (string, time.Time) {
	s := v.str(o, path, name, true)
	if s == "" {
		return "", time.Time{}
	}
	t, err := time.Parse(time.DateOnly, s)
	if err != nil {
		v.bad(join(path, name), "must be a date YYYY-MM-DD")
	}
	return s, t
}

// version returns a required integer member in 1..2^31−1, written as an integer literal.
func (v *validator) version(o object, path, name string) int {
	raw := v.get(o, path, name, true)
	if raw == nil {
		return 0
	}
	n, err := strconv.ParseInt(string(raw), 10, 32)
	if err != nil || n < 1 || n > math.MaxInt32 {
		v.bad(join(path, name), "must be an integer from 1 to 2147483647")
		return 0
	}
	return int(n)
}

// boolean returns a boolean member; nil when absent or null.
func (v *validator) boolean(o object, path, name string, required bool) *bool {
	raw := v.get(o, path, name, required)
	switch string(raw) {
	case "":
		return nil
	case "true", "false":
		b := string(raw) == "true"
		return &b
	}
	v.bad(join(path, name), "must be true or false")
	return nil
}

// obj returns an object member; nil when absent or null.
func (v *validator) obj(o object, path, name string, required bool) object {
	raw := v.get(o, path, name, required)
	if raw == nil {
		return nil
	}
	m, ok := splitObjectInto(&v.s.members, raw)
	if !ok {
		v.bad(join(path, name), "must be an object")
		return nil
	}
	return m
}

// envelope checks the members common to both input topics.
func (v *validator) envelope(o object) (eventID string, at time.Time, tenant, intent string) {
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
	tenant = v.match(o, "", "tenantId", isID, "must match [A-Za-z0-9_-]{1,64}")
	intent = v.match(o, "", "bookingIntentId", isID, "must match [A-Za-z0-9_-]{1,64}")
	return eventID, at, tenant, intent
}

func (v *validator) recovery(o object) Recovery {
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
func (v *validator) request(o object, op Operation) *Request {
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
	hasStay, hasSegments := !isAbsent(ro.get("stay")), !isAbsent(ro.get("segments"))
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

func (v *validator) amount(ro object) *Amount {
	const p = "request.amount"
	ao := v.obj(ro, "request", "amount", true)
	if ao == nil {
		return nil
	}
	a := &Amount{}
	raw := v.get(ao, p, "value", true)
	typed := false
	switch {
	case raw == nil:
	case raw[0] == '"':
		a.Value, typed = stringValue(raw)
	case raw[0] == '-' || raw[0] >= '0' && raw[0] <= '9':
		a.Value, typed = string(raw), true // a JSON number, kept as its literal text
	}
	if raw != nil && !typed {
		v.bad(p+".value", "must be a decimal string or a JSON number")
	}
	a.Currency = v.str(ao, p, "currency", true)
	if typed && a.Currency != "" {
		if _, err := minorUnits(a.Value, a.Currency, p); err != nil {
			v.set(err)
		}
	}
	return a
}

func (v *validator) stay(ro object) *Stay {
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

func (v *validator) segments(ro object) []Segment {
	const p = "request.segments"
	raw := v.get(ro, "request", "segments", true)
	elems, ok := splitArray(raw)
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
		ep := p + "[" + strconv.Itoa(i) + "]"
		so, ok := splitObjectInto(&v.s.members, e)
		if !ok {
			v.bad(ep, "must be an object")
			continue
		}
		s := Segment{
			From: v.match(so, ep, "from", isIATAAirport, "must be a three-letter IATA code"),
			To:   v.match(so, ep, "to", isIATAAirport, "must be a three-letter IATA code"),
		}
		s.Date, _ = v.date(so, ep, "date")
		s.Flight = v.match(so, ep, "flight", isFlight, "must be an IATA flight designator")
		segs = append(segs, s)
	}
	return segs
}

// outcome checks the outcome members defined for et.
func (v *validator) outcome(o object, et EventType) *Outcome {
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
