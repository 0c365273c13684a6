package attempt

import (
	"cmp"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/bookrecon/bookrecon/events"
	"github.com/bookrecon/bookrecon/internal/outbox"
	"github.com/bookrecon/bookrecon/internal/postgres"
	"github.com/bookrecon/bookrecon/providers"
)

// Reason is an escalation reason (docs/design.md#escalations).
type Reason string

// The escalation reasons.
const (
	ReasonDeadlineExceeded           Reason = "deadline_exceeded"
	ReasonAmbiguousMatch             Reason = "ambiguous_match"
	ReasonNoLookupCapability         Reason = "no_lookup_capability"
	ReasonKeyConflict                Reason = "key_conflict"
	ReasonBlindRetry                 Reason = "blind_retry"
	ReasonDuplicateBooking           Reason = "duplicate_booking"
	ReasonDuplicateProviderReference Reason = "duplicate_provider_reference"
	ReasonContradiction              Reason = "contradiction"
)

// Reasons lists every escalation reason, for metric pre-creation.
func Reasons() []Reason {
	return []Reason{ReasonDeadlineExceeded, ReasonAmbiguousMatch, ReasonNoLookupCapability, ReasonKeyConflict,
		ReasonBlindRetry, ReasonDuplicateBooking, ReasonDuplicateProviderReference, ReasonContradiction}
}

// Outcome reports whether r is an outcome escalation, closed when the attempt turns terminal;
// the others are anomaly escalations, closed by a manual decision.
func (r Reason) Outcome() bool {
	return r == ReasonDeadlineExceeded || r == ReasonAmbiguousMatch || r == ReasonNoLookupCapability
}

// Policy is what the store needs to know of a provider (from the capability map).
type Policy struct {
	Lookups     []string // supported lookup kinds: provider_reference, client_reference, fingerprint
	MaxVersions int      // safe-retry limit (default 3)
}

// PoliciesFrom derives the per-provider policies from the capability map.
func PoliciesFrom(m *providers.Map) map[string]Policy {
	out := map[string]Policy{}
	for _, name := range m.Names() {
		c, _ := m.Get(name)
		p := Policy{MaxVersions: c.MaxVersions}
		for _, l := range c.Lookups {
			p.Lookups = append(p.Lookups, string(l))
		}
		out[name] = p
	}
	return out
}

// Config is the store's configuration.
type Config struct {
	// Policies by provider name.
	Policies map[string]Policy
	// FirstCheck is the delay from turning UNKNOWN to the reconciler's first check (default 1s).
	FirstCheck time.Duration
	// Source is the CloudEvents source of published records (default "/bookrecon").
	Source string
	// ResolutionsTopic and EscalationsTopic default to the v1 topics.
	ResolutionsTopic, EscalationsTopic string
}

// Effects counts what one transaction did, for metrics applied after it commits.
type Effects struct {
	Created            map[Status]int
	UnknownByClass     map[events.TimeoutClass]int
	Resolutions        map[[2]string]int // [source, status]
	IdempotentRepeats  int
	KeyConflicts       int
	BlindRetries       int
	Contradictions     int
	DuplicateProvRefs  int
	EscalationsOpened  map[Reason]int
	EscalationsClosed  map[Reason]int
	EscalationRecurred int
	TimeToTerminal     []TerminalTiming
	UnknownAges        []float64 // seconds UNKNOWN, for attempts settled from UNKNOWN
	DecisionsApplied   int
	DecisionsKept      int
	// DecisionsFailed are the kept decisions this transaction marked failed.
	DecisionsFailed []FailedDecision
}

// TerminalTiming is the time from an attempt's first record to its terminal state.
type TerminalTiming struct {
	Status  Status
	Seconds float64
}

func (e *Effects) init() {
	if e.Created == nil {
		e.Created = map[Status]int{}
		e.UnknownByClass = map[events.TimeoutClass]int{}
		e.Resolutions = map[[2]string]int{}
		e.EscalationsOpened = map[Reason]int{}
		e.EscalationsClosed = map[Reason]int{}
	}
}

