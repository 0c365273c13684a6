package events

import "slices"

// Topic names, record limits and the contract version (docs/design.md#contract-v1). Topic names are
// part of the contract: renaming one is a breaking change.
const (
	// TopicAttempts is the input topic of attempt facts published by booking services.
	TopicAttempts = "booking.attempts.v1"
	// TopicAttemptsDLQ receives the records of TopicAttempts that fail validation.
	TopicAttemptsDLQ = "booking.attempts.dlq.v1"
	// TopicManualDecisions is the input topic of audited decisions published by ops tools.
	TopicManualDecisions = "booking.manual-decisions.v1"
	// TopicManualDecisionsDLQ receives the records of TopicManualDecisions that fail validation.
	TopicManualDecisionsDLQ = "booking.manual-decisions.dlq.v1"
	// TopicResolutions carries attempt.resolved, one per terminal fact (and per later manual
	// change).
	TopicResolutions = "booking.resolutions.v1"
	// TopicEscalations carries escalation.opened and escalation.closed.
	TopicEscalations = "booking.escalations.v1"

	// MaxRecordBytes is the largest record value accepted, in bytes (64 KiB). A longer value is
	// rejected with ReasonTooLarge before it is parsed.
	MaxRecordBytes = 65536
	// SpecVersion is the only specVersion this package accepts and emits.
	SpecVersion = 1
)

// Header names of a dead-letter record (docs/design.md#dead-letters). A dead letter
// carries the original key and bytes, no envelope and no ce_ headers.
const (
	// HeaderDLQReason holds the Reason, e.g. "invalid_field".
	HeaderDLQReason = "bookrecon.dlq.reason"
	// HeaderDLQDetail holds InvalidError.Detail: field names only, never a value.
	HeaderDLQDetail = "bookrecon.dlq.detail"
	// HeaderSourceTopic holds the topic the record was consumed from.
	HeaderSourceTopic = "bookrecon.source.topic"
	// HeaderSourcePartition holds the source partition, in decimal.
	HeaderSourcePartition = "bookrecon.source.partition"
	// HeaderSourceOffset holds the source offset, in decimal.
	HeaderSourceOffset = "bookrecon.source.offset"
)

// EventType is the eventType of a record (docs/design.md#contract-v1).
type EventType string

// Event types. The first four are the input types of booking.attempts.v1; decision.recorded is
// the only type of booking.manual-decisions.v1; the last three are outputs.
const (
	EventStarted          EventType = "attempt.started"
	EventSucceeded        EventType = "attempt.succeeded"
	EventFailed           EventType = "attempt.failed"
	EventOutcomeUnknown   EventType = "attempt.outcome_unknown"
	EventDecisionRecorded EventType = "decision.recorded"
	EventResolved         EventType = "attempt.resolved"
	EventEscalationOpened EventType = "escalation.opened"
	EventEscalationClosed EventType = "escalation.closed"
)

// AttemptEventTypes returns the four event types accepted on booking.attempts.v1, in contract
// order. The slice is new on every call.
func AttemptEventTypes() []EventType {
	return []EventType{EventStarted, EventSucceeded, EventFailed, EventOutcomeUnknown}
}

// EventTypes returns every event type of the v1 contract, inputs first. The slice is new on
// every call.
func EventTypes() []EventType {
	return append(AttemptEventTypes(),
		EventDecisionRecorded, EventResolved, EventEscalationOpened, EventEscalationClosed)
}

// Operation is the business operation of an attempt (docs/design.md#identities).
type Operation string

// The six operations.
const (
	OpBook             Operation = "BOOK"
	OpPaymentAuthorize Operation = "PAYMENT_AUTHORIZE"
	OpPaymentCapture   Operation = "PAYMENT_CAPTURE"
	OpModify           Operation = "MODIFY"
	OpCancel           Operation = "CANCEL"
	OpRefund           Operation = "REFUND"
)

// Operations returns the six operations in contract order. The slice is new on every call.
func Operations() []Operation {
	return []Operation{OpBook, OpPaymentAuthorize, OpPaymentCapture, OpModify, OpCancel, OpRefund}
}

// All returns the six operations, as Operations does; the receiver is ignored.
func (Operation) All() []Operation { return Operations() }

// Valid reports whether o is one of the six operations (exact, upper case).
func (o Operation) Valid() bool { return slices.Contains(Operations(), o) }

