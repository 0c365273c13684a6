package query

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/bookrecon/bookrecon/events"
	"github.com/bookrecon/bookrecon/internal/attempt"
	"github.com/bookrecon/bookrecon/providers"
)

// DB is what the queries need: a *pgxpool.Pool, a *pgx.Conn or a pgx.Tx.
type DB interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// ErrNotFound is returned when the thing asked for does not exist: an intent without a BOOK
// attempt (Status), an escalation (EscalationByID), an attempt (History).
var ErrNotFound = errors.New("query: not found")

// idPattern is the format of tenantId, bookingIntentId and key subjects
// (docs/design.md#identities).
var idPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// ValidID reports whether s matches [A-Za-z0-9_-]{1,64}, the format of tenant ids, booking
// intent ids and key subjects.
func ValidID(s string) bool { return idPattern.MatchString(s) }

// GateReasons are the seven reasons the retry gate answers with (docs/design.md#query-api), in
// that order; the first two allow a new version.
func GateReasons() []attempt.GateReason {
	return []attempt.GateReason{attempt.GateNoAttempt, attempt.GateSafeRetry, attempt.GateEarlierInProgress,
		attempt.GateEarlierUnknown, attempt.GateEarlierConfirmed, attempt.GateNotRetryable, attempt.GateMaxVersions}
}

// Allows reports whether reason r lets a producer start the next version: no_attempt and
// safe_retry.
func Allows(r attempt.GateReason) bool {
	return r == attempt.GateNoAttempt || r == attempt.GateSafeRetry
}

// PublicReason maps the state machine's gate reasons onto the seven of docs/design.md#query-api:
//
//   - earlier_missing (an earlier version has no row) → earlier_unknown: "a missing earlier
//     version is not FAILED" — its events may still be in flight or lost, and nothing proves it
//     created nothing, so the intent is in exactly the position of an UNKNOWN version;
//   - failed_after_start (an earlier version's failure became a fact after the new version's
//     start) → earlier_in_progress. The API judges with start = now, and a failure recorded
//     later than now is not possible on one clock: it happens only when the failing event's
//     occurredAt (a producer's clock) is ahead of the API's clock. At the asked time that
//     version had not failed yet, i.e. it was still in flight; asking again once the clocks
//     agree answers safe_retry.
//
// The other reasons are returned unchanged.
func PublicReason(r attempt.GateReason) attempt.GateReason {
	switch r {
	case attempt.GateEarlierMissing:
		return attempt.GateEarlierUnknown
	case attempt.GateFailedAfterStart:
		return attempt.GateEarlierInProgress
	}
	return r
}

// GateAnswer is the retry gate's answer for the next version of (intent, operation, subject).
type GateAnswer struct {
	// Allowed: the producer may start version LatestVersion+1 (a safe retry, or the first).
	Allowed bool `json:"allowed"`
	// Reason is one of GateReasons.
	Reason attempt.GateReason `json:"reason"`
	// LatestVersion is the highest stored operationVersion; 0 when there is none.
	LatestVersion int `json:"latestVersion"`
	// LatestStatus is the status of LatestVersion; null when there is none.
	LatestStatus *attempt.Status `json:"latestStatus"`
}

// Version is one stored version of an (intent, operation, subject), as the gate sees it.
type Version struct {
	attempt.Sibling
	// Provider is the provider the version was sent to.
	Provider string
}

// Judge answers the gate for version latest+1 of versions (any order), judged at now with
// attempt.SafeRetry against every version. maxVersions comes from caps: the entry of the
// latest version's provider, providers.DefaultMaxVersions when the provider is not in the map
// or caps is nil. SafeRetry's reasons are mapped with PublicReason; max_versions is checked
// before the earlier versions, and otherwise the first blocking version (lowest) gives the
// reason.
func Judge(versions []Version, caps *providers.Map, now time.Time) GateAnswer {
	if len(versions) == 0 {
		return GateAnswer{Allowed: true, Reason: attempt.GateNoAttempt}
	}
	latest := versions[0]
	sibs := make([]attempt.Sibling, 0, len(versions))
	for _, v := range versions {
		if v.Version > latest.Version {
			latest = v
		}
		sibs = append(sibs, v.Sibling)
	}
	maxVersions := providers.DefaultMaxVersions
	if caps != nil {
		if c, ok := caps.Get(latest.Provider); ok && c.MaxVersions > 0 {
			maxVersions = c.MaxVersions
		}
	}
	ok, reason := attempt.SafeRetry(latest.Version+1, now, sibs, maxVersions)
	status := latest.Status
	return GateAnswer{Allowed: ok, Reason: PublicReason(reason), LatestVersion: latest.Version, LatestStatus: &status}
}

// Subject is what the gate is asked about: one (tenant, intent, operation, subject).
type Subject struct {
	TenantID        string
	BookingIntentID string
	Operation       events.Operation
	// Subject is the key subject: the bookingIntentId for BOOK, PAYMENT_AUTHORIZE and
	// PAYMENT_CAPTURE (empty means that), the booking or payment acted on for MODIFY, CANCEL and
	// REFUND (required).
	Subject string
}

// InvalidError is a request the gate or the status cannot answer: a parameter that breaks the
// contract's formats. It never quotes the value.
type InvalidError struct {
	// Param is the parameter: tenant, intent, operation or subject.
	Param string
	// Code is invalid_<param>, or missing_subject.
	Code string
	// Detail says what the value must be.
	Detail string
}

func (e *InvalidError) Error() string { return "query: " + e.Param + " " + e.Detail }