// clone copies e, maps and slices included: the effects to restore when a savepoint rolls back.
func (e *Effects) clone() Effects {
	c := *e
	c.Created = maps.Clone(e.Created)
	c.UnknownByClass = maps.Clone(e.UnknownByClass)
	c.Resolutions = maps.Clone(e.Resolutions)
	c.EscalationsOpened = maps.Clone(e.EscalationsOpened)
	c.EscalationsClosed = maps.Clone(e.EscalationsClosed)
	c.TimeToTerminal = slices.Clone(e.TimeToTerminal)
	c.UnknownAges = slices.Clone(e.UnknownAges)
	c.DecisionsFailed = slices.Clone(e.DecisionsFailed)
	return c
}

// Row is a booking_attempt row as the state machine needs it, read through the
// booking_attempt_row view (text columns with NULL as "").
type Row struct {
	ID                uuid.UUID
	TenantID          string
	BookingIntentID   string
	Operation         events.Operation
	Subject           string
	Version           int
	IdempotencyKey    string
	Provider          string
	Status            Status
	Source            Source
	RequestHash       string
	Fingerprint       string
	ClientReference   string
	ProviderReference string
	FailureCode       string
	Retryable         bool // meaningful when FAILED (stored NULL otherwise)
	TimeoutClass      string
	StartedAt         *time.Time
	FirstEventAt      time.Time
	WindowStart       time.Time
	FailedFactAt      *time.Time
	CreatedAt         time.Time
	UnknownSince      *time.Time
	TerminalAt        *time.Time
	NextCheckAt       *time.Time
	CheckCount        int
	LastLookupResult  string
	BlindRetry        bool
	GateJudged        bool
	Token             int64 // lease_token: the reconciler's fencing token
	// Escalated: an escalation other than no_lookup_capability exists for the attempt; its
	// checks continue at the maximum interval (docs/design.md#backoff).
	Escalated bool
	// OutcomeOpen: an outcome escalation (deadline_exceeded, ambiguous_match,
	// no_lookup_capability) is open; turning terminal closes it.
	OutcomeOpen bool

	request     *events.Request // set by a start in this transaction only (never read back)
	recovery    events.Recovery // the recovery identities kept (ClientReference included)
	requestSent *bool
}

// LeaseToken returns the attempt's fencing token.
func (a *Row) LeaseToken() int64 { return a.Token }

func scanRow(r pgx.Row) (*Row, error) {
	var a Row
	rc := &a.recovery
	err := r.Scan(&a.ID, &a.TenantID, &a.BookingIntentID, &a.Operation, &a.Subject, &a.Version, &a.IdempotencyKey,
		&a.Provider, &a.Status, &a.Source, &a.RequestHash, &a.Fingerprint, &rc.ClientReference, &rc.ProviderSessionID,
		&rc.CorrelationID, &rc.PaymentReference, &rc.ProviderReference, &rc.ProviderIdempotencyKey, &a.ProviderReference,
		&a.FailureCode, &a.Retryable, &a.TimeoutClass, &a.requestSent, &a.StartedAt, &a.FirstEventAt, &a.WindowStart,
		&a.FailedFactAt, &a.CreatedAt, &a.UnknownSince, &a.TerminalAt, &a.NextCheckAt, &a.CheckCount, &a.LastLookupResult,
		&a.BlindRetry, &a.GateJudged, &a.Token, &a.Escalated, &a.OutcomeOpen)
	if err != nil {
		return nil, err
	}
	a.ClientReference = rc.ClientReference
	return &a, nil
}

func scanRows(rows pgx.Rows, err error) ([]*Row, error) {
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (*Row, error) { return scanRow(r) })
}

//go:embed sql/*.sql
var sqlFiles embed.FS

// Statements are the package's named SQL statements (sql/*.sql, one file per table).
var Statements = postgres.MustLoadStatements(sqlFiles, "sql/*.sql")

func q(name string) string { return Statements.SQL(name) }

// Tx applies state-machine verdicts inside one database transaction and collects Effects.
type Tx struct {
	tx  pgx.Tx
	cfg *Config
	now *time.Time // the transaction's database clock, read once (Now)
	Effects
}

// NewTx wraps tx.
func NewTx(tx pgx.Tx, cfg *Config) *Tx {
	t := &Tx{tx: tx, cfg: cfg, now: new(time.Time)}
	t.init()
	return t
}

