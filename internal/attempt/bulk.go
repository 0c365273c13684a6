package attempt

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/bookrecon/bookrecon/events"
	"github.com/bookrecon/bookrecon/internal/outbox"
)

// Bulk is the batch write path: it locks a batch's intents and loads their attempts, kept
// decisions and the escalations of the attempts already escalated set-based (NewBulk), applies
// the transition function (OnEvent) event by event in batch order to the attempts in memory,
// and flushes what it buffered with a handful of set-based statements (Flush) instead of a
// dozen statements per event. It buffers the steps whose effects it can write set-based:
// creations, IN_PROGRESS → UNKNOWN or terminal, UNKNOWN → terminal (closing at most one open
// outcome escalation), late starts, repeats, key conflicts, contradictions and stale reports,
// of any version, with the safe retry gate judged on the versions in memory (GateJudgements:
// gate_judged, and for a blind retry its anomaly and blind_retry escalation) and duplicate
// bookings found among them (DuplicateBookings), on attempts without a kept decision; an
// escalation asked for again is EscalationOnOpen's as the loaded states say. Any other step —
// two outcome escalations to close (their order is the database's), a no_lookup_capability
// that may have been closed before, a reference recorded by a repeated outcome_unknown, … — is
// written by the per-event path (ApplyEvent), and so is every later event of its intent in the
// batch: Apply first flushes what the batch buffered for that intent, so the per-event path
// reads what the bulk path decided. The rules and effects are those of ApplyEvent
// (docs/design.md#attempt-states, docs/design.md#safe-retry-gate, docs/design.md#escalations,
// docs/design.md#storage-rules).
type Bulk struct {
	t        *Tx
	codes    []string
	byKey    map[[2]string]*Row // (tenant, key) → attempt, as the batch leaves it
	group    map[string][]*Row  // tenant/intent/op/subject → its versions
	pending  map[[2]string]bool // (tenant, key) with a kept manual decision
	dirty    map[[2]string]bool // (tenant, intent) handed to the per-event path
	buffered map[[2]string]bool // (tenant, intent) with writes not flushed yet
	inserts  []*Row             // new attempts, final state
	inserted map[uuid.UUID]bool // the ids of inserts
	updates  map[uuid.UUID]*Row // existing attempts whose state changed
	fills    map[uuid.UUID]*Row // existing attempts a late start filled in
	marks    map[uuid.UUID]*Row // existing attempts the gate judged (gate_judged, blind_retry)
	audits   []bulkAudit
	messages []outbox.Message
	claims   []bulkClaim
	// escalations and anomalies are rows for COPY; closes are the escalation ids to close.
	escalations, anomalies [][]any
	closes                 []uuid.UUID
	// stored: the escalations of the loaded attempts that have one open or one other than
	// no_lookup_capability (Escalated or OutcomeOpen), by attempt and reason; changed: the
	// (attempt id, reason) escalations the batch opened or closed.
	stored  map[uuid.UUID]map[Reason]EscalationState
	changed map[[2]string]EscalationState
	now     time.Time
}

// bulkClaim is a provider reference claim: the attempt and the event that brought it (for a
// conflict's anomaly, as Step.ClaimEventID).
type bulkClaim struct {
	a       *Row
	eventID string
}

type bulkAudit struct {
	id       uuid.UUID
	from, to Status
	eventID  string
	note     string
}

func groupKey(tenant, intent string, op events.Operation, subject string) string {
	return tenant + "\x00" + intent + "\x00" + string(op) + "\x00" + subject
}

// NewBulk locks the intents of evs (sorted, insert-first), reads all their attempts, kept
// decisions and the escalations of the escalated ones in three or four statements. Intents in perEvent (e.g. those with a manual decision in the
// same batch) always take the per-event path.
func (t *Tx) NewBulk(ctx context.Context, evs []events.Attempt, transportCodes []string, perEvent [][2]string) (*Bulk, error) {
	b, err := t.loadBulk(ctx, evs, transportCodes)
	if err != nil {
		return nil, err
	}
	for _, k := range perEvent {
		b.dirty[k] = true
	}
	return b, nil
}

