package attempt

import (
	"cmp"
	"context"
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
	"github.com/bookrecon/bookrecon/providers"
)

// Reason is an escalation reason (DESIGN.md "Escalations").
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

// Row is a booking_attempt row as the state machine needs it.
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
	Retryable         bool
	TimeoutClass      string
	StartedAt         *time.Time
	FirstEventAt      time.Time
	WindowStart       time.Time
	FailedFactAt      *time.Time
	CreatedAt         time.Time
	UnknownSince      *time.Time
	CheckCount        int
	LastLookupResult  string
	BlindRetry        bool
	GateJudged        bool
	Token             int64 // lease_token: the reconciler's fencing token
	// Escalated: an escalation other than no_lookup_capability exists for the attempt; its
	// checks continue at the maximum interval (DESIGN.md "Reconciliation").
	Escalated bool

	// Kept in memory by Bulk only.
	request     *events.Request
	recovery    events.Recovery
	terminal    bool
	unknownNow  bool
	requestSent *bool
}

// LeaseToken returns the attempt's fencing token.
func (a *Row) LeaseToken() int64 { return a.Token }

const rowColumns = `id, tenant_id, booking_intent_id, operation, subject, operation_version, idempotency_key,
	provider, status, coalesce(resolution_source, ''), coalesce(request_hash, ''), coalesce(fingerprint, ''),
	coalesce(client_reference, ''), coalesce(provider_reference, ''), coalesce(failure_code, ''),
	coalesce(retryable, false), coalesce(timeout_class, ''), started_at, first_event_at, window_start,
	failed_fact_at, created_at, unknown_since, check_count, coalesce(last_lookup_result, ''), blind_retry, gate_judged, lease_token,
	EXISTS (SELECT 1 FROM escalation e WHERE e.attempt_id = booking_attempt.id AND e.reason <> 'no_lookup_capability')`

func scanRow(r pgx.Row) (*Row, error) {
	var a Row
	err := r.Scan(&a.ID, &a.TenantID, &a.BookingIntentID, &a.Operation, &a.Subject, &a.Version, &a.IdempotencyKey,
		&a.Provider, &a.Status, &a.Source, &a.RequestHash, &a.Fingerprint, &a.ClientReference, &a.ProviderReference,
		&a.FailureCode, &a.Retryable, &a.TimeoutClass, &a.StartedAt, &a.FirstEventAt, &a.WindowStart,
		&a.FailedFactAt, &a.CreatedAt, &a.UnknownSince, &a.CheckCount, &a.LastLookupResult, &a.BlindRetry, &a.GateJudged, &a.Token, &a.Escalated)
	if err != nil {
		return nil, err
	}
	return &a, nil
}

// Tx applies state-machine verdicts inside one database transaction and collects Effects.
type Tx struct {
	tx  pgx.Tx
	cfg *Config
	Effects
}

// NewTx wraps tx.
func NewTx(tx pgx.Tx, cfg *Config) *Tx {
	t := &Tx{tx: tx, cfg: cfg}
	t.init()
	return t
}

// LockIntent creates the intent row insert-first and locks it (FOR UPDATE semantics through
// ON CONFLICT DO UPDATE): every transaction that creates or changes an attempt of the intent
// runs after it (DESIGN.md "Storage rules", lock order intent → attempts → claims/escalations).
func (t *Tx) LockIntent(ctx context.Context, tenantID, intentID string) error {
	_, err := t.tx.Exec(ctx, `INSERT INTO booking_intent (tenant_id, booking_intent_id) VALUES ($1, $2)
		ON CONFLICT (tenant_id, booking_intent_id) DO UPDATE SET tenant_id = excluded.tenant_id`, tenantID, intentID)
	if err != nil {
		return fmt.Errorf("attempt: lock intent %s/%s: %w", tenantID, intentID, err)
	}
	return nil
}