// KeyPrefix returns the idempotency-key prefix of o: book, authorize, capture, modify, cancel or
// refund; "" when o is not valid (docs/design.md#identities).
func (o Operation) KeyPrefix() string {
	switch o {
	case OpBook:
		return "book"
	case OpPaymentAuthorize:
		return "authorize"
	case OpPaymentCapture:
		return "capture"
	case OpModify:
		return "modify"
	case OpCancel:
		return "cancel"
	case OpRefund:
		return "refund"
	}
	return ""
}

// OperationForKeyPrefix returns the operation whose key prefix is prefix (exact, lower case).
func OperationForKeyPrefix(prefix string) (Operation, bool) {
	for _, o := range Operations() {
		if o.KeyPrefix() == prefix {
			return o, true
		}
	}
	return "", false
}

// SubjectIsIntent reports whether o's key subject must be the bookingIntentId: true for BOOK,
// PAYMENT_AUTHORIZE and PAYMENT_CAPTURE. For the others the subject is the booking or payment
// acted on and is not checked against the envelope (docs/design.md#identities).
func (o Operation) SubjectIsIntent() bool {
	return o == OpBook || o == OpPaymentAuthorize || o == OpPaymentCapture
}

// HasFingerprint reports whether o's request carries a stay or segments, and so a fingerprint:
// true for BOOK and MODIFY (docs/design.md#request-hash).
func (o Operation) HasFingerprint() bool { return o == OpBook || o == OpModify }

// TimeoutClass is outcome.timeoutClass of attempt.outcome_unknown
// (docs/design.md#timeout-taxonomy). It is not an enum on input: any non-empty string is accepted
// and kept as written.
type TimeoutClass string

// Timeout classes. The first five are the producer's; TimeoutStale is set by the reconciler for
// stale_in_progress; TimeoutOther is only a metric label for unrecognised classes.
const (
	TimeoutConnect         TimeoutClass = "connect_timeout"
	TimeoutRead            TimeoutClass = "read_timeout"
	TimeoutConnectionReset TimeoutClass = "connection_reset"
	TimeoutClient          TimeoutClass = "client_timeout"
	TimeoutBusiness        TimeoutClass = "business_timeout"
	TimeoutStale           TimeoutClass = "stale"
	TimeoutOther           TimeoutClass = "other"
)

// TimeoutClasses returns the five producer classes, then stale and other: every value
// MetricLabel can return, for pre-creating metric series. The slice is new on every call.
func TimeoutClasses() []TimeoutClass {
	return []TimeoutClass{TimeoutConnect, TimeoutRead, TimeoutConnectionReset, TimeoutClient,
		TimeoutBusiness, TimeoutStale, TimeoutOther}
}

// Known reports whether c is one of the five producer classes or stale.
func (c TimeoutClass) Known() bool {
	return c != TimeoutOther && slices.Contains(TimeoutClasses(), c)
}

// MetricLabel returns c when it is a known class (or other), else TimeoutOther, so metric labels
// stay bounded (docs/design.md#timeout-taxonomy: an unrecognised class is counted as other).
func (c TimeoutClass) MetricLabel() TimeoutClass {
	if slices.Contains(TimeoutClasses(), c) {
		return c
	}
	return TimeoutOther
}

// Effective returns the class the state machine applies: c when Known, else TimeoutRead
// (docs/design.md#timeout-taxonomy: an unrecognised class is treated as read_timeout).
func (c TimeoutClass) Effective() TimeoutClass {
	if c.Known() {
		return c
	}
	return TimeoutRead
}

// DefaultTransportTimeoutCodes returns the attempt.failed failureCodes that are transport
// timeouts, not proof of failure: CONNECT_TIMEOUT, READ_TIMEOUT, CONNECTION_RESET,
// CLIENT_TIMEOUT, GATEWAY_TIMEOUT and TIMEOUT, matched exactly (docs/design.md#timeout-taxonomy).
// Such a failed event is applied as outcome_unknown with read_timeout and requestSent null.
// Configuration may extend the list. The slice is new on every call.
func DefaultTransportTimeoutCodes() []string {
	return []string{"CONNECT_TIMEOUT", "READ_TIMEOUT", "CONNECTION_RESET", "CLIENT_TIMEOUT",
		"GATEWAY_TIMEOUT", "TIMEOUT"}
}
