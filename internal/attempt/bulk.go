package attempt

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/bookrecon/bookrecon/events"
	"github.com/bookrecon/bookrecon/internal/outbox"
)

// Bulk applies the common cases of a batch of deduplicated attempt events with a handful of
// set-based statements instead of a dozen statements per event: a version-1 attempt started,
// then settled by its own success or failure event, with no other version of its (intent,
// operation, subject), no kept decision, no provider reference already claimed by another
// attempt. Everything else — UNKNOWN, key conflicts, contradictions, late starts, retries —
// goes to the per-event path (ApplyEvent), and so does every later event of an intent once one
// of its events did: the two paths never interleave on an intent.
//
// Use: NewBulk (locks every intent, reads their attempts, and plans: an intent goes the bulk
// way only if every one of its events in the batch is a common case), then Try for each event
// in batch order — false means "apply it with ApplyEvent now" — then Flush. Because an intent
// is wholly on one path, the per-event path never reads state that a buffered bulk write has
// not yet stored. The rules and effects are those of ApplyEvent (DESIGN.md "Attempt states",
// "Storage rules").
type Bulk struct {
	t        *Tx
	codes    []string
	byKey    map[[2]string]*Row // (tenant, key) → attempt, as the batch leaves it
	group    map[string][]*Row  // tenant/intent/op/subject → its versions
	pending  map[[2]string]bool // (tenant, key) with a kept manual decision
	dirty    map[[2]string]bool // (tenant, intent) handed to the per-event path
	inserts  []*Row             // new attempts, final state
	updates  map[uuid.UUID]*Row // existing attempts changed
	audits   []bulkAudit
	messages []outbox.Message
	claims   []*Row
	now      time.Time
	plan     bool // a planning copy: decides, builds nothing
}

type bulkAudit struct {
	id       uuid.UUID
	from, to Status
	eventID  string
	note     string
}

// ErrPlanDiverged means Bulk.Try refused an event of an intent its plan had put on the bulk
// path; the caller reruns the batch on the per-event path.
var ErrPlanDiverged = errors.New("attempt: bulk plan diverged")

func groupKey(tenant, intent string, op events.Operation, subject string) string {
	return tenant + "\x00" + intent + "\x00" + string(op) + "\x00" + subject
}

// NewBulk locks the intents of evs (sorted, insert-first), reads all their attempts and kept
// decisions in three statements, and plans which intents go the bulk way. digests[i] is
// evs[i].Digests() (computed by the caller, which decodes in parallel). Intents in
// perEvent (e.g. those with a manual decision in the same batch) always take the per-event path.
func (t *Tx) NewBulk(ctx context.Context, evs []events.Attempt, digests []events.Digests, transportCodes []string, perEvent [][2]string) (*Bulk, error) {
	b, err := t.loadBulk(ctx, evs, transportCodes)
	if err != nil {
		return nil, err
	}
	for _, k := range perEvent {
		b.dirty[k] = true
	}
	// Plan on a scratch copy: the same deterministic rules, no effects kept.
	scratch := &Bulk{t: NewTx(t.tx, t.cfg), codes: b.codes, byKey: map[[2]string]*Row{}, group: map[string][]*Row{},
		pending: b.pending, dirty: map[[2]string]bool{}, updates: map[uuid.UUID]*Row{}, now: b.now, plan: true}
	copies := map[*Row]*Row{}
	cp := func(a *Row) *Row {
		if c, ok := copies[a]; ok {
			return c
		}
		c := *a
		copies[a] = &c
		return &c
	}
	for k, a := range b.byKey {
		scratch.byKey[k] = cp(a)
	}
	for g, rs := range b.group {
		for _, a := range rs {
			scratch.group[g] = append(scratch.group[g], cp(a))
		}
	}
	for k := range b.dirty {
		scratch.dirty[k] = true
	}
	for i, ev := range evs {
		scratch.Try(ev, digests[i])
	}
	b.dirty = scratch.dirty
	return b, nil
}

// PerEvent reports whether the intent of ev takes the per-event path in this batch.
func (b *Bulk) PerEvent(ev events.Attempt) bool {
	return b.dirty[[2]string{ev.TenantID, ev.BookingIntentID}]
}

