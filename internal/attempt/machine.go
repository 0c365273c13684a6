// Package attempt holds the booking attempt state machine (docs/design.md#attempt-states,
// docs/design.md#timeout-taxonomy, docs/design.md#safe-retry-gate) as pure functions, and the store
// that applies their verdicts to PostgreSQL inside the caller's transaction.
package attempt

import (
	"slices"
	"time"

	"github.com/bookrecon/bookrecon/events"
)

// Status is an attempt's state. CONFIRMED and FAILED are terminal.
type Status string

// The attempt states of docs/design.md#attempt-states.
const (
	StatusInProgress Status = "IN_PROGRESS"
	StatusUnknown    Status = "UNKNOWN"
	StatusConfirmed  Status = "CONFIRMED"
	StatusFailed     Status = "FAILED"
)

// Statuses lists every Status, for metric pre-creation.
func Statuses() []Status {
	return []Status{StatusInProgress, StatusUnknown, StatusConfirmed, StatusFailed}
}

// Terminal reports whether s is CONFIRMED or FAILED.
func (s Status) Terminal() bool { return s == StatusConfirmed || s == StatusFailed }

// Source is what settled an attempt (docs/design.md#contract-v1, resolution sources).
type Source string

// The resolution sources.
const (
	SourceEvent                 Source = "event"
	SourceNotSent               Source = "not_sent"
	SourceProviderReference     Source = "provider_reference"
	SourceClientReference       Source = "client_reference"
	SourceFingerprint           Source = "fingerprint"
	SourceAuthoritativeNotFound Source = "authoritative_not_found"
	SourceManual                Source = "manual"
)

// Sources lists every Source, for metric pre-creation.
func Sources() []Source {
	return []Source{SourceEvent, SourceNotSent, SourceProviderReference, SourceClientReference,
		SourceFingerprint, SourceAuthoritativeNotFound, SourceManual}
}

// Action is what applying an event does to the attempt.
type Action int

// The actions of the state table.
const (
	// ActionCreate creates the attempt in Verdict.Status.
	ActionCreate Action = iota + 1
	// ActionTransition changes the attempt's status to Verdict.Status.
	ActionTransition
	// ActionFillRequest stores the request, hash and recovery identities of a start that arrived
	// after the outcome (sc19); no state change.
	ActionFillRequest
	// ActionRepeat is an idempotent repeat: a new event id restating an applied fact.
	ActionRepeat
	// ActionKeyConflict: same key, other request hash, provider or intent. Not applied.
	ActionKeyConflict
	// ActionContradiction: an outcome that contradicts the terminal state. Not applied.
	ActionContradiction
	// ActionAuditOnly: recorded in the audit trail only (a repeated outcome_unknown, a stale
	// report after a terminal state).
	ActionAuditOnly
)

var actionNames = map[Action]string{ActionCreate: "create", ActionTransition: "transition",
	ActionFillRequest: "fill_request", ActionRepeat: "repeat", ActionKeyConflict: "key_conflict",
	ActionContradiction: "contradiction", ActionAuditOnly: "audit_only"}

func (a Action) String() string { return actionNames[a] }

// Current is what the store knows of an existing attempt, read under the intent lock.
type Current struct {
	Status            Status
	BookingIntentID   string
	Provider          string
	RequestHash       string // "" until a start has been applied
	ProviderReference string // outcome.providerReference, "" when unknown
}

// Fact is an input event reduced to what the state table needs: the event type after the
// transport-timeout rule, and the state the outcome implies.
type Fact struct {
	Type         events.EventType
	Implied      Status // the state an outcome implies (zero for a start)
	Source       Source // event or not_sent, for terminal outcomes
	TimeoutClass events.TimeoutClass
	Reference    string // outcome.providerReference
	FailureCode  string
	Retryable    bool
	Transport    bool // attempt.failed with a transport-timeout failureCode, applied as outcome_unknown
}

// FactOf applies the timeout taxonomy and its transport-timeout rule
// (docs/design.md#timeout-taxonomy) to a validated event. transportCodes are the failure codes that
// are not proof of failure (events.DefaultTransportTimeoutCodes plus configuration).
func FactOf(ev events.Attempt, transportCodes []string) Fact {
	f := Fact{Type: ev.EventType}
	if ev.Outcome != nil {
		f.Reference = ev.Outcome.ProviderReference
	}
	switch ev.EventType {
	case events.EventSucceeded:
		f.Implied, f.Source = StatusConfirmed, SourceEvent
	case events.EventFailed:
		if slices.Contains(transportCodes, ev.Outcome.FailureCode) {
			// Not proof of failure: applied as outcome_unknown, read_timeout, requestSent null.
			f.Type, f.Implied, f.TimeoutClass, f.Transport = events.EventOutcomeUnknown, StatusUnknown, events.TimeoutRead, true
			f.FailureCode = ev.Outcome.FailureCode
			return f
		}
		f.Implied, f.Source = StatusFailed, SourceEvent
		f.FailureCode = ev.Outcome.FailureCode
		f.Retryable = ev.Outcome.Retryable != nil && *ev.Outcome.Retryable
	case events.EventOutcomeUnknown:
		f.TimeoutClass = ev.Outcome.TimeoutClass
		f.Implied = StatusUnknown
		if ev.Outcome.TimeoutClass == events.TimeoutConnect && ev.Outcome.RequestSent != nil && !*ev.Outcome.RequestSent {
			f.Implied, f.Source, f.FailureCode, f.Retryable = StatusFailed, SourceNotSent, "NOT_SENT", true
		}
	}
	return f
}

