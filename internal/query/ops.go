package query

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/bookrecon/bookrecon/internal/attempt"
)

// Escalation states of the list filter.
const (
	StateOpen   = "open"
	StateClosed = "closed"
	StateAll    = "all"
)

// DefaultLimit is the most rows Escalations returns when the filter sets none.
const DefaultLimit = 100

// EscalationFilter selects escalations. Zero values select everything (state: open).
type EscalationFilter struct {
	// State is open (default), closed or all.
	State string
	// Reason is one escalation reason (attempt.Reasons), or "" for every reason.
	Reason string
	// Provider is the attempt's provider, or "".
	Provider string
	// TenantID is one tenant, or "".
	TenantID string
	// OlderThan keeps escalations opened at least this long before Now (0: no bound).
	OlderThan time.Duration
	// Now is the reference time of OlderThan and of every row's Age (default time.Now).
	Now time.Time
	// Limit bounds the rows returned, oldest first (default DefaultLimit).
	Limit int
}

// Validate reports every invalid field of f (state, reason, older-than, limit) in one error.
func (f EscalationFilter) Validate() error {
	var errs []error
	if !slices.Contains([]string{StateOpen, StateClosed, StateAll}, f.State) {
		errs = append(errs, errors.New("state must be open, closed or all"))
	}
	if f.Reason != "" && !slices.Contains(attempt.Reasons(), attempt.Reason(f.Reason)) {
		errs = append(errs, fmt.Errorf("reason must be one of %v", attempt.Reasons()))
	}
	if f.OlderThan < 0 {
		errs = append(errs, errors.New("older-than must not be negative"))
	}
	if f.Limit < 0 {
		errs = append(errs, errors.New("limit must not be negative"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("query: escalation filter: %w", err)
	}
	return nil
}

// Escalation is one escalation row with what ops need of its attempt.
type Escalation struct {
	EscalationID    uuid.UUID      `json:"escalationId"`
	TenantID        string         `json:"tenantId"`
	IdempotencyKey  string         `json:"idempotencyKey"`
	BookingIntentID string         `json:"bookingIntentId"`
	Reason          attempt.Reason `json:"reason"`
	State           string         `json:"state"`
	OpenedAt        time.Time      `json:"openedAt"`
	ClosedAt        *time.Time     `json:"closedAt"`
	// ClosedBy is event, lookup or manual; "" while open.
	ClosedBy string `json:"closedBy,omitempty"`
	// Actor closed it, for a manual close.
	Actor string `json:"actor,omitempty"`
	// Age is the time since OpenedAt, at the filter's Now; JSON ageSeconds, in whole seconds.
	Age           time.Duration  `json:"-"`
	AttemptID     uuid.UUID      `json:"attemptId"`
	AttemptStatus attempt.Status `json:"attemptStatus"`
	Provider      string         `json:"provider"`
}

// MarshalJSON writes Age in whole seconds.
func (e Escalation) MarshalJSON() ([]byte, error) {
	type plain Escalation
	return json.Marshal(struct {
		plain
		Age int64 `json:"ageSeconds"`
	}{plain(e), int64(e.Age / time.Second)})
}

const escalationColumns = `e.escalation_id, e.tenant_id, a.idempotency_key, a.booking_intent_id, e.reason, e.state,
	e.opened_at, e.closed_at, coalesce(e.closed_by, ''), coalesce(e.actor, ''), a.id, a.status, a.provider`

func scanEscalation(r pgx.Row, now time.Time) (Escalation, error) {
	var e Escalation
	err := r.Scan(&e.EscalationID, &e.TenantID, &e.IdempotencyKey, &e.BookingIntentID, &e.Reason, &e.State,
		&e.OpenedAt, &e.ClosedAt, &e.ClosedBy, &e.Actor, &e.AttemptID, &e.AttemptStatus, &e.Provider)
	e.OpenedAt, e.ClosedAt = e.OpenedAt.UTC(), utc(e.ClosedAt)
	e.Age = max(now.Sub(e.OpenedAt), 0)
	return e, err
}

// Escalations lists the escalations f selects, oldest first.
func Escalations(ctx context.Context, db DB, f EscalationFilter) ([]Escalation, error) {
	f.State = cmp.Or(f.State, StateOpen)
	if f.Now.IsZero() {
		f.Now = time.Now()
	}
	if err := f.Validate(); err != nil {
		return nil, err
	}
	var openedBefore *time.Time
	if f.OlderThan > 0 {
		t := f.Now.Add(-f.OlderThan)
		openedBefore = &t
	}
	rows, err := db.Query(ctx, `SELECT `+escalationColumns+`
		FROM escalation e JOIN booking_attempt a ON a.id = e.attempt_id
		WHERE ($1 = 'all' OR e.state = $1) AND ($2 = '' OR e.reason = $2) AND ($3 = '' OR a.provider = $3)
		AND ($4 = '' OR e.tenant_id = $4) AND ($5::timestamptz IS NULL OR e.opened_at <= $5)
		ORDER BY e.opened_at, e.escalation_id LIMIT $6`,
		f.State, f.Reason, f.Provider, f.TenantID, openedBefore, cmp.Or(f.Limit, DefaultLimit))
	if err != nil {
		return nil, fmt.Errorf("query: escalations: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Escalation, error) { return scanEscalation(r, f.Now) })
	if err != nil {
		return nil, fmt.Errorf("query: escalations: %w", err)
	}
	return out, nil
}

// Attempt is a booking attempt as ops see it: identities, state, reconciliation progress. The
// request (traveller data) is left out.
type Attempt struct {
	ID                uuid.UUID      `json:"attemptId"`
	TenantID          string         `json:"tenantId"`
	BookingIntentID   string         `json:"bookingIntentId"`
	Operation         string         `json:"operation"`
	Subject           string         `json:"subject"`
	Version           int            `json:"operationVersion"`
	IdempotencyKey    string         `json:"idempotencyKey"`
	Provider          string         `json:"provider"`
	Status            attempt.Status `json:"status"`
	ResolutionSource  string         `json:"resolutionSource,omitempty"`
	ProviderReference string         `json:"providerReference,omitempty"`
	FailureCode       string         `json:"failureCode,omitempty"`
	Retryable         *bool          `json:"retryable,omitempty"`
	TimeoutClass      string         `json:"timeoutClass,omitempty"`
	ClientReference   string         `json:"clientReference,omitempty"`
	CreatedAt         time.Time      `json:"createdAt"`
	UnknownSince      *time.Time     `json:"unknownSince"`
	TerminalAt        *time.Time     `json:"terminalAt"`
	CheckCount        int            `json:"checks"`
	NextCheckAt       *time.Time     `json:"nextCheckAt"`
	LastLookupResult  string         `json:"lastLookupResult,omitempty"`
	BlindRetry        bool           `json:"blindRetry"`
	// The failures recorded on the attempt for its own data: the escalator's deadline judgement
	// (retried at EscalationRetryAt) and the reconciler's consecutive failed checks (retried at
	// NextCheckAt), each with its last error.
	EscalationFailures int        `json:"escalationFailures,omitempty"`
	EscalationError    string     `json:"escalationError,omitempty"`
	EscalationRetryAt  *time.Time `json:"escalationRetryAt,omitempty"`
	CheckFailures      int        `json:"checkFailures,omitempty"`
	CheckError         string     `json:"checkError,omitempty"`
}

const attemptColumns = `id, tenant_id, booking_intent_id, operation, subject, operation_version, idempotency_key, provider,
	status, coalesce(resolution_source, ''), coalesce(provider_reference, ''), coalesce(failure_code, ''), retryable,
	coalesce(timeout_class, ''), coalesce(client_reference, ''), created_at, unknown_since, terminal_at, check_count,
	next_check_at, coalesce(last_lookup_result, ''), blind_retry, escalation_failures, coalesce(escalation_error, ''),
	escalation_retry_at, check_failures, coalesce(check_error, '')`

func scanAttempt(r pgx.Row) (Attempt, error) {
	var a Attempt
	err := r.Scan(&a.ID, &a.TenantID, &a.BookingIntentID, &a.Operation, &a.Subject, &a.Version, &a.IdempotencyKey,
		&a.Provider, &a.Status, &a.ResolutionSource, &a.ProviderReference, &a.FailureCode, &a.Retryable,
		&a.TimeoutClass, &a.ClientReference, &a.CreatedAt, &a.UnknownSince, &a.TerminalAt, &a.CheckCount,
		&a.NextCheckAt, &a.LastLookupResult, &a.BlindRetry, &a.EscalationFailures, &a.EscalationError,
		&a.EscalationRetryAt, &a.CheckFailures, &a.CheckError)
	a.CreatedAt, a.UnknownSince, a.TerminalAt, a.NextCheckAt = a.CreatedAt.UTC(), utc(a.UnknownSince), utc(a.TerminalAt), utc(a.NextCheckAt)
	a.EscalationRetryAt = utc(a.EscalationRetryAt)
	return a, err
}

// Transition is one attempt_transition row: a state change, or a fact recorded without one,
// with its cause.
type Transition struct {
	ID int64     `json:"id"`
	At time.Time `json:"at"`
	// From is "" for the attempt's creation.
	From attempt.Status `json:"from,omitempty"`
	To   attempt.Status `json:"to"`
	// Cause is event, lookup, manual or timeout.
	Cause   string `json:"cause"`
	EventID string `json:"eventId,omitempty"`
	// Lookup is the provider lookup that caused it, as recorded.
	Lookup json.RawMessage `json:"lookup,omitempty"`
	Actor  string          `json:"actor,omitempty"`
	Reason string          `json:"reason,omitempty"`
	Note   string          `json:"note,omitempty"`
}

// AttemptHistory is an attempt and its whole audit trail, oldest first.
type AttemptHistory struct {
	Attempt     Attempt      `json:"attempt"`
	Transitions []Transition `json:"transitions"`
	// FailedDecisions are the manual decisions kept for the attempt that failed to apply.
	FailedDecisions []FailedDecision `json:"failedDecisions,omitempty"`
}

// FailedDecision is a manual decision kept for an attempt that failed to apply for its own data
// in the transaction that settled the attempt (pending_decision.failed_at): that transaction
// committed without it, and it is never applied later; ops re-send the decision once the cause
// is fixed.
type FailedDecision struct {
	EventID           string    `json:"eventId"`
	Decision          string    `json:"decision"`
	ProviderReference string    `json:"providerReference,omitempty"`
	Actor             string    `json:"actor"`
	KeptAt            time.Time `json:"keptAt"`
	FailedAt          time.Time `json:"failedAt"`
	FailureReason     string    `json:"failureReason"`
}

// History returns the attempt (tenant, idempotency key), every attempt_transition row of it in
// order, and its failed decisions. ErrNotFound when there is no such attempt.
func History(ctx context.Context, db DB, tenantID, key string) (AttemptHistory, error) {
	a, err := scanAttempt(db.QueryRow(ctx, `SELECT `+attemptColumns+` FROM booking_attempt
		WHERE tenant_id = $1 AND idempotency_key = $2`, tenantID, key))
	if errors.Is(err, pgx.ErrNoRows) {
		return AttemptHistory{}, fmt.Errorf("query: attempt %s/%s: %w", tenantID, key, ErrNotFound)
	}
	if err != nil {
		return AttemptHistory{}, fmt.Errorf("query: attempt %s/%s: %w", tenantID, key, err)
	}
	ts, err := transitions(ctx, db, a.ID)
	if err != nil {
		return AttemptHistory{}, err
	}
	rows, err := db.Query(ctx, `SELECT event_id, coalesce(decision->>'decision', ''), coalesce(decision->>'providerReference', ''),
		coalesce(decision->>'actor', ''), created_at, failed_at, coalesce(failure_reason, '')
		FROM pending_decision WHERE tenant_id = $1 AND idempotency_key = $2 AND failed_at IS NOT NULL ORDER BY seq`, tenantID, key)
	if err != nil {
		return AttemptHistory{}, fmt.Errorf("query: failed decisions of %s/%s: %w", tenantID, key, err)
	}
	fs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (FailedDecision, error) {
		var f FailedDecision
		err := r.Scan(&f.EventID, &f.Decision, &f.ProviderReference, &f.Actor, &f.KeptAt, &f.FailedAt, &f.FailureReason)
		f.KeptAt, f.FailedAt = f.KeptAt.UTC(), f.FailedAt.UTC()
		return f, err
	})
	if err != nil {
		return AttemptHistory{}, fmt.Errorf("query: failed decisions of %s/%s: %w", tenantID, key, err)
	}
	if len(fs) == 0 {
		fs = nil // none: left out of the JSON
	}
	return AttemptHistory{Attempt: a, Transitions: ts, FailedDecisions: fs}, nil
}

func transitions(ctx context.Context, db DB, attemptID uuid.UUID) ([]Transition, error) {
	rows, err := db.Query(ctx, `SELECT id, created_at, coalesce(from_status, ''), to_status, cause, coalesce(event_id, ''),
		lookup, coalesce(actor, ''), coalesce(reason, ''), note
		FROM attempt_transition WHERE attempt_id = $1 ORDER BY id`, attemptID)
	if err != nil {
		return nil, fmt.Errorf("query: transitions of %s: %w", attemptID, err)
	}
	ts, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Transition, error) {
		var t Transition
		var lookup []byte
		err := r.Scan(&t.ID, &t.At, &t.From, &t.To, &t.Cause, &t.EventID, &lookup, &t.Actor, &t.Reason, &t.Note)
		if lookup != nil {
			t.Lookup = json.RawMessage(lookup)
		}
		t.At = t.At.UTC()
		return t, err
	})
	if err != nil {
		return nil, fmt.Errorf("query: transitions of %s: %w", attemptID, err)
	}
	return ts, nil
}

// EscalationDetail is one escalation, every escalation of its attempt (itself included) and
// the attempt's history.
type EscalationDetail struct {
	Escalation  Escalation   `json:"escalation"`
	Attempt     Attempt      `json:"attempt"`
	Escalations []Escalation `json:"attemptEscalations"`
	Transitions []Transition `json:"transitions"`
}

// EscalationByID returns the escalation id with its attempt and history; ages are at now.
// ErrNotFound when there is no such escalation.
func EscalationByID(ctx context.Context, db DB, id uuid.UUID, now time.Time) (EscalationDetail, error) {
	e, err := scanEscalation(db.QueryRow(ctx, `SELECT `+escalationColumns+`
		FROM escalation e JOIN booking_attempt a ON a.id = e.attempt_id WHERE e.escalation_id = $1`, id), now)
	if errors.Is(err, pgx.ErrNoRows) {
		return EscalationDetail{}, fmt.Errorf("query: escalation %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return EscalationDetail{}, fmt.Errorf("query: escalation %s: %w", id, err)
	}
	a, err := scanAttempt(db.QueryRow(ctx, `SELECT `+attemptColumns+` FROM booking_attempt WHERE id = $1`, e.AttemptID))
	if err != nil {
		return EscalationDetail{}, fmt.Errorf("query: attempt %s: %w", e.AttemptID, err)
	}
	rows, err := db.Query(ctx, `SELECT `+escalationColumns+`
		FROM escalation e JOIN booking_attempt a ON a.id = e.attempt_id WHERE e.attempt_id = $1
		ORDER BY e.opened_at, e.escalation_id`, e.AttemptID)
	if err != nil {
		return EscalationDetail{}, fmt.Errorf("query: escalations of %s: %w", e.AttemptID, err)
	}
	all, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Escalation, error) { return scanEscalation(r, now) })
	if err != nil {
		return EscalationDetail{}, fmt.Errorf("query: escalations of %s: %w", e.AttemptID, err)
	}
	ts, err := transitions(ctx, db, e.AttemptID)
	if err != nil {
		return EscalationDetail{}, err
	}
	return EscalationDetail{Escalation: e, Attempt: a, Escalations: all, Transitions: ts}, nil
}

// utc returns t in UTC; times leave this package in UTC whatever the session's time zone.
func utc(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}