func (t *Tx) loadBulk(ctx context.Context, evs []events.Attempt, transportCodes []string) (*Bulk, error) {
	b := &Bulk{t: t, codes: transportCodes, byKey: map[[2]string]*Row{}, group: map[string][]*Row{},
		pending: map[[2]string]bool{}, dirty: map[[2]string]bool{}, updates: map[uuid.UUID]*Row{}, now: time.Now()}
	seen := map[[2]string]bool{}
	var tenants, intents, keyTenants, keys []string
	for _, ev := range evs {
		k := [2]string{ev.TenantID, ev.BookingIntentID}
		if !seen[k] {
			seen[k] = true
			tenants, intents = append(tenants, ev.TenantID), append(intents, ev.BookingIntentID)
		}
		keyTenants, keys = append(keyTenants, ev.TenantID), append(keys, ev.IdempotencyKey)
	}
	if len(tenants) == 0 {
		return b, nil
	}
	// The database clock, as in the per-event path: the transaction's start time.
	var err error
	if b.now, err = t.Now(ctx); err != nil {
		return nil, err
	}
	if _, err := t.tx.Exec(ctx, q("booking_intent_lock_many"), tenants, intents); err != nil {
		return nil, fmt.Errorf("attempt: lock %d intents: %w", len(tenants), err)
	}
	all, err := scanRows(t.tx.Query(ctx, q("booking_attempt_of_intents"), tenants, intents))
	if err != nil {
		return nil, fmt.Errorf("attempt: read attempts: %w", err)
	}
	for _, a := range all {
		b.byKey[[2]string{a.TenantID, a.IdempotencyKey}] = a
		g := groupKey(a.TenantID, a.BookingIntentID, a.Operation, a.Subject)
		b.group[g] = append(b.group[g], a)
	}
	rows, err := t.tx.Query(ctx, q("pending_decision_keys_waiting"), keyTenants, keys)
	if err != nil {
		return nil, fmt.Errorf("attempt: read kept decisions: %w", err)
	}
	pk, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) ([2]string, error) {
		var k [2]string
		return k, r.Scan(&k[0], &k[1])
	})
	if err != nil {
		return nil, fmt.Errorf("attempt: read kept decisions: %w", err)
	}
	for _, k := range pk {
		b.pending[k] = true
	}
	return b, nil
}

// Try applies ev in memory when its intent takes the bulk way and reports whether it did; when
// it did not, the caller applies ev with ApplyEvent before the next Try.
func (b *Bulk) Try(ev events.Attempt, d events.Digests) bool {
	ik := [2]string{ev.TenantID, ev.BookingIntentID}
	if b.dirty[ik] {
		return false
	}
	if ok := b.try(ev, d); !ok {
		b.dirty[ik] = true
		return false
	}
	return true
}

func (b *Bulk) try(ev events.Attempt, d events.Digests) bool {
	key := [2]string{ev.TenantID, ev.IdempotencyKey}
	if ev.OperationVersion != 1 || b.pending[key] {
		return false
	}
	cur := b.byKey[key]
	for _, s := range b.group[groupKey(ev.TenantID, ev.BookingIntentID, ev.Operation, ev.KeySubject)] {
		if s != cur {
			return false // another version: the gate and duplicate bookings need the full path
		}
	}
	if cur != nil && cur.Escalated {
		return false
	}
	if ev.EventType == events.EventStarted && d.RequestHash == "" {
		return false
	}
	if ev.EventType != events.EventStarted {
		d = events.Digests{}
	}
	st := OnEvent(cur, ev, FactOf(ev, b.codes), d, Env{Now: b.now, FirstCheck: b.t.cfg.FirstCheck, Policy: b.t.cfg.Policies[ev.Provider]})
	if len(st.Open) > 0 || len(st.Anomalies) > 0 {
		return false // an escalation (no_lookup_capability) needs the per-event path
	}
	a := st.Next
	switch v := st.Verdict; {
	case v.Action == ActionCreate:
		b.inserts = append(b.inserts, a)
		b.byKey[key] = a
		g := groupKey(a.TenantID, a.BookingIntentID, a.Operation, a.Subject)
		b.group[g] = append(b.group[g], a)
		b.t.Created[a.Status]++
	case v.Action == ActionTransition && cur.Status == StatusInProgress:
		*cur = *a
		a = cur
		if !b.isInsert(cur) {
			b.updates[cur.ID] = cur
		}
	case v.Action == ActionRepeat:
		b.t.IdempotentRepeats++
	default:
		return false
	}
	b.audits = append(b.audits, bulkAudit{a.ID, st.Audit.From, st.Audit.To, ev.EventID, st.Audit.Note})
	if st.UnknownClass != "" {
		b.t.UnknownByClass[st.UnknownClass]++
	}
	if st.Resolve != nil && !b.plan {
		m, err := b.t.resolvedMessage(a, ev.EventID)
		if err != nil {
			return false
		}
		b.messages = append(b.messages, m)
	}
	if st.Claim && a.ProviderReference != "" {
		b.claims = append(b.claims, a)
	}
	return true
}

func (b *Bulk) isInsert(a *Row) bool {
	for _, r := range b.inserts {
		if r == a {
			return true
		}
	}
	return false
}