// Now returns the transaction's database clock (now(): the transaction's start), read on the
// first call: every transition of the transaction is judged and recorded on it.
func (t *Tx) Now(ctx context.Context) (time.Time, error) {
	if !t.now.IsZero() {
		return *t.now, nil
	}
	if err := t.tx.QueryRow(ctx, q("clock_now")).Scan(t.now); err != nil {
		return time.Time{}, fmt.Errorf("attempt: read the database clock: %w", err)
	}
	return *t.now, nil
}

// LockIntent creates the intent row insert-first and locks it (FOR UPDATE semantics through
// ON CONFLICT DO UPDATE): every transaction that creates or changes an attempt of the intent
// runs after it (docs/design.md#transactions-and-locks, lock order intent → attempts →
// claims/escalations).
func (t *Tx) LockIntent(ctx context.Context, tenantID, intentID string) error {
	if _, err := t.tx.Exec(ctx, q("booking_intent_lock"), tenantID, intentID); err != nil {
		return fmt.Errorf("attempt: lock intent %s/%s: %w", tenantID, intentID, err)
	}
	return nil
}

// ByKey reads the attempt (tenant, key) FOR UPDATE; nil when it does not exist.
func (t *Tx) ByKey(ctx context.Context, tenantID, key string) (*Row, error) {
	a, err := scanRow(t.tx.QueryRow(ctx, q("booking_attempt_by_key"), tenantID, key))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("attempt: read %s/%s: %w", tenantID, key, err)
	}
	return a, nil
}

// ReadByID reads one attempt without locking it.
func ReadByID(ctx context.Context, db interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, id uuid.UUID) (*Row, error) {
	a, err := scanRow(db.QueryRow(ctx, q("booking_attempt_read"), id))
	if err != nil {
		return nil, fmt.Errorf("attempt: read %s: %w", id, err)
	}
	return a, nil
}

// ByID reads one attempt FOR UPDATE.
func (t *Tx) ByID(ctx context.Context, id uuid.UUID) (*Row, error) {
	a, err := scanRow(t.tx.QueryRow(ctx, q("booking_attempt_by_id"), id))
	if err != nil {
		return nil, fmt.Errorf("attempt: read %s: %w", id, err)
	}
	return a, nil
}

// Audit writes one attempt_transition row.
type Audit struct {
	From    Status // "" for a creation
	To      Status
	Cause   string // event, lookup, manual, timeout
	EventID string
	Lookup  any // JSON-encoded when set
	Actor   string
	Reason  string
	Note    string
}

func (t *Tx) envelope(a *Row, typ events.EventType, id string) events.OutputEnvelope {
	return events.OutputEnvelope{SpecVersion: events.SpecVersion, EventID: id, EventType: typ,
		OccurredAt: time.Now().UTC(), TenantID: a.TenantID, BookingIntentID: a.BookingIntentID,
		IdempotencyKey: a.IdempotencyKey, Operation: a.Operation, OperationVersion: a.Version, Provider: a.Provider}
}

// message builds the outbox record of an output: JSON body, key = bookingIntentId, CloudEvents
// binary-mode headers.
func (t *Tx) message(topic string, a *Row, env events.OutputEnvelope, v any) (outbox.Message, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return outbox.Message{}, err
	}
	return t.messageOf(topic, a, env, b), nil
}

// messageOf is message with its JSON body b.
func (t *Tx) messageOf(topic string, a *Row, env events.OutputEnvelope, b []byte) outbox.Message {
	src := cmp.Or(t.cfg.Source, "/bookrecon")
	return outbox.Message{
		Topic: topic, Key: []byte(a.BookingIntentID), Value: b, EventID: env.EventID,
		Headers: outbox.CloudEvent(env.EventID, src, string(env.EventType), a.TenantID+"/"+a.IdempotencyKey, a.BookingIntentID, env.OccurredAt),
	}
}

