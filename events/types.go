package events

import "time"

// Amount is request.amount: a non-negative amount in major units (docs/design.md#request-hash).
type Amount struct {
	// Value is the exact decimal text as received, in JSON number syntax ("249.90", "24990",
	// "2.499e2"); a JSON number is kept verbatim as its literal text. Never parsed as float64:
	// use MinorUnits.
	Value string `json:"value"`
	// Currency is the upper-case ISO 4217 alpha-3 code, e.g. "EUR".
	Currency string `json:"currency"`
}

// Stay is request.stay of a hotel BOOK or MODIFY.
type Stay struct {
	// PropertyID is the provider's property id, as sent.
	PropertyID string `json:"propertyId"`
	// CheckIn is the arrival date, YYYY-MM-DD.
	CheckIn string `json:"checkIn"`
	// CheckOut is the departure date, YYYY-MM-DD, after CheckIn.
	CheckOut string `json:"checkOut"`
}

// Segment is one element of request.segments of a flight BOOK or MODIFY. Values are kept as sent;
// Fingerprint upper-cases From, To and Flight.
type Segment struct {
	// From is the IATA airport code of departure: three letters.
	From string `json:"from"`
	// To is the IATA airport code of arrival: three letters.
	To string `json:"to"`
	// Date is the departure date, YYYY-MM-DD.
	Date string `json:"date"`
	// Flight is the IATA flight designator: a two-character airline code, 1–4 digits, an
	// optional letter (e.g. "XQ101").
	Flight string `json:"flight"`
}

// Request is the request of attempt.started (docs/design.md#contract-v1). Members not listed here
// are ignored.
type Request struct {
	// OfferVersion identifies the priced offer, e.g. "off_1:1".
	OfferVersion string `json:"offerVersion"`
	// TravellerRef is the producer's traveller reference (never personal data itself).
	TravellerRef string `json:"travellerRef"`
	// Amount is the amount charged or refunded; never nil on a decoded attempt.started.
	Amount *Amount `json:"amount,omitempty"`
	// Stay is set for a hotel BOOK or MODIFY; exactly one of Stay and Segments is set for those
	// operations, neither for the others (a stay or segments sent with them is ignored).
	Stay *Stay `json:"stay,omitempty"`
	// Segments is set, non-empty and in the order given, for a flight BOOK or MODIFY.
	Segments []Segment `json:"segments,omitempty"`
}

// Recovery holds the optional recovery identities of an attempt (docs/design.md#identities,
// docs/design.md#timeout-taxonomy). Every member is "" when absent or null.
type Recovery struct {
	// ClientReference is our reference as sent to the provider; a lookup key.
	ClientReference string `json:"clientReference,omitempty"`
	// ProviderSessionID is the provider's session id, when known.
	ProviderSessionID string `json:"providerSessionId,omitempty"`
	// CorrelationID is the producer's correlation id.
	CorrelationID string `json:"correlationId,omitempty"`
	// PaymentReference is the payment the operation belongs to.
	PaymentReference string `json:"paymentReference,omitempty"`
	// ProviderReference is the reference of the subject acted on (the booking to cancel, the
	// payment to capture): a recovery identity, never used to settle this attempt.
	ProviderReference string `json:"providerReference,omitempty"`
	// ProviderIdempotencyKey is the provider's own idempotency key, when it deduplicates natively.
	ProviderIdempotencyKey string `json:"providerIdempotencyKey,omitempty"`
}

// Outcome is the outcome of attempt.succeeded, attempt.failed or attempt.outcome_unknown.
// Members the event type does not define are ignored and left zero.
type Outcome struct {
	// ProviderReference is this attempt's own result reference; required on succeeded, optional
	// on failed and outcome_unknown, "" when absent.
	ProviderReference string `json:"providerReference,omitempty"`
	// FailureCode is the producer's failure code on failed (required, non-empty), e.g.
	// "SOLD_OUT"; see DefaultTransportTimeoutCodes.
	FailureCode string `json:"failureCode,omitempty"`
	// Retryable is set on failed (required there), nil otherwise.
	Retryable *bool `json:"retryable,omitempty"`
	// TimeoutClass is set on outcome_unknown (required, any non-empty string, kept as written).
	TimeoutClass TimeoutClass `json:"timeoutClass,omitempty"`
	// RequestSent is outcome_unknown's requestSent: nil for null or absent.
	RequestSent *bool `json:"requestSent,omitempty"`
}