// ByKey reads the attempt (tenant, key) FOR UPDATE; nil when it does not exist.
func (t *Tx) ByKey(ctx context.Context, tenantID, key string) (*Row, error) {
	a, err := scanRow(t.tx.QueryRow(ctx, `SELECT `+rowColumns+` FROM booking_attempt
		WHERE tenant_id = $1 AND idempotency_key = $2 FOR UPDATE`, tenantID, key))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("attempt: read %s/%s: %w", tenantID, key, err)
	}
	return a, nil
}

// ReadByID reads one attempt without locking it.
func ReadByID(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, id uuid.UUID) (*Row, error) {
	a, err := scanRow(q.QueryRow(ctx, `SELECT `+rowColumns+` FROM booking_attempt WHERE id = $1`, id))
	if err != nil {
		return nil, fmt.Errorf("attempt: read %s: %w", id, err)
	}
	return a, nil
}

// ByID reads one attempt FOR UPDATE.
func (t *Tx) ByID(ctx context.Context, id uuid.UUID) (*Row, error) {
	a, err := scanRow(t.tx.QueryRow(ctx, `SELECT `+rowColumns+` FROM booking_attempt WHERE id = $1 FOR UPDATE`, id))
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

func (t *Tx) audit(ctx context.Context, id uuid.UUID, a Audit) error {
	var lookup []byte
	if a.Lookup != nil {
		var err error
		if lookup, err = json.Marshal(a.Lookup); err != nil {
			return err
		}
	}
	_, err := t.tx.Exec(ctx, `INSERT INTO attempt_transition (attempt_id, from_status, to_status, cause, event_id, lookup, actor, reason, note)
		VALUES ($1, nullif($2, ''), $3, $4, nullif($5, ''), $6, nullif($7, ''), nullif($8, ''), $9)`,
		id, string(a.From), string(a.To), a.Cause, a.EventID, lookup, a.Actor, a.Reason, a.Note)
	if err != nil {
		return fmt.Errorf("attempt: audit %s: %w", id, err)
	}
	return nil
}

// Audit records a on attempt id.
func (t *Tx) Audit(ctx context.Context, id uuid.UUID, a Audit) error { return t.audit(ctx, id, a) }

// Anomaly records one detection of a rule breach (every occurrence, for counting and logs).
func (t *Tx) Anomaly(ctx context.Context, tenantID string, attemptID *uuid.UUID, kind, eventID string, detail map[string]any) error {
	d, _ := json.Marshal(detail)
	_, err := t.tx.Exec(ctx, `INSERT INTO anomaly (tenant_id, attempt_id, kind, event_id, detail) VALUES ($1, $2, $3, nullif($4, ''), $5)`,
		tenantID, attemptID, kind, eventID, d)
	if err != nil {
		return fmt.Errorf("attempt: anomaly %s: %w", kind, err)
	}
	return nil
}

func (t *Tx) envelope(a *Row, typ events.EventType, id string) events.OutputEnvelope {
	return events.OutputEnvelope{SpecVersion: events.SpecVersion, EventID: id, EventType: typ,
		OccurredAt: time.Now().UTC(), TenantID: a.TenantID, BookingIntentID: a.BookingIntentID,
		IdempotencyKey: a.IdempotencyKey, Operation: a.Operation, OperationVersion: a.Version, Provider: a.Provider}
}

func (t *Tx) publish(ctx context.Context, topic string, a *Row, env events.OutputEnvelope, v any) error {
	m, err := t.message(topic, a, env, v)
	if err != nil {
		return err
	}
	return outbox.Insert(ctx, t.tx, m)
}

// message builds the outbox record of an output: JSON body, key = bookingIntentId, CloudEvents
// binary-mode headers.
func (t *Tx) message(topic string, a *Row, env events.OutputEnvelope, v any) (outbox.Message, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return outbox.Message{}, err
	}
	src := cmp.Or(t.cfg.Source, "/bookrecon")
	return outbox.Message{
		Topic: topic, Key: []byte(a.BookingIntentID), Value: b, EventID: env.EventID,
		Headers: outbox.CloudEvent(env.EventID, src, string(env.EventType), a.TenantID+"/"+a.IdempotencyKey, a.BookingIntentID, env.OccurredAt),
	}, nil
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
	return t.message(cmp.Or(t.cfg.ResolutionsTopic, events.TopicResolutions), a, msg.OutputEnvelope, msg)
}