// resolvedMessage builds attempt.resolved for a and counts it.
func (t *Tx) resolvedMessage(a *Row, causeID string) (outbox.Message, error) {
	msg := events.Resolved{
		OutputEnvelope:   t.envelope(a, events.EventResolved, events.OutputID(a.TenantID, a.IdempotencyKey, "attempt.resolved", causeID)),
		Status:           string(a.Status),
		ResolutionSource: string(a.Source),
		FailureCode:      resolutionFailureCode(a),
		ResolvedAt:       time.Now().UTC(),
	}
	if a.ProviderReference != "" {
		msg.ProviderReference = &a.ProviderReference
	}
	t.Resolutions[[2]string{string(a.Source), string(a.Status)}]++
	t.TimeToTerminal = append(t.TimeToTerminal, TerminalTiming{Status: a.Status, Seconds: time.Since(a.CreatedAt).Seconds()})
	if a.UnknownSince != nil {
		t.UnknownAges = append(t.UnknownAges, time.Since(*a.UnknownSince).Seconds())
	}
	// AppendJSON: json.Marshal's bytes without reflection (events.TestResolvedAppendJSON).
	b, err := msg.AppendJSON(make([]byte, 0, 512))
	if err != nil {
		return outbox.Message{}, err
	}
	return t.messageOf(cmp.Or(t.cfg.ResolutionsTopic, events.TopicResolutions), a, msg.OutputEnvelope, b), nil
}

// summary is traveller-safe: operation, version, provider, reason; never personal data.
func summary(a *Row, reason Reason, detail string) string {
	s := fmt.Sprintf("%s v%d at %s is %s: %s", a.Operation, a.Version, a.Provider, a.Status, reason)
	if detail != "" {
		s += " (" + detail + ")"
	}
	return s
}

// OutcomeReasons are the escalations that close when the attempt turns terminal.
var OutcomeReasons = []Reason{ReasonDeadlineExceeded, ReasonAmbiguousMatch, ReasonNoLookupCapability}

// resolutionFailureCode is attempt.resolved's failureCode (docs/design.md#contract-v1).
func resolutionFailureCode(a *Row) *string {
	if a.Status != StatusFailed {
		return nil
	}
	code := a.FailureCode
	switch a.Source {
	case SourceNotSent:
		code = "NOT_SENT"
	case SourceAuthoritativeNotFound:
		code = "NOT_FOUND"
	case SourceManual:
		code = "MANUAL"
	}
	if code == "" {
		code = "REJECTED"
	}
	return &code
}

// ToSiblings reduces rows to the gate's view.
func ToSiblings(rows []*Row) []Sibling {
	out := make([]Sibling, 0, len(rows))
	for _, r := range rows {
		s := Sibling{Version: r.Version, Status: r.Status, Source: r.Source, Retryable: r.Retryable}
		if r.FailedFactAt != nil {
			s.FailedFactAt = *r.FailedFactAt
		}
		out = append(out, s)
	}
	return out
}

// Anomaly records one detection of a rule breach (every occurrence, for counting and logs).
func (t *Tx) Anomaly(ctx context.Context, tenantID string, attemptID *uuid.UUID, kind, eventID string, detail map[string]any) error {
	d, _ := json.Marshal(detail)
	if _, err := t.tx.Exec(ctx, q("anomaly_insert"), tenantID, attemptID, kind, eventID, d); err != nil {
		return fmt.Errorf("attempt: anomaly %s: %w", kind, err)
	}
	return nil
}

// Escalate opens the (attempt, reason) escalation insert-first with its escalation.opened
// outbox row. What an existing one means is EscalationOnOpen's: open, a no-op; closed, a
// recurrence recorded as an anomaly and counted, not reopened (docs/design.md#escalations).
func (t *Tx) Escalate(ctx context.Context, a *Row, reason Reason, detail string) error {
	escID := escalationID(a, reason)
	tag, err := t.tx.Exec(ctx, q("escalation_insert"), escID, a.ID, a.TenantID, string(reason), string(EscalationOpen))
	if err != nil {
		return fmt.Errorf("attempt: escalate %s %s: %w", a.IdempotencyKey, reason, err)
	}
	existing := EscalationState("")
	if tag.RowsAffected() == 0 {
		if err := t.tx.QueryRow(ctx, q("escalation_state"), a.ID, string(reason)).Scan(&existing); err != nil {
			return fmt.Errorf("attempt: escalation state: %w", err)
		}
	}
	switch EscalationOnOpen(existing) {
	case OpeningNone:
		return nil
	case OpeningRecurred:
		t.EscalationRecurred++
		return t.Anomaly(ctx, a.TenantID, &a.ID, "escalation_recurred", "", map[string]any{"reason": reason})
	}
	t.EscalationsOpened[reason]++
	if reason == ReasonBlindRetry {
		t.BlindRetries++
		if _, err := t.tx.Exec(ctx, q("booking_attempt_mark_blind_retry"), a.ID); err != nil {
			return err
		}
	}
	m, err := t.openedMessage(a, escID, reason, detail)
	if err != nil {
		return err
	}
	return outbox.Insert(ctx, t.tx, m)
}

