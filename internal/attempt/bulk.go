package attempt

import (
	"cmp"
	"context"
	"encoding/json"
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
	// The database clock, as now() in the per-event path: the transaction's start time.
	if err := t.tx.QueryRow(ctx, `SELECT now()`).Scan(&b.now); err != nil {
		return nil, fmt.Errorf("attempt: read clock: %w", err)
	}
	if _, err := t.tx.Exec(ctx, `INSERT INTO booking_intent (tenant_id, booking_intent_id)
		SELECT t, i FROM unnest($1::text[], $2::text[]) AS u(t, i) ORDER BY t, i
		ON CONFLICT (tenant_id, booking_intent_id) DO UPDATE SET tenant_id = excluded.tenant_id`, tenants, intents); err != nil {
		return nil, fmt.Errorf("attempt: lock %d intents: %w", len(tenants), err)
	}
	rows, err := t.tx.Query(ctx, `SELECT `+rowColumns+` FROM booking_attempt
		WHERE (tenant_id, booking_intent_id) IN (SELECT * FROM unnest($1::text[], $2::text[]))
		ORDER BY id FOR UPDATE`, tenants, intents)
	if err != nil {
		return nil, fmt.Errorf("attempt: read attempts: %w", err)
	}
	all, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*Row, error) { return scanRow(r) })
	if err != nil {
		return nil, fmt.Errorf("attempt: read attempts: %w", err)
	}
	for _, a := range all {
		b.byKey[[2]string{a.TenantID, a.IdempotencyKey}] = a
		g := groupKey(a.TenantID, a.BookingIntentID, a.Operation, a.Subject)
		b.group[g] = append(b.group[g], a)
	}
	rows, err = t.tx.Query(ctx, `SELECT DISTINCT tenant_id, idempotency_key FROM pending_decision
		WHERE applied_at IS NULL AND failed_at IS NULL AND (tenant_id, idempotency_key) IN (SELECT * FROM unnest($1::text[], $2::text[]))`, keyTenants, keys)
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
	var c *Current
	if cur != nil {
		if cur.Escalated {
			return false
		}
		c = &Current{Status: cur.Status, BookingIntentID: cur.BookingIntentID, Provider: cur.Provider,
			RequestHash: cur.RequestHash, ProviderReference: cur.ProviderReference}
	}
	f := FactOf(ev, b.codes)
	if ev.EventType == events.EventStarted && d.RequestHash == "" {
		return false
	}
	v := Decide(c, ev, f, d.RequestHash)
	switch {
	case v.Action == ActionCreate && ev.EventType == events.EventStarted:
		a := b.newRow(ev, d)
		a.Status = StatusInProgress
		b.add(a, ev, v)
	case v.Action == ActionCreate && v.Status.Terminal():
		a := b.newRow(ev, events.Digests{})
		b.settle(a, ev, f, v)
		b.add(a, ev, v)
	case v.Action == ActionCreate && v.Status == StatusUnknown:
		a := b.newRow(ev, events.Digests{})
		if !b.unknown(a, ev, f) {
			return false
		}
		b.add(a, ev, v)
	case v.Action == ActionTransition && cur.Status == StatusInProgress && v.Status == StatusUnknown:
		before := *cur
		if !b.unknown(cur, ev, f) {
			*cur = before
			return false
		}
		if !b.isInsert(cur) {
			b.updates[cur.ID] = cur
		}
		b.audits = append(b.audits, bulkAudit{cur.ID, StatusInProgress, StatusUnknown, ev.EventID, v.Note})
	case v.Action == ActionTransition && cur.Status == StatusInProgress && v.Status.Terminal():
		from := cur.Status
		b.settle(cur, ev, f, v)
		if !b.isInsert(cur) {
			b.updates[cur.ID] = cur
		}
		b.audits = append(b.audits, bulkAudit{cur.ID, from, cur.Status, ev.EventID, v.Note})
		if err := b.resolve(cur, ev.EventID); err != nil {
			return false
		}
	case v.Action == ActionRepeat:
		b.t.IdempotentRepeats++
		b.audits = append(b.audits, bulkAudit{cur.ID, cur.Status, cur.Status, ev.EventID, v.Note})
	default:
		return false
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

func (b *Bulk) newRow(ev events.Attempt, d events.Digests) *Row {
	a := &Row{ID: uuid.Must(uuid.NewV7()), TenantID: ev.TenantID, BookingIntentID: ev.BookingIntentID,
		Operation: ev.Operation, Subject: ev.KeySubject, Version: ev.OperationVersion, IdempotencyKey: ev.IdempotencyKey,
		Provider: ev.Provider, RequestHash: d.RequestHash, ClientReference: ev.Recovery.ClientReference,
		FirstEventAt: ev.OccurredAt, WindowStart: later(ev.OccurredAt, b.now), CreatedAt: b.now}
	if d.RequestHash != "" {
		t := ev.OccurredAt
		a.StartedAt = &t
		a.Fingerprint = d.Fingerprint
		a.request = ev.Request
	}
	a.recovery = ev.Recovery
	return a
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// unknown records a UNKNOWN in memory; false when the attempt needs the per-event path (no
// lookup can ever settle it: the no_lookup_capability escalation).
func (b *Bulk) unknown(a *Row, ev events.Attempt, f Fact) bool {
	a.Status = StatusUnknown
	if f.Reference != "" {
		a.ProviderReference = f.Reference
	}
	if b.t.NeedsNoLookupEscalation(a) {
		return false
	}
	a.TimeoutClass = string(f.TimeoutClass)
	if f.Transport {
		a.FailureCode = f.FailureCode // the transport-timeout code, as ApplyEvent keeps it
	}
	if ev.Outcome != nil && !f.Transport && f.TimeoutClass == events.TimeoutConnect {
		a.requestSent = ev.Outcome.RequestSent
	}
	a.WindowStart = later(ev.OccurredAt, b.now)
	t := b.now
	a.UnknownSince = &t
	a.unknownNow = true
	b.t.UnknownByClass[f.TimeoutClass.MetricLabel()]++
	if a.ProviderReference != "" {
		b.claims = append(b.claims, a)
	}
	return true
}

// settle applies a terminal outcome to a in memory.
func (b *Bulk) settle(a *Row, ev events.Attempt, f Fact, v Verdict) {
	a.Status, a.Source = v.Status, v.Source
	if f.Reference != "" {
		a.ProviderReference = f.Reference
	}
	if f.FailureCode != "" {
		a.FailureCode = f.FailureCode
	}
	if f.TimeoutClass != "" { // not_sent: connect_timeout with requestSent false, as ApplyEvent keeps it
		a.TimeoutClass = string(f.TimeoutClass)
		if ev.Outcome != nil && f.TimeoutClass == events.TimeoutConnect {
			a.requestSent = ev.Outcome.RequestSent
		}
	}
	a.WindowStart = later(ev.OccurredAt, b.now)
	if v.Status == StatusFailed {
		a.Retryable = f.Retryable
		t := ev.OccurredAt
		a.FailedFactAt = &t
	}
	a.terminal = true
}

func (b *Bulk) add(a *Row, ev events.Attempt, v Verdict) {
	b.inserts = append(b.inserts, a)
	b.byKey[[2]string{a.TenantID, a.IdempotencyKey}] = a
	g := groupKey(a.TenantID, a.BookingIntentID, a.Operation, a.Subject)
	b.group[g] = append(b.group[g], a)
	b.t.Created[a.Status]++
	b.audits = append(b.audits, bulkAudit{a.ID, "", a.Status, ev.EventID, v.Note})
	if a.Status.Terminal() {
		_ = b.resolve(a, ev.EventID)
	}
}

func (b *Bulk) resolve(a *Row, causeID string) error {
	if b.plan {
		return nil
	}
	m, err := b.t.resolvedMessage(a, causeID)
	if err != nil {
		return err
	}
	b.messages = append(b.messages, m)
	if a.ProviderReference != "" {
		b.claims = append(b.claims, a)
	}
	return nil
}

// Flush writes everything Try applied: attempts inserted and updated, audit rows, outbox rows
// and provider reference claims, then escalates the claims another attempt already holds.
func (b *Bulk) Flush(ctx context.Context) error {
	tx := b.t.tx
	if n := len(b.inserts); n > 0 {
		rows := make([][]any, 0, n)
		for _, a := range b.inserts {
			req, _ := json.Marshal(a.request)
			if a.request == nil {
				req = nil
			}
			var retryable *bool
			var failedAt, terminalAt *time.Time
			if a.terminal {
				t := b.now
				terminalAt = &t
			}
			if a.Status == StatusFailed {
				retryable, failedAt = &a.Retryable, a.FailedFactAt
			}
			rc := a.recovery
			var unknownSince, nextCheck *time.Time
			if a.unknownNow {
				n := b.now.Add(b.t.firstCheckDuration())
				unknownSince, nextCheck = a.UnknownSince, &n
			}
			rows = append(rows, []any{a.ID, a.TenantID, a.BookingIntentID, string(a.Operation), a.Subject, a.Version,
				a.IdempotencyKey, a.Provider, string(a.Status), nz(string(a.Source)), req, nz(a.RequestHash), nz(a.Fingerprint),
				nz(rc.ClientReference), nz(rc.ProviderSessionID), nz(rc.CorrelationID), nz(rc.PaymentReference), nz(rc.ProviderReference),
				nz(rc.ProviderIdempotencyKey), nz(a.ProviderReference), nz(a.FailureCode), retryable, a.StartedAt, a.FirstEventAt,
				a.WindowStart, failedAt, terminalAt, a.CreatedAt, a.CreatedAt, nz(a.TimeoutClass), a.requestSent, unknownSince, nextCheck})
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
		var status, source, ref, code []string
		var retryable []*bool
		var window []time.Time
		var failedAt []*time.Time
		var timeoutClass []string
		for _, a := range b.updates {
			timeoutClass = append(timeoutClass, a.TimeoutClass)
			ids = append(ids, a.ID)
			status, source, ref, code = append(status, string(a.Status)), append(source, string(a.Source)), append(ref, a.ProviderReference), append(code, a.FailureCode)
			var r *bool
			if a.Status == StatusFailed {
				r = &a.Retryable
			}
			retryable, window, failedAt = append(retryable, r), append(window, a.WindowStart), append(failedAt, a.FailedFactAt)
		}
		_, err := tx.Exec(ctx, `UPDATE booking_attempt a SET status = u.status, resolution_source = nullif(u.source, ''),
			provider_reference = coalesce(nullif(u.ref, ''), a.provider_reference), failure_code = coalesce(nullif(u.code, ''), a.failure_code),
			retryable = coalesce(u.retryable, a.retryable), window_start = u.win, failed_fact_at = u.failed_at,
			timeout_class = coalesce(nullif(u.tc, ''), a.timeout_class),
			unknown_since = CASE WHEN u.status = 'UNKNOWN' THEN now() ELSE a.unknown_since END,
			terminal_at = CASE WHEN u.status IN ('CONFIRMED', 'FAILED') THEN now() END,
			next_check_at = CASE WHEN u.status = 'UNKNOWN' THEN now() + $10::interval END,
			updated_at = now()
			FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bool[], $7::timestamptz[], $8::timestamptz[], $9::text[])
				AS u(id, status, source, ref, code, retryable, win, failed_at, tc)
			WHERE a.id = u.id`, ids, status, source, ref, code, retryable, window, failedAt, timeoutClass, b.t.firstCheck())
		if err != nil {
			return fmt.Errorf("attempt: bulk update %d attempts: %w", n, err)
		}
	}
	if n := len(b.audits); n > 0 {
		rows := make([][]any, 0, n)
		for _, a := range b.audits {
			rows = append(rows, []any{a.id, nz(string(a.from)), string(a.to), "event", a.eventID, a.note})
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
	rows, err := tx.Query(ctx, `INSERT INTO provider_reference_claim (provider, operation, reference, attempt_id, tenant_id)
		SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::uuid[], $5::text[])
		ON CONFLICT DO NOTHING RETURNING attempt_id`, prov, op, ref, ids, tenant)
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