// Escalate opens the (attempt, reason) escalation insert-first with its escalation.opened
// outbox row. A reason already open is a no-op; one that recurs after its escalation closed is
// recorded as an anomaly and counted, not reopened (DESIGN.md "Escalations").
func (t *Tx) Escalate(ctx context.Context, a *Row, reason Reason, detail string) error {
	escID := events.OutputID(a.TenantID, a.IdempotencyKey, "escalation:"+string(reason), "")
	tag, err := t.tx.Exec(ctx, `INSERT INTO escalation (escalation_id, attempt_id, tenant_id, reason) VALUES ($1, $2, $3, $4)
		ON CONFLICT (attempt_id, reason) DO NOTHING`, escID, a.ID, a.TenantID, string(reason))
	if err != nil {
		return fmt.Errorf("attempt: escalate %s %s: %w", a.IdempotencyKey, reason, err)
	}
	if tag.RowsAffected() == 0 {
		var state string
		if err := t.tx.QueryRow(ctx, `SELECT state FROM escalation WHERE attempt_id = $1 AND reason = $2`, a.ID, string(reason)).Scan(&state); err != nil {
			return fmt.Errorf("attempt: escalation state: %w", err)
		}
		if state == "closed" {
			t.EscalationRecurred++
			return t.Anomaly(ctx, a.TenantID, &a.ID, "escalation_recurred", "", map[string]any{"reason": reason})
		}
		return nil
	}
	t.EscalationsOpened[reason]++
	if reason == ReasonBlindRetry {
		t.BlindRetries++
		if _, err := t.tx.Exec(ctx, `UPDATE booking_attempt SET blind_retry = true WHERE id = $1`, a.ID); err != nil {
			return err
		}
	}
	msg := events.EscalationOpened{
		OutputEnvelope: t.envelope(a, events.EventEscalationOpened, events.OutputID(a.TenantID, a.IdempotencyKey, "escalation.opened", escID)),
		EscalationID:   escID, Reason: string(reason), AttemptStatus: string(a.Status), UnknownSince: a.UnknownSince,
		Checks: a.CheckCount, Summary: summary(a, reason, detail),
	}
	if a.LastLookupResult != "" {
		msg.LastLookupResult = &a.LastLookupResult
	}
	return t.publish(ctx, cmp.Or(t.cfg.EscalationsTopic, events.TopicEscalations), a, msg.OutputEnvelope, msg)
}

// summary is traveller-safe: operation, version, provider, reason; never personal data.
func summary(a *Row, reason Reason, detail string) string {
	s := fmt.Sprintf("%s v%d at %s is %s: %s", a.Operation, a.Version, a.Provider, a.Status, reason)
	if detail != "" {
		s += " (" + detail + ")"
	}
	return s
}