// Verdict is the state table's answer for one event.
type Verdict struct {
	Action Action
	Status Status // the attempt's status after the event
	Source Source // for a terminal Status reached by this event
	Note   string // why, for the audit trail
}

// Decide is the state table of docs/design.md#cause-event for an event carrying the attempt's own
// key. cur is nil when no attempt has the key yet; hash is the event's request hash ("" unless a
// start).
func Decide(cur *Current, ev events.Attempt, f Fact, hash string) Verdict {
	if cur == nil {
		if f.Type == events.EventStarted {
			return Verdict{Action: ActionCreate, Status: StatusInProgress, Note: "started"}
		}
		return Verdict{Action: ActionCreate, Status: f.Implied, Source: f.Source, Note: "created by its outcome"}
	}
	if cur.Provider != ev.Provider {
		return Verdict{Action: ActionKeyConflict, Status: cur.Status, Note: "provider differs"}
	}
	if cur.BookingIntentID != ev.BookingIntentID {
		return Verdict{Action: ActionKeyConflict, Status: cur.Status, Note: "bookingIntentId differs"}
	}
	switch f.Type {
	case events.EventStarted:
		switch cur.RequestHash {
		case "":
			return Verdict{Action: ActionFillRequest, Status: cur.Status, Note: "late start fills in the request"}
		case hash:
			return Verdict{Action: ActionRepeat, Status: cur.Status, Note: "same request hash"}
		default:
			return Verdict{Action: ActionKeyConflict, Status: cur.Status, Note: "request hash differs"}
		}
	case events.EventSucceeded, events.EventFailed:
		switch cur.Status {
		case StatusInProgress, StatusUnknown:
			return Verdict{Action: ActionTransition, Status: f.Implied, Source: f.Source, Note: string(f.Type)}
		case StatusConfirmed:
			if f.Implied == StatusConfirmed && f.Reference == cur.ProviderReference {
				return Verdict{Action: ActionRepeat, Status: cur.Status, Note: "same provider reference"}
			}
			return Verdict{Action: ActionContradiction, Status: cur.Status, Note: string(f.Type) + " after CONFIRMED"}
		case StatusFailed:
			if f.Implied == StatusFailed {
				return Verdict{Action: ActionRepeat, Status: cur.Status, Note: "failed again"}
			}
			return Verdict{Action: ActionContradiction, Status: cur.Status, Note: "succeeded after FAILED"}
		}
	case events.EventOutcomeUnknown:
		switch cur.Status {
		case StatusInProgress:
			return Verdict{Action: ActionTransition, Status: f.Implied, Source: f.Source, Note: "outcome unknown: " + string(f.TimeoutClass)}
		case StatusUnknown:
			return Verdict{Action: ActionAuditOnly, Status: cur.Status, Note: "outcome unknown again"}
		default:
			return Verdict{Action: ActionAuditOnly, Status: cur.Status, Note: "stale report after " + string(cur.Status)}
		}
	}
	return Verdict{Action: ActionAuditOnly, Status: cur.Status, Note: "unhandled event type"}
}

// Sibling is one version of the attempt's (intent, operation, subject), as the gate sees it.
type Sibling struct {
	Version      int
	Status       Status
	Source       Source
	Retryable    bool
	FailedFactAt time.Time // when the failure became a fact
}

// GateReason is the retry gate's answer (docs/design.md#query-api).
type GateReason string

// The gate reasons.
const (
	GateNoAttempt         GateReason = "no_attempt"
	GateSafeRetry         GateReason = "safe_retry"
	GateEarlierInProgress GateReason = "earlier_in_progress"
	GateEarlierUnknown    GateReason = "earlier_unknown"
	GateEarlierConfirmed  GateReason = "earlier_confirmed"
	GateNotRetryable      GateReason = "not_retryable"
	GateMaxVersions       GateReason = "max_versions"
	GateEarlierMissing    GateReason = "earlier_missing"
	GateFailedAfterStart  GateReason = "failed_after_start"
)

// provesNothingCreated: docs/design.md#safe-retry-gate: event, not_sent, authoritative_not_found,
// a lookup that found the record REJECTED or CANCELLED (a FAILED settled by a lookup), manual.
func provesNothingCreated(s Source) bool { return s != "" }

// SafeRetry judges version n (started at start) against its earlier versions: safe iff every
// version k < n exists and is FAILED no later than start, the failure proves nothing was
// created and is retryable, and n ≤ maxVersions. It returns the first reason it is not.
func SafeRetry(n int, start time.Time, earlier []Sibling, maxVersions int) (bool, GateReason) {
	if n <= 1 {
		return true, GateSafeRetry
	}
	if n > maxVersions {
		return false, GateMaxVersions
	}
	byVersion := make(map[int]Sibling, len(earlier))
	for _, s := range earlier {
		byVersion[s.Version] = s
	}
	for k := 1; k < n; k++ {
		s, ok := byVersion[k]
		switch {
		case !ok:
			return false, GateEarlierMissing
		case s.Status == StatusInProgress:
			return false, GateEarlierInProgress
		case s.Status == StatusUnknown:
			return false, GateEarlierUnknown
		case s.Status == StatusConfirmed:
			return false, GateEarlierConfirmed
		case !provesNothingCreated(s.Source) || !s.Retryable:
			return false, GateNotRetryable
		case s.FailedFactAt.After(start):
			return false, GateFailedAfterStart
		}
	}
	return true, GateSafeRetry
}

const defaultFirstCheck = time.Second
