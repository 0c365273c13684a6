package providers

import (
	"context"
	"time"

	"github.com/bookrecon/bookrecon/events"
)

// LookupKind names one way of asking a provider for records (docs/design.md#lookup-ladder). The
// capability map lists, per provider, the kinds it answers.
type LookupKind string

const (
	// LookupProviderReference asks for the record with the provider's own reference
	// (outcome.providerReference of an attempt). Its not-found may be authoritative.
	LookupProviderReference LookupKind = "provider_reference"
	// LookupClientReference asks for the records carrying our client reference
	// (recovery.clientReference of an attempt). Its not-found may be authoritative.
	LookupClientReference LookupKind = "client_reference"
	// LookupFingerprint asks for the records whose fingerprint (events.Fingerprint form: hex
	// SHA-256 of traveller and stay or segments) equals the query's and whose creation time lies
	// within the query's [From, To] window. Its not-found is never authoritative.
	LookupFingerprint LookupKind = "fingerprint"
)

// LookupKinds returns every lookup kind, in the order the reconciler tries them. Use it to
// validate input and to pre-create metric series.
func LookupKinds() []LookupKind {
	return []LookupKind{LookupProviderReference, LookupClientReference, LookupFingerprint}
}

// Valid reports whether k is one of [LookupKinds].
func (k LookupKind) Valid() bool {
	switch k {
	case LookupProviderReference, LookupClientReference, LookupFingerprint:
		return true
	}
	return false
}

// IsReference reports whether k looks a record up by a reference (provider or client), the only
// kinds whose not-found can be authoritative (docs/design.md#judging-an-answer).
func (k LookupKind) IsReference() bool {
	return k == LookupProviderReference || k == LookupClientReference
}

// RecordStatus is the state of a provider record as the port reports it, for the record of the
// attempt's own operation (the booking, the cancellation, the capture, the refund). Adapters map
// each provider's own states onto these four.
type RecordStatus string

const (
	// StatusConfirmed means the operation took effect at the provider.
	StatusConfirmed RecordStatus = "CONFIRMED"
	// StatusPending means the provider is still processing the operation.
	StatusPending RecordStatus = "PENDING"
	// StatusRejected means the provider refused the operation; nothing took effect.
	StatusRejected RecordStatus = "REJECTED"
	// StatusCancelled means the operation was undone; it no longer has effect.
	StatusCancelled RecordStatus = "CANCELLED"
)

// RecordStatuses returns every record status, for validation and metric pre-creation.
func RecordStatuses() []RecordStatus {
	return []RecordStatus{StatusConfirmed, StatusPending, StatusRejected, StatusCancelled}
}

// Valid reports whether s is one of [RecordStatuses].
func (s RecordStatus) Valid() bool {
	switch s {
	case StatusConfirmed, StatusPending, StatusRejected, StatusCancelled:
		return true
	}
	return false
}

// Record is one record a provider holds, as a lookup returns it.
type Record struct {
	// ProviderReference is the provider's own reference for the record; never empty.
	ProviderReference string
	// ClientReference is the reference we sent with the operation; "" when the provider holds
	// none.
	ClientReference string
	// Status is the state of the operation at the provider.
	Status RecordStatus
	// CreatedAt is when the provider created the record, on the provider's clock.
	CreatedAt time.Time
	// Fingerprint is the record's fingerprint in events.Fingerprint form (lowercase hex SHA-256
	// of traveller and stay or segments); "" when the record has none.
	Fingerprint string
}

// Query is one lookup question.
type Query struct {
	// Provider is the provider's name, as in the capability map.
	Provider string
	// Operation is the operation whose record is wanted; adapters use it to pick the provider's
	// endpoint and to map its states (docs/design.md#judging-an-answer).
	Operation events.Operation
	// Kind is how to look the record up.
	Kind LookupKind
	// Value is the provider reference, the client reference or the fingerprint
	// (events.Fingerprint form), according to Kind.
	Value string
	// From and To bound, inclusively, the creation time of the records a fingerprint lookup may
	// return: [started − fingerprintWindow, started + fingerprintWindow]. Both are required for
	// LookupFingerprint and ignored (leave them zero) for reference lookups.
	From, To time.Time
}

// Provider is the port through which the reconciler asks a provider what it holds.
//
// Lookup returns the records that answer q. Zero records is not an error: not found is an empty
// (or nil) slice with a nil error. Several records are returned as they are; the caller decides
// what several means. Every non-nil error is classified (see [Error] and [ClassOf]); a lookup
// kind the provider does not support is a [ClassContract] error wrapping
// [ErrUnsupportedLookup]. The per-call timeout comes from ctx. Implementations must be safe for
// concurrent use, must not retry on their own and must never create anything at the provider.
type Provider interface {
	Lookup(ctx context.Context, q Query) ([]Record, error)
}

// Result is the outcome of one lookup as a bounded metric label (docs/design.md#observability),
// and the `lastLookupResult` of an escalation.
type Result string

const (
	// ResultFound: exactly one record.
	ResultFound Result = "found"
	// ResultNotFound: no record.
	ResultNotFound Result = "not_found"
	// ResultSeveral: more than one record.
	ResultSeveral Result = "several"
	// ResultError: the lookup failed.
	ResultError Result = "error"
)

// Results returns every lookup result, for metric pre-creation.
func Results() []Result {
	return []Result{ResultFound, ResultNotFound, ResultSeveral, ResultError}
}

// ResultOf labels the outcome of a Lookup call: ResultError when err is non-nil, otherwise by the
// number of records.
func ResultOf(recs []Record, err error) Result {
	switch {
	case err != nil:
		return ResultError
	case len(recs) == 0:
		return ResultNotFound
	case len(recs) == 1:
		return ResultFound
	default:
		return ResultSeveral
	}
}