// Flush writes everything Try applied: attempts inserted and updated, audit rows, outbox rows
// and provider reference claims, then escalates the claims another attempt already holds.
func (b *Bulk) Flush(ctx context.Context) error {
	tx := b.t.tx
	if n := len(b.inserts); n > 0 {
		rows := make([][]any, 0, n)
		for _, a := range b.inserts {
			rc := a.recovery
			rows = append(rows, []any{a.ID, a.TenantID, a.BookingIntentID, string(a.Operation), a.Subject, a.Version,
				a.IdempotencyKey, a.Provider, string(a.Status), nz(string(a.Source)), requestJSON(a.request), nz(a.RequestHash), nz(a.Fingerprint),
				nz(rc.ClientReference), nz(rc.ProviderSessionID), nz(rc.CorrelationID), nz(rc.PaymentReference), nz(rc.ProviderReference),
				nz(rc.ProviderIdempotencyKey), nz(a.ProviderReference), nz(a.FailureCode), retryableOf(a), a.StartedAt, a.FirstEventAt,
				a.WindowStart, a.FailedFactAt, a.TerminalAt, a.CreatedAt, a.CreatedAt, nz(a.TimeoutClass), a.requestSent, a.UnknownSince, a.NextCheckAt})
		}
		_, err := tx.CopyFrom(ctx, pgx.Identifier{"booking_attempt"}, []string{"id", "tenant_id", "booking_intent_id", "operation",
			"subject", "operation_version", "idempotency_key", "provider", "status", "resolution_source", "request", "request_hash",
			"fingerprint", "client_reference", "provider_session_id", "correlation_id", "payment_reference", "subject_provider_reference",
			"provider_idempotency_key", "provider_reference", "failure_code", "retryable", "started_at", "first_event_at",
			"window_start", "failed_fact_at", "terminal_at", "created_at", "updated_at", "timeout_class", "request_sent",
			"unknown_since", "next_check_at"}, pgx.CopyFromRows(rows))
		if err != nil {
			return fmt.Errorf("attempt: bulk insert %d attempts: %w", n, err)
		}
	}
	if n := len(b.updates); n > 0 {
		var ids []uuid.UUID
		var status, source, ref, code, timeoutClass []string
		var retryable []*bool
		var window []time.Time
		var failedAt, unknownSince, terminalAt, nextCheck []*time.Time
		for _, a := range b.updates {
			ids, timeoutClass = append(ids, a.ID), append(timeoutClass, a.TimeoutClass)
			status, source, ref, code = append(status, string(a.Status)), append(source, string(a.Source)), append(ref, a.ProviderReference), append(code, a.FailureCode)
			retryable, window, failedAt = append(retryable, retryableOf(a)), append(window, a.WindowStart), append(failedAt, a.FailedFactAt)
			unknownSince, terminalAt, nextCheck = append(unknownSince, a.UnknownSince), append(terminalAt, a.TerminalAt), append(nextCheck, a.NextCheckAt)
		}
		if _, err := tx.Exec(ctx, q("booking_attempt_update_many"), ids, status, source, ref, code, retryable, window, failedAt,
			timeoutClass, unknownSince, terminalAt, nextCheck); err != nil {
			return fmt.Errorf("attempt: bulk update %d attempts: %w", n, err)
		}
	}
	if n := len(b.audits); n > 0 {
		rows := make([][]any, 0, n)
		for _, a := range b.audits {
			rows = append(rows, []any{a.id, nz(string(a.from)), string(a.to), CauseEvent, a.eventID, a.note})
		}
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{"attempt_transition"},
			[]string{"attempt_id", "from_status", "to_status", "cause", "event_id", "note"}, pgx.CopyFromRows(rows)); err != nil {
			return fmt.Errorf("attempt: bulk audit: %w", err)
		}
	}
	if err := outbox.InsertMany(ctx, tx, b.messages); err != nil {
		return err
	}
	if len(b.claims) == 0 {
		return nil
	}
	// Claim in key order, so two batches claiming overlapping references cannot deadlock.
	slices.SortFunc(b.claims, func(x, y *Row) int {
		return cmp.Or(strings.Compare(x.Provider, y.Provider), strings.Compare(string(x.Operation), string(y.Operation)),
			strings.Compare(x.ProviderReference, y.ProviderReference))
	})
	var prov, op, ref, tenant []string
	var ids []uuid.UUID
	for _, a := range b.claims {
		prov, op, ref, tenant, ids = append(prov, a.Provider), append(op, string(a.Operation)), append(ref, a.ProviderReference),
			append(tenant, a.TenantID), append(ids, a.ID)
	}
	rows, err := tx.Query(ctx, q("provider_reference_claim_insert_many"), prov, op, ref, ids, tenant)
	if err != nil {
		return fmt.Errorf("attempt: bulk claim: %w", err)
	}
	claimed, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		return fmt.Errorf("attempt: bulk claim: %w", err)
	}
	won := make(map[uuid.UUID]bool, len(claimed))
	for _, id := range claimed {
		won[id] = true
	}
	for _, a := range b.claims {
		if !won[a.ID] {
			// Held by another attempt: the per-event rule escalates both.
			if err := b.t.ClaimReference(ctx, a, ""); err != nil {
				return err
			}
		}
	}
	return nil
}

func nz(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