// escalationID is the (attempt, reason) escalation's deterministic id.
func escalationID(a *Row, reason Reason) string {
	return events.OutputID(a.TenantID, a.IdempotencyKey, "escalation:"+string(reason), "")
}

// openedMessage builds escalation.opened for a's escalation escID.
func (t *Tx) openedMessage(a *Row, escID string, reason Reason, detail string) (outbox.Message, error) {
	msg := events.EscalationOpened{
		OutputEnvelope: t.envelope(a, events.EventEscalationOpened, events.OutputID(a.TenantID, a.IdempotencyKey, "escalation.opened", escID)),
		EscalationID:   escID, Reason: string(reason), AttemptStatus: string(a.Status), UnknownSince: a.UnknownSince,
		Checks: a.CheckCount, Summary: summary(a, reason, detail),
	}
	if a.LastLookupResult != "" {
		msg.LastLookupResult = &a.LastLookupResult
	}
	return t.message(cmp.Or(t.cfg.EscalationsTopic, events.TopicEscalations), a, msg.OutputEnvelope, msg)
}

// closedMessage builds escalation.closed for a's escalation escID, closed by closedBy (actor
// "" none).
func (t *Tx) closedMessage(a *Row, escID, closedBy, actor string) (outbox.Message, error) {
	msg := events.EscalationClosed{
		OutputEnvelope: t.envelope(a, events.EventEscalationClosed, events.OutputID(a.TenantID, a.IdempotencyKey, "escalation.closed", escID)),
		EscalationID:   escID, ClosedBy: closedBy,
	}
	if actor != "" {
		msg.Actor = &actor
	}
	return t.message(cmp.Or(t.cfg.EscalationsTopic, events.TopicEscalations), a, msg.OutputEnvelope, msg)
}

// ClaimReference claims (provider, operation, reference) for a insert-first. A claim held by
// another attempt is OnClaimConflict's: a duplicate provider reference, both escalated.
func (t *Tx) ClaimReference(ctx context.Context, a *Row, eventID string) error {
	if a.ProviderReference == "" {
		return nil
	}
	tag, err := t.tx.Exec(ctx, q("provider_reference_claim_insert"), a.Provider, string(a.Operation), a.ProviderReference, a.ID, a.TenantID)
	if err != nil {
		return fmt.Errorf("attempt: claim reference: %w", err)
	}
	if tag.RowsAffected() == 1 {
		return nil
	}
	var owner uuid.UUID
	if err := t.tx.QueryRow(ctx, q("provider_reference_claim_owner"), a.Provider, string(a.Operation), a.ProviderReference).Scan(&owner); err != nil {
		return fmt.Errorf("attempt: read claim: %w", err)
	}
	dup, an := OnClaimConflict(a, owner, eventID)
	if !dup {
		return nil
	}
	t.DuplicateProvRefs++
	if err := t.Anomaly(ctx, a.TenantID, &a.ID, an.Kind, an.EventID, an.Detail); err != nil {
		return err
	}
	// The owner is another intent's attempt: escalated without its intent lock (UNIQUE guards it).
	other, err := ReadByID(ctx, t.tx, owner)
	if err != nil {
		return fmt.Errorf("attempt: read owner: %w", err)
	}
	if err := t.Escalate(ctx, a, ReasonDuplicateProviderReference, ""); err != nil {
		return err
	}
	return t.Escalate(ctx, other, ReasonDuplicateProviderReference, "")
}

func (t *Tx) maxVersions(provider string) int { return t.cfg.Policies[provider].maxVersions() }