// Validate checks s and fills in a defaulted subject. Errors are *InvalidError, in the order
// tenant, intent, operation, subject.
func (s *Subject) Validate() error {
	switch {
	case !ValidID(s.TenantID):
		return &InvalidError{Param: "tenant", Code: "invalid_tenant", Detail: "must match [A-Za-z0-9_-]{1,64}"}
	case !ValidID(s.BookingIntentID):
		return &InvalidError{Param: "intent", Code: "invalid_intent", Detail: "must match [A-Za-z0-9_-]{1,64}"}
	case !s.Operation.Valid():
		return &InvalidError{Param: "operation", Code: "invalid_operation",
			Detail: "must be one of BOOK, PAYMENT_AUTHORIZE, PAYMENT_CAPTURE, MODIFY, CANCEL, REFUND"}
	}
	if s.Operation.SubjectIsIntent() {
		switch s.Subject {
		case "":
			s.Subject = s.BookingIntentID
		case s.BookingIntentID:
		default:
			return &InvalidError{Param: "subject", Code: "invalid_subject",
				Detail: "must be the bookingIntentId (or absent) for " + string(s.Operation)}
		}
		return nil
	}
	switch {
	case s.Subject == "":
		return &InvalidError{Param: "subject", Code: "missing_subject",
			Detail: "is required for " + string(s.Operation) + ": the booking or payment acted on"}
	case !ValidID(s.Subject):
		return &InvalidError{Param: "subject", Code: "invalid_subject", Detail: "must match [A-Za-z0-9_-]{1,64}"}
	}
	return nil
}

// Versions reads every version of s (validated), lowest first, in one statement.
func Versions(ctx context.Context, db DB, s Subject) ([]Version, error) {
	rows, err := db.Query(ctx, `SELECT operation_version, status, coalesce(resolution_source, ''), coalesce(retryable, false),
		failed_fact_at, provider
		FROM booking_attempt WHERE tenant_id = $1 AND booking_intent_id = $2 AND operation = $3 AND subject = $4
		ORDER BY operation_version`, s.TenantID, s.BookingIntentID, string(s.Operation), s.Subject)
	if err != nil {
		return nil, fmt.Errorf("query: versions of %s/%s %s: %w", s.TenantID, s.BookingIntentID, s.Operation, err)
	}
	vs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Version, error) {
		var v Version
		var failedAt *time.Time
		err := r.Scan(&v.Version, &v.Status, &v.Source, &v.Retryable, &failedAt, &v.Provider)
		if failedAt != nil {
			v.FailedFactAt = *failedAt
		}
		return v, err
	})
	if err != nil {
		return nil, fmt.Errorf("query: versions of %s/%s %s: %w", s.TenantID, s.BookingIntentID, s.Operation, err)
	}
	return vs, nil
}

// Gate validates s and answers the retry gate for its next version at now.
func Gate(ctx context.Context, db DB, caps *providers.Map, s Subject, now time.Time) (GateAnswer, error) {
	if err := s.Validate(); err != nil {
		return GateAnswer{}, err
	}
	vs, err := Versions(ctx, db, s)
	if err != nil {
		return GateAnswer{}, err
	}
	return Judge(vs, caps, now), nil
}

// TravellerStatus is what a traveller may be told about a booking (docs/design.md#query-api).
type TravellerStatus string

// The traveller-facing statuses. UNKNOWN is never shown as such: "we are verifying your
// booking".
const (
	TravellerConfirmed     TravellerStatus = "confirmed"
	TravellerFailed        TravellerStatus = "failed"
	TravellerBeingVerified TravellerStatus = "being_verified"
)

// TravellerStatusOf maps an attempt status: CONFIRMED → confirmed, FAILED → failed,
// IN_PROGRESS and UNKNOWN → being_verified.
func TravellerStatusOf(s attempt.Status) TravellerStatus {
	switch s {
	case attempt.StatusConfirmed:
		return TravellerConfirmed
	case attempt.StatusFailed:
		return TravellerFailed
	}
	return TravellerBeingVerified
}

// IntentStatus is the traveller-facing status of an intent's booking.
type IntentStatus struct {
	TenantID        string `json:"tenantId"`
	BookingIntentID string `json:"bookingIntentId"`
	// Status is the TravellerStatus of the highest BOOK version.
	Status TravellerStatus `json:"status"`
	// CanBuyAgain is the retry gate's Allowed for BOOK: a new version may be started.
	CanBuyAgain bool `json:"canBuyAgain"`
	// LatestVersion is the highest BOOK operationVersion.
	LatestVersion int `json:"latestVersion"`
}

// Status answers the traveller-facing status of (tenant, intent) at now: its highest BOOK
// version's status and the BOOK gate's answer, from one read. ErrNotFound when the intent has
// no BOOK attempt; *InvalidError for a malformed id.
func Status(ctx context.Context, db DB, caps *providers.Map, tenant, intent string, now time.Time) (IntentStatus, GateAnswer, error) {
	s := Subject{TenantID: tenant, BookingIntentID: intent, Operation: events.OpBook}
	if err := s.Validate(); err != nil {
		return IntentStatus{}, GateAnswer{}, err
	}
	vs, err := Versions(ctx, db, s)
	if err != nil {
		return IntentStatus{}, GateAnswer{}, err
	}
	if len(vs) == 0 {
		return IntentStatus{}, GateAnswer{}, ErrNotFound
	}
	g := Judge(vs, caps, now)
	return IntentStatus{TenantID: tenant, BookingIntentID: intent, Status: TravellerStatusOf(*g.LatestStatus),
		CanBuyAgain: g.Allowed, LatestVersion: g.LatestVersion}, g, nil
}