// Apply applies ev (deduplicated; d = ev.Digests() for a start): buffered in memory when the
// bulk path can write its step, otherwise — after flushing what the batch buffered for ev's
// intent — through ApplyEvent, and every later event of the intent too. Effects accumulate in
// the Tx that made the Bulk. Call Flush after the last event.
func (b *Bulk) Apply(ctx context.Context, ev events.Attempt, d events.Digests) error {
	ik := [2]string{ev.TenantID, ev.BookingIntentID}
	if !b.dirty[ik] && b.try(ev, d) {
		b.buffered[ik] = true
		return nil
	}
	b.dirty[ik] = true
	if b.buffered[ik] {
		if err := b.Flush(ctx); err != nil {
			return err
		}
	}
	_, err := b.t.ApplyEvent(ctx, ev, b.codes)
	return err
}

func (t *Tx) loadBulk(ctx context.Context, evs []events.Attempt, transportCodes []string) (*Bulk, error) {
	b := &Bulk{t: t, codes: transportCodes, byKey: map[[2]string]*Row{}, group: map[string][]*Row{},
		pending: map[[2]string]bool{}, dirty: map[[2]string]bool{}, buffered: map[[2]string]bool{},
		inserted: map[uuid.UUID]bool{}, updates: map[uuid.UUID]*Row{}, fills: map[uuid.UUID]*Row{}, marks: map[uuid.UUID]*Row{},
		stored: map[uuid.UUID]map[Reason]EscalationState{}, changed: map[[2]string]EscalationState{}}
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
	var escalated []uuid.UUID
	for _, a := range all {
		b.byKey[[2]string{a.TenantID, a.IdempotencyKey}] = a
		g := groupKey(a.TenantID, a.BookingIntentID, a.Operation, a.Subject)
		b.group[g] = append(b.group[g], a)
		if a.Escalated || a.OutcomeOpen {
			escalated = append(escalated, a.ID)
			b.stored[a.ID] = map[Reason]EscalationState{}
		}
	}
	if len(escalated) > 0 {
		rows, err := t.tx.Query(ctx, q("escalation_states_of_attempts"), escalated)
		if err != nil {
			return nil, fmt.Errorf("attempt: read escalations: %w", err)
		}
		var id uuid.UUID
		var r Reason
		var st EscalationState
		if _, err := pgx.ForEachRow(rows, []any{&id, &r, &st}, func() error { b.stored[id][r] = st; return nil }); err != nil {
			return nil, fmt.Errorf("attempt: read escalations: %w", err)
		}
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

// try applies ev in memory when the bulk path can write its step, and reports whether it did.
func (b *Bulk) try(ev events.Attempt, d events.Digests) bool {
	key := [2]string{ev.TenantID, ev.IdempotencyKey}
	if b.pending[key] {
		return false
	}
	cur := b.byKey[key]
	if ev.EventType == events.EventStarted && d.RequestHash == "" {
		return false
	}
	if ev.EventType != events.EventStarted {
		d = events.Digests{}
	}
	st := OnEvent(cur, ev, FactOf(ev, b.codes), d, Env{Now: b.now, FirstCheck: b.t.cfg.FirstCheck, Policy: b.t.cfg.Policies[ev.Provider]})
	for _, o := range st.Open {
		if _, known := b.escalation(cur, o.Reason); !known {
			return false
		}
	}
	// The outcome escalations the resolution closes; more than one goes per event (the order of
	// their escalation.closed rows is the database's).
	var closing []Reason
	if st.Resolve != nil && cur != nil && cur.OutcomeOpen {
		for _, r := range OutcomeReasons {
			if e, _ := b.escalation(cur, r); e == EscalationOpen {
				closing = append(closing, r)
			}
		}
		if len(closing) != 1 {
			return false
		}
	}
	a := st.Next
	// The gate's judgements and duplicate bookings, on the versions as the write leaves them.
	var judged []GateJudgement
	var dups []*Row
	if st.Gate || st.Duplicates {
		sibs := b.siblingsAfter(cur, a)
		if st.Duplicates {
			if dups = DuplicateBookings(a, sibs); len(dups) > 0 {
				dups = append([]*Row{cur}, dups...) // Next first, as CheckDuplicateBooking
			}
			for _, r := range dups {
				if _, known := b.escalation(r, ReasonDuplicateBooking); !known {
					return false
				}
			}
		}
		if st.Gate {
			judged = GateJudgements(a, sibs, st.JudgeSelf, b.t.maxVersions)
		}
	}
	for _, j := range judged {
		// A blind_retry escalation exists only on an attempt marked blind_retry, which
		// GateJudgements never judges again: every one the gate raises here is new.
		if e, known := b.escalation(j.Row, ReasonBlindRetry); !j.Safe && (e != "" || !known) {
			return false
		}
	}
	known := ""
	if cur != nil {
		known = cur.ProviderReference // claimed when it was stored
	}
	switch v := st.Verdict; {
	case v.Action == ActionCreate:
		b.inserts = append(b.inserts, a)
		b.inserted[a.ID] = true
		b.byKey[key] = a
		g := groupKey(a.TenantID, a.BookingIntentID, a.Operation, a.Subject)
		b.group[g] = append(b.group[g], a)
		b.t.Created[a.Status]++
	case v.Action == ActionTransition && (cur.Status == StatusInProgress || cur.Status == StatusUnknown && a.Status.Terminal()):
		*cur = *a
		a = cur
		if !b.inserted[cur.ID] {
			b.updates[cur.ID] = cur
		}
	case v.Action == ActionFillRequest:
		*cur = *a
		a = cur
		if !b.inserted[cur.ID] {
			b.fills[cur.ID] = cur
		}
	case v.Action == ActionRepeat:
		b.t.IdempotentRepeats++
	case v.Action == ActionKeyConflict || v.Action == ActionContradiction || v.Action == ActionAuditOnly && st.Write == WriteNone:
		// audited (and escalated below); the attempt is not written
	default:
		return false
	}
	b.audits = append(b.audits, bulkAudit{a.ID, st.Audit.From, st.Audit.To, ev.EventID, st.Audit.Note})
	if st.UnknownClass != "" {
		b.t.UnknownByClass[st.UnknownClass]++
	}
	if st.Resolve != nil {
		m, err := b.t.resolvedMessage(a, ev.EventID)
		if err != nil {
			return false
		}
		b.messages = append(b.messages, m)
		for _, r := range closing {
			escID := escalationID(a, r)
			m, err := b.t.closedMessage(a, escID, CauseEvent, "")
			if err != nil {
				return false
			}
			b.closes = append(b.closes, uuid.MustParse(escID))
			b.messages = append(b.messages, m)
			b.changed[[2]string{a.ID.String(), string(r)}] = EscalationClosed
			b.t.EscalationsClosed[r]++
		}
		a.OutcomeOpen = a.OutcomeOpen && len(closing) == 0
	}
	if st.Claim && a.ProviderReference != "" && a.ProviderReference != known {
		b.claims = append(b.claims, bulkClaim{a, st.ClaimEventID})
	}
	if st.KeyConflict {
		b.t.KeyConflicts++
	}
	if st.Contradicted {
		b.t.Contradictions++
	}
	for _, an := range st.Anomalies {
		d, _ := json.Marshal(an.Detail)
		b.anomalies = append(b.anomalies, []any{a.TenantID, a.ID, an.Kind, nz(an.EventID), d})
	}
	for _, r := range dups {
		if r == cur {
			r = a // the row the batch keeps
		}
		if err := b.escalate(r, ReasonDuplicateBooking, ""); err != nil {
			return false
		}
	}
	for _, o := range st.Open {
		if err := b.escalate(a, o.Reason, o.Detail); err != nil {
			return false
		}
	}
	for _, j := range judged {
		// JudgeGate's effects: gate_judged, and for a blind retry its anomaly, the blind_retry
		// escalation and the attempt marked blind_retry.
		r := j.Row
		if r == st.Next {
			r = a // the row the batch keeps
		}
		r.GateJudged = true
		if !j.Safe {
			d, _ := json.Marshal(map[string]any{"gate": j.Reason})
			b.anomalies = append(b.anomalies, []any{r.TenantID, r.ID, string(ReasonBlindRetry), nz(""), d})
			if err := b.escalate(r, ReasonBlindRetry, string(j.Reason)); err != nil {
				return false
			}
		}
		if !b.inserted[r.ID] {
			b.marks[r.ID] = r
		}
	}
	return true
}

// escalate buffers Escalate(r, reason, detail): what the (r, reason) escalation the batch knows
// (escalation) means is EscalationOnOpen's; a new one is a row for COPY with its
// escalation.opened outbox row, and a blind_retry marks r. try checked that the state is known.
func (b *Bulk) escalate(r *Row, reason Reason, detail string) error {
	e, _ := b.escalation(r, reason)
	switch EscalationOnOpen(e) {
	case OpeningNone:
		return nil
	case OpeningRecurred:
		d, _ := json.Marshal(map[string]any{"reason": reason})
		b.anomalies = append(b.anomalies, []any{r.TenantID, r.ID, "escalation_recurred", nz(""), d})
		b.t.EscalationRecurred++
		return nil
	}
	escID := escalationID(r, reason)
	m, err := b.t.openedMessage(r, escID, reason, detail)
	if err != nil {
		return err
	}
	b.escalations = append(b.escalations, []any{uuid.MustParse(escID), r.ID, r.TenantID, string(reason), string(EscalationOpen)})
	b.messages = append(b.messages, m)
	b.changed[[2]string{r.ID.String(), string(reason)}] = EscalationOpen
	b.t.EscalationsOpened[reason]++
	if reason == ReasonBlindRetry {
		b.t.BlindRetries++
		r.BlindRetry = true
		if !b.inserted[r.ID] {
			b.marks[r.ID] = r
		}
	}
	r.Escalated = r.Escalated || reason != ReasonNoLookupCapability
	r.OutcomeOpen = r.OutcomeOpen || reason.Outcome()
	return nil
}

// siblingsAfter returns the versions of next's (intent, operation, subject) as the batch
// leaves them once next replaces cur (nil: next is created), in version order.
func (b *Bulk) siblingsAfter(cur, next *Row) []*Row {
	g := b.group[groupKey(next.TenantID, next.BookingIntentID, next.Operation, next.Subject)]
	out := make([]*Row, 0, len(g)+1)
	for _, s := range g {
		if s != cur {
			out = append(out, s)
		}
	}
	// In version order, as the per-event path reads them (booking_attempt_siblings).
	out = append(out, next)
	slices.SortStableFunc(out, func(x, y *Row) int { return cmp.Compare(x.Version, y.Version) })
	return out
}

// escalation returns the state of cur's (cur, reason) escalation ("" none; cur nil: an attempt
// the event creates) as the batch leaves it, and whether the bulk path knows it: it does for
// the attempts created, the escalated ones (Bulk.stored), and for the others every reason but a
// no_lookup_capability that may have been closed (known none only on an IN_PROGRESS attempt).
func (b *Bulk) escalation(cur *Row, reason Reason) (EscalationState, bool) {
	if cur == nil {
		return "", true
	}
	if e, ok := b.changed[[2]string{cur.ID.String(), string(reason)}]; ok {
		return e, true
	}
	if m, ok := b.stored[cur.ID]; ok {
		return m[reason], true
	}
	if b.inserted[cur.ID] {
		return "", true
	}
	return "", reason != ReasonNoLookupCapability || cur.Status == StatusInProgress
}

// Flush writes everything buffered since the last Flush: attempts inserted and updated, audit
// rows, outbox rows and provider reference claims, then escalates the claims another attempt
// already holds.
func (b *Bulk) Flush(ctx context.Context) error {
	defer b.reset()
	tx := b.t.tx
	if n := len(b.inserts); n > 0 {
		rows := make([][]any, 0, n)
		for _, a := range b.inserts {
			rc := a.recovery
			rows = append(rows, []any{a.ID, a.TenantID, a.BookingIntentID, string(a.Operation), a.Subject, a.Version,
				a.IdempotencyKey, a.Provider, string(a.Status), nz(string(a.Source)), requestJSON(a.request), nz(a.RequestHash), nz(a.Fingerprint),
				nz(rc.ClientReference), nz(rc.ProviderSessionID), nz(rc.CorrelationID), nz(rc.PaymentReference), nz(rc.ProviderReference),
				nz(rc.ProviderIdempotencyKey), nz(a.ProviderReference), nz(a.FailureCode), retryableOf(a), a.StartedAt, a.FirstEventAt,
				a.WindowStart, a.FailedFactAt, a.TerminalAt, a.CreatedAt, a.CreatedAt, nz(a.TimeoutClass), a.requestSent, a.UnknownSince, a.NextCheckAt, a.GateJudged, a.BlindRetry})
		}
		_, err := tx.CopyFrom(ctx, pgx.Identifier{"booking_attempt"}, []string{"id", "tenant_id", "booking_intent_id", "operation",
			"subject", "operation_version", "idempotency_key", "provider", "status", "resolution_source", "request", "request_hash",
			"fingerprint", "client_reference", "provider_session_id", "correlation_id", "payment_reference", "subject_provider_reference",
			"provider_idempotency_key", "provider_reference", "failure_code", "retryable", "started_at", "first_event_at",
			"window_start", "failed_fact_at", "terminal_at", "created_at", "updated_at", "timeout_class", "request_sent",
			"unknown_since", "next_check_at", "gate_judged", "blind_retry"}, pgx.CopyFromRows(rows))
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
	if n := len(b.fills); n > 0 {
		var ids []uuid.UUID
		var reqs [][]byte
		var hash, fp, cr, ps, corr, pay, subj, pik []string
		var started []*time.Time
		var window []time.Time
		for _, a := range b.fills {
			rc := a.recovery
			ids, reqs, hash, fp = append(ids, a.ID), append(reqs, requestJSON(a.request)), append(hash, a.RequestHash), append(fp, a.Fingerprint)
			cr, ps, corr, pay = append(cr, rc.ClientReference), append(ps, rc.ProviderSessionID), append(corr, rc.CorrelationID), append(pay, rc.PaymentReference)
			subj, pik = append(subj, rc.ProviderReference), append(pik, rc.ProviderIdempotencyKey)
			started, window = append(started, a.StartedAt), append(window, a.WindowStart)
		}
		if _, err := tx.Exec(ctx, q("booking_attempt_fill_many"), ids, reqs, hash, fp, cr, ps, corr, pay, subj, pik, started, window); err != nil {
			return fmt.Errorf("attempt: bulk fill %d attempts: %w", n, err)
		}
	}
	if n := len(b.marks); n > 0 {
		ids := make([]uuid.UUID, 0, n)
		var blind []bool
		for _, a := range b.marks {
			ids, blind = append(ids, a.ID), append(blind, a.BlindRetry)
		}
		if _, err := tx.Exec(ctx, q("booking_attempt_mark_gate_many"), ids, blind); err != nil {
			return fmt.Errorf("attempt: bulk gate marks %d attempts: %w", n, err)
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
	for _, c := range []struct {
		table string
		cols  []string
		rows  [][]any
	}{
		{"anomaly", []string{"tenant_id", "attempt_id", "kind", "event_id", "detail"}, b.anomalies},
		{"escalation", []string{"escalation_id", "attempt_id", "tenant_id", "reason", "state"}, b.escalations},
	} {
		if len(c.rows) == 0 {
			continue
		}
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{c.table}, c.cols, pgx.CopyFromRows(c.rows)); err != nil {
			return fmt.Errorf("attempt: bulk %s: %w", c.table, err)
		}
	}
	if n := len(b.closes); n > 0 {
		if _, err := tx.Exec(ctx, q("escalation_close_many"), b.closes, string(EscalationClosed), CauseEvent, string(EscalationOpen)); err != nil {
			return fmt.Errorf("attempt: bulk close %d escalations: %w", n, err)
		}
	}
	if err := outbox.InsertMany(ctx, tx, b.messages); err != nil {
		return err
	}
	if len(b.claims) == 0 {
		return nil
	}
	// Claim in key order, so two batches claiming overlapping references cannot deadlock.
	slices.SortFunc(b.claims, func(cx, cy bulkClaim) int {
		x, y := cx.a, cy.a
		return cmp.Or(strings.Compare(x.Provider, y.Provider), strings.Compare(string(x.Operation), string(y.Operation)),
			strings.Compare(x.ProviderReference, y.ProviderReference))
	})
	var prov, op, ref, tenant []string
	var ids []uuid.UUID
	for _, c := range b.claims {
		a := c.a
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
	for _, c := range b.claims {
		if !won[c.a.ID] {
			// Held by another attempt: the per-event rule escalates both.
			if err := b.t.ClaimReference(ctx, c.a, c.eventID); err != nil {
				return err
			}
		}
	}
	return nil
}

// reset empties the buffers after a Flush; the attempts in memory stay, as stored.
func (b *Bulk) reset() {
	b.inserts, b.audits, b.messages, b.claims, b.escalations, b.anomalies, b.closes = nil, nil, nil, nil, nil, nil, nil
	clear(b.inserted)
	clear(b.updates)
	clear(b.fills)
	clear(b.marks)
	clear(b.buffered)
}

func nz(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
