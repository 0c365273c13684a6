package events

import "errors"

// Reason is a dead-letter reason code, sent in the bookrecon.dlq.reason header
// (docs/design.md#contract-v1). Validation stops at the first failing step, in the order of
// Reasons.
type Reason string

// Dead-letter reasons, in validation order (steps 1 to 9 of docs/design.md#contract-v1).
const (
	// ReasonTooLarge (step 1): the record value is longer than MaxRecordBytes.
	ReasonTooLarge Reason = "too_large"
	// ReasonInvalidJSON (step 2): not UTF-8, not JSON, not an object, a duplicate key at any
	// depth, or outside I-JSON (RFC 7493: lone surrogate, number beyond float64 range).
	ReasonInvalidJSON Reason = "invalid_json"
	// ReasonMissingField (steps 3 to 5): a required member is absent or null.
	ReasonMissingField Reason = "missing_field"
	// ReasonUnsupportedSpecVersion (step 3): specVersion is not the integer 1.
	ReasonUnsupportedSpecVersion Reason = "unsupported_spec_version"
	// ReasonUnknownEventType (step 4): eventType is not a type of the topic.
	ReasonUnknownEventType Reason = "unknown_event_type"
	// ReasonInvalidField (step 6): a member has the wrong type, format, range or enum value.
	ReasonInvalidField Reason = "invalid_field"
	// ReasonUnknownProvider (step 7): provider is not in the capability map.
	ReasonUnknownProvider Reason = "unknown_provider"
	// ReasonInvalidIdempotencyKey (step 8): the key is not prefix:subject:vN for the record's
	// operation, version and intent.
	ReasonInvalidIdempotencyKey Reason = "invalid_idempotency_key"
	// ReasonStaleEvent (step 9): occurredAt is before the oldest kept processed_event day.
	ReasonStaleEvent Reason = "stale_event"
)

// Reasons returns every dead-letter reason in validation order, for metric pre-creation. The
// slice is new on every call.
func Reasons() []Reason {
	return []Reason{ReasonTooLarge, ReasonInvalidJSON, ReasonMissingField,
		ReasonUnsupportedSpecVersion, ReasonUnknownEventType, ReasonInvalidField,
		ReasonUnknownProvider, ReasonInvalidIdempotencyKey, ReasonStaleEvent}
}

// InvalidError is the dead-letter verdict on a record: why it was rejected and where.
//
// It never carries a value from the record (docs/design.md#observability: no personal data), only
// the member's JSON path and a fixed description, so Error and Detail are safe for logs and the
// bookrecon.dlq.detail header.
type InvalidError struct {
	// Reason is the dead-letter reason code.
	Reason Reason
	// Field is the JSON path of the offending member, e.g. "request.amount.currency" or
	// "request.segments[0].from"; "" for a whole-record failure (too_large, invalid_json).
	Field string
	// Detail is Field, ": " and a fixed description, e.g. "request.amount.currency: must be an
	// upper-case ISO 4217 code"; only the description when Field is "".
	Detail string
}

// Error returns "events: <reason>: <detail>", e.g.
// "events: invalid_field: request.amount.currency: must be an upper-case ISO 4217 code".
func (e *InvalidError) Error() string {
	return "events: " + string(e.Reason) + ": " + e.Detail
}

// AsInvalid returns the *InvalidError in err's chain, if any.
func AsInvalid(err error) (*InvalidError, bool) {
	var ie *InvalidError
	ok := errors.As(err, &ie)
	return ie, ok
}

// invalid builds an *InvalidError whose Detail is field and desc.
func invalid(r Reason, field, desc string) *InvalidError {
	detail := desc
	if field != "" {
		detail = field + ": " + desc
	}
	return &InvalidError{Reason: r, Field: field, Detail: detail}
}