// CloseEscalations closes a's open escalations of the given reasons (nil: every reason) and
// publishes escalation.closed for each.
func (t *Tx) CloseEscalations(ctx context.Context, a *Row, reasons []Reason, closedBy, actor, onlyID string) error {
	rs := make([]string, 0, len(reasons))
	for _, r := range reasons {
		rs = append(rs, string(r))
	}
	rows, err := t.tx.Query(ctx, `UPDATE escalation SET state = 'closed', closed_at = now(), closed_by = $2, actor = nullif($3, '')
		WHERE attempt_id = $1 AND state = 'open' AND ($4::text[] IS NULL OR reason = ANY($4)) AND ($5 = '' OR escalation_id::text = $5)
		RETURNING escalation_id::text, reason`, a.ID, closedBy, actor, nilIfEmpty(rs, reasons == nil), onlyID)
	if err != nil {
		return fmt.Errorf("attempt: close escalations %s: %w", a.IdempotencyKey, err)
	}
	type closed struct{ id, reason string }
	var cs []closed
	for rows.Next() {
		var c closed
		if err := rows.Scan(&c.id, &c.reason); err != nil {
			rows.Close()
			return err
		}
		cs = append(cs, c)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for _, c := range cs {
		t.EscalationsClosed[Reason(c.reason)]++
		msg := events.EscalationClosed{
			OutputEnvelope: t.envelope(a, events.EventEscalationClosed, events.OutputID(a.TenantID, a.IdempotencyKey, "escalation.closed", c.id)),
			EscalationID:   c.id, ClosedBy: closedBy,
		}
		if actor != "" {
			msg.Actor = &actor
		}
		if err := t.publish(ctx, cmp.Or(t.cfg.EscalationsTopic, events.TopicEscalations), a, msg.OutputEnvelope, msg); err != nil {
			return err
		}
	}
	return nil
}

func nilIfEmpty(rs []string, all bool) []string {
	if all {
		return nil
	}
	return rs
}

// OutcomeReasons are the escalations that close when the attempt turns terminal.
var OutcomeReasons = []Reason{ReasonDeadlineExceeded, ReasonAmbiguousMatch, ReasonNoLookupCapability}

// resolutionFailureCode is attempt.resolved's failureCode (DESIGN.md "Contract v1").
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

// Resolved publishes attempt.resolved for a, caused by causeID, and closes its outcome
// escalations; closedBy is event, lookup or manual.
func (t *Tx) Resolved(ctx context.Context, a *Row, causeID, closedBy, actor string) error {
	m, err := t.resolvedMessage(a, causeID)
	if err != nil {
		return err
	}
	if err := outbox.Insert(ctx, t.tx, m); err != nil {
		return err
	}
	return t.CloseEscalations(ctx, a, OutcomeReasons, closedBy, actor, "")
}

// ClaimReference claims (provider, operation, reference) for a insert-first. A claim by another
// attempt is a duplicate provider reference: both attempts are escalated.
func (t *Tx) ClaimReference(ctx context.Context, a *Row, eventID string) error {
	if a.ProviderReference == "" {
		return nil
	}
	tag, err := t.tx.Exec(ctx, `INSERT INTO provider_reference_claim (provider, operation, reference, attempt_id, tenant_id)
		VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING`, a.Provider, string(a.Operation), a.ProviderReference, a.ID, a.TenantID)
	if err != nil {
		return fmt.Errorf("attempt: claim reference: %w", err)
	}
	if tag.RowsAffected() == 1 {
		return nil
	}
	var owner uuid.UUID
	if err := t.tx.QueryRow(ctx, `SELECT attempt_id FROM provider_reference_claim WHERE provider = $1 AND operation = $2 AND reference = $3`,
		a.Provider, string(a.Operation), a.ProviderReference).Scan(&owner); err != nil {
		return fmt.Errorf("attempt: read claim: %w", err)
	}
	if owner == a.ID {
		return nil
	}
	t.DuplicateProvRefs++
	if err := t.Anomaly(ctx, a.TenantID, &a.ID, string(ReasonDuplicateProviderReference), eventID, map[string]any{"owner": owner}); err != nil {
		return err
	}
	// The owner is another intent's attempt: escalated without its intent lock (UNIQUE guards it).
	other, err := scanRow(t.tx.QueryRow(ctx, `SELECT `+rowColumns+` FROM booking_attempt WHERE id = $1`, owner))
	if err != nil {
		return fmt.Errorf("attempt: read owner: %w", err)
	}
	if err := t.Escalate(ctx, a, ReasonDuplicateProviderReference, ""); err != nil {
		return err
	}
	return t.Escalate(ctx, other, ReasonDuplicateProviderReference, "")
}

// duplicateBookingOps are the operations where a second CONFIRMED version is a duplicate.
var duplicateBookingOps = map[events.Operation]bool{events.OpBook: true, events.OpPaymentAuthorize: true,
	events.OpPaymentCapture: true, events.OpRefund: true}

// CheckDuplicateBooking escalates duplicate_booking on a and every other CONFIRMED version of
// its (intent, operation, subject), when there is one. Call it with the intent locked.
func (t *Tx) CheckDuplicateBooking(ctx context.Context, a *Row) error {
	if a.Status != StatusConfirmed || !duplicateBookingOps[a.Operation] {
		return nil
	}
	rows, err := t.tx.Query(ctx, `SELECT `+rowColumns+` FROM booking_attempt WHERE tenant_id = $1 AND booking_intent_id = $2
		AND operation = $3 AND subject = $4 AND status = 'CONFIRMED' AND id <> $5 ORDER BY operation_version`,
		a.TenantID, a.BookingIntentID, string(a.Operation), a.Subject, a.ID)
	if err != nil {
		return fmt.Errorf("attempt: siblings: %w", err)
	}
	others, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*Row, error) { return scanRow(r) })
	if err != nil {
		return fmt.Errorf("attempt: siblings: %w", err)
	}
	if len(others) == 0 {
		return nil
	}
	if err := t.Escalate(ctx, a, ReasonDuplicateBooking, ""); err != nil {
		return err
	}
	for _, o := range others {
		if err := t.Escalate(ctx, o, ReasonDuplicateBooking, ""); err != nil {
			return err
		}
	}
	return nil
}

