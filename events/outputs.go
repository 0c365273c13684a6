package events

import (
	"crypto/sha1"
	"time"

	"github.com/google/uuid"
)

// OutputEnvelope is the common head of every record bookrecon publishes
// (docs/design.md#contract-v1, outputs). JSON is camelCase.
type OutputEnvelope struct {
	SpecVersion      int       `json:"specVersion"`
	EventID          string    `json:"eventId"` // deterministic: OutputID
	EventType        EventType `json:"eventType"`
	OccurredAt       time.Time `json:"occurredAt"`
	TenantID         string    `json:"tenantId"`
	BookingIntentID  string    `json:"bookingIntentId"`
	IdempotencyKey   string    `json:"idempotencyKey"`
	Operation        Operation `json:"operation"`
	OperationVersion int       `json:"operationVersion"`
	Provider         string    `json:"provider"`
}

// Resolved is `attempt.resolved` on booking.resolutions.v1: an attempt reached a terminal
// state. FailureCode is the event's code, or NOT_SENT, NOT_FOUND, REJECTED, CANCELLED, MANUAL.
type Resolved struct {
	OutputEnvelope
	Status            string    `json:"status"` // CONFIRMED or FAILED
	ResolutionSource  string    `json:"resolutionSource"`
	ProviderReference *string   `json:"providerReference"`
	FailureCode       *string   `json:"failureCode"`
	ResolvedAt        time.Time `json:"resolvedAt"`
}

// EscalationOpened is `escalation.opened` on booking.escalations.v1. Summary is traveller-safe:
// no personal data.
type EscalationOpened struct {
	OutputEnvelope
	EscalationID     string     `json:"escalationId"`
	Reason           string     `json:"reason"`
	AttemptStatus    string     `json:"attemptStatus"`
	UnknownSince     *time.Time `json:"unknownSince"`
	Checks           int        `json:"checks"`
	LastLookupResult *string    `json:"lastLookupResult"` // found, not_found, several, error or null
	Summary          string     `json:"summary"`
}

// EscalationClosed is `escalation.closed` on booking.escalations.v1.
type EscalationClosed struct {
	OutputEnvelope
	EscalationID string  `json:"escalationId"`
	ClosedBy     string  `json:"closedBy"` // event, lookup or manual
	Actor        *string `json:"actor"`
}

// outputNamespace is the UUIDv5 namespace of every id bookrecon derives.
var outputNamespace = uuid.MustParse("6f1c2b7e-8d4a-5e3f-9a1b-0c2d3e4f5a6b")

// OutputID is the deterministic id of an output fact: UUIDv5 over tenant, idempotency key, the
// kind of fact and the id of its cause (an event id, lookup id or decision id), so republishing
// the same fact yields the same eventId (docs/design.md#contract-v1).
//
// It is uuid.NewSHA1(outputNamespace, tenant NUL key NUL kind NUL cause) computed in a buffer on
// the stack (TestOutputIDIsNewSHA1, FuzzOutputID).
func OutputID(tenantID, idempotencyKey, kind, causeID string) string {
	var buf [256]byte
	b := append(buf[:0], outputNamespace[:]...)
	b = append(append(b, tenantID...), 0)
	b = append(append(b, idempotencyKey...), 0)
	b = append(append(b, kind...), 0)
	sum := sha1.Sum(append(b, causeID...))
	var id uuid.UUID
	copy(id[:], sum[:])
	id[6] = id[6]&0x0f | 0x50 // version 5
	id[8] = id[8]&0x3f | 0x80 // the RFC 4122 variant
	return id.String()
}