// Attempt is one validated record of booking.attempts.v1 (docs/design.md#contract-v1). Its JSON
// encoding is the v1 wire form and decodes back to an equal Attempt.
type Attempt struct {
	// SpecVersion is always SpecVersion (1).
	SpecVersion int `json:"specVersion"`
	// EventID names the published fact; a producer's retry republishes the same id (1–256 bytes).
	EventID string `json:"eventId"`
	// EventType is one of AttemptEventTypes.
	EventType EventType `json:"eventType"`
	// OccurredAt is the producer's time, RFC 3339, in the offset it was sent with.
	OccurredAt time.Time `json:"occurredAt"`
	// TenantID matches [A-Za-z0-9_-]{1,64}.
	TenantID string `json:"tenantId"`
	// BookingIntentID matches [A-Za-z0-9_-]{1,64}; the record key.
	BookingIntentID string `json:"bookingIntentId"`
	// Operation is one of the six operations.
	Operation Operation `json:"operation"`
	// OperationVersion is N ≥ 1 of the key's vN (at most 2^31−1).
	OperationVersion int `json:"operationVersion"`
	// IdempotencyKey is "prefix:subject:vN" for Operation and OperationVersion.
	IdempotencyKey string `json:"idempotencyKey"`
	// Provider names an entry of the capability map.
	Provider string `json:"provider"`
	// Request is set on attempt.started only (ignored on the other types).
	Request *Request `json:"request,omitempty"`
	// Recovery holds the optional recovery identities.
	Recovery Recovery `json:"recovery,omitzero"`
	// Outcome is set on succeeded, failed and outcome_unknown (ignored on started).
	Outcome *Outcome `json:"outcome,omitempty"`
	// KeySubject is the subject parsed from IdempotencyKey: the bookingIntentId for BOOK,
	// PAYMENT_AUTHORIZE and PAYMENT_CAPTURE, the booking or payment acted on otherwise.
	KeySubject string `json:"-"`
}

// Hash returns RequestHash(a.Operation, a.Request), or "" and no error when a.Request is nil
// (an outcome event carries no request, so no hash).
func (a Attempt) Hash() (string, error) {
	if a.Request == nil {
		return "", nil
	}
	return RequestHash(a.Operation, a.Request)
}

// Digests are the two values a start event's request is compared by: its request hash
// (docs/design.md#request-hash: 64 lowercase hex) and its fingerprint (the traveller and itinerary
// without amount or offer version, for blind-retry detection: "Safe retry gate and blind
// retries"; "" for operations without one). An outcome event has neither.
type Digests struct {
	RequestHash string
	Fingerprint string
}

// Digests returns a's Digests, computed once so callers can do it where decoding runs in
// parallel. The error is RequestHash's.
func (a Attempt) Digests() (Digests, error) {
	h, err := a.Hash()
	if err != nil || h == "" {
		return Digests{}, err
	}
	return Digests{RequestHash: h, Fingerprint: Fingerprint(a.Operation, a.Request)}, nil
}

// Decision values of a manual decision.
const (
	DecisionConfirmed = "CONFIRMED"
	DecisionFailed    = "FAILED"
)

// Decision is one validated record of booking.manual-decisions.v1
// (docs/design.md#cause-manual-decision). Its JSON encoding is the v1 wire form.
type Decision struct {
	// SpecVersion is always SpecVersion (1).
	SpecVersion int `json:"specVersion"`
	// EventID names the decision; ops tools may publish it more than once.
	EventID string `json:"eventId"`
	// EventType is always EventDecisionRecorded.
	EventType EventType `json:"eventType"`
	// OccurredAt is when ops recorded the decision (not checked against the clock).
	OccurredAt time.Time `json:"occurredAt"`
	// TenantID matches [A-Za-z0-9_-]{1,64}.
	TenantID string `json:"tenantId"`
	// BookingIntentID matches [A-Za-z0-9_-]{1,64}.
	BookingIntentID string `json:"bookingIntentId"`
	// IdempotencyKey names the attempt decided on: "prefix:subject:vN".
	IdempotencyKey string `json:"idempotencyKey"`
	// Decision is DecisionConfirmed or DecisionFailed.
	Decision string `json:"decision"`
	// ProviderReference is required when Decision is CONFIRMED, optional otherwise.
	ProviderReference string `json:"providerReference,omitempty"`
	// Actor is who decided (non-empty).
	Actor string `json:"actor"`
	// Reason is why, as written by the actor (non-empty).
	Reason string `json:"reason"`
	// EscalationID, when set, is the one escalation this decision closes.
	EscalationID string `json:"escalationId,omitempty"`
	// Retryable says whether a FAILED decision allows a safe retry; true when absent or null.
	Retryable bool `json:"retryable"`

	// Operation is the operation of IdempotencyKey's prefix (derived, not on the wire).
	Operation Operation `json:"-"`
	// OperationVersion is N of IdempotencyKey's vN (derived).
	OperationVersion int `json:"-"`
	// KeySubject is the subject of IdempotencyKey (derived).
	KeySubject string `json:"-"`
}

// DecodeOptions carry what validation needs from outside the record.
type DecodeOptions struct {
	// KnownProvider reports whether a provider is in the capability map (step 7); nil means
	// every provider is known.
	KnownProvider func(name string) bool
	// MinOccurredAt is the lower bound of step 9: the start of the oldest kept processed_event
	// partition. A record that occurred before it is ReasonStaleEvent. Zero means no bound.
	MinOccurredAt time.Time
}