// siblings reads every version of a's (intent, operation, subject).
func (t *Tx) siblings(ctx context.Context, a *Row) ([]*Row, error) {
	rows, err := t.tx.Query(ctx, `SELECT `+rowColumns+` FROM booking_attempt WHERE tenant_id = $1 AND booking_intent_id = $2
		AND operation = $3 AND subject = $4 ORDER BY operation_version`, a.TenantID, a.BookingIntentID, string(a.Operation), a.Subject)
	if err != nil {
		return nil, fmt.Errorf("attempt: siblings: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (*Row, error) { return scanRow(r) })
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

func (t *Tx) maxVersions(provider string) int {
	if p, ok := t.cfg.Policies[provider]; ok && p.MaxVersions > 0 {
		return p.MaxVersions
	}
	return 3
}

// JudgeGate judges the safe retry gate for a (DESIGN.md "Safe retry gate and blind retries")
// and for every later version already judged, when a changed. A version that is not a safe
// retry is escalated blind_retry once; once raised it stays raised.
func (t *Tx) JudgeGate(ctx context.Context, a *Row, judgeSelf bool) error {
	sibs, err := t.siblings(ctx, a)
	if err != nil {
		return err
	}
	all := ToSiblings(sibs)
	for _, s := range sibs {
		self := s.ID == a.ID
		if s.Version < 2 || s.BlindRetry || (self && !judgeSelf) || (!self && (s.Version <= a.Version || !s.GateJudged)) {
			continue
		}
		start := s.FirstEventAt
		if s.StartedAt != nil {
			start = *s.StartedAt
		}
		var earlier []Sibling
		for _, e := range all {
			if e.Version < s.Version {
				earlier = append(earlier, e)
			}
		}
		if _, err := t.tx.Exec(ctx, `UPDATE booking_attempt SET gate_judged = true WHERE id = $1`, s.ID); err != nil {
			return err
		}
		if ok, reason := SafeRetry(s.Version, start, earlier, t.maxVersions(s.Provider)); !ok {
			if err := t.Anomaly(ctx, s.TenantID, &s.ID, string(ReasonBlindRetry), "", map[string]any{"gate": reason}); err != nil {
				return err
			}
			if err := t.Escalate(ctx, s, ReasonBlindRetry, string(reason)); err != nil {
				return err
			}
		}
	}
	return nil
}

// NeedsNoLookupEscalation applies DESIGN.md's reconciliation ladder to an UNKNOWN attempt: true
// when no lookup can ever apply (the provider has none, or the start is applied and none of its
// lookups has the identity it needs).
func (t *Tx) NeedsNoLookupEscalation(a *Row) bool {
	p := t.cfg.Policies[a.Provider]
	has := func(k string) bool {
		for _, l := range p.Lookups {
			if l == k {
				return true
			}
		}
		return false
	}
	if a.ProviderReference != "" && has("provider_reference") {
		return false
	}
	if a.ClientReference != "" && has("client_reference") {
		return false
	}
	started := a.RequestHash != ""
	if a.Operation.HasFingerprint() && started && a.Fingerprint != "" && has("fingerprint") {
		return false
	}
	return len(p.Lookups) == 0 || started
}
