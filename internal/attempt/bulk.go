package attempt

import (
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
	"github.com/bookrecon/bookrecon/internal/postgres"
)

// Bulk is the one write path of every cause: it locks a batch's intents and loads set-based
// (NewBulk) every attempt of them and every attempt with one of the batch's keys, all their
// escalations, the manual decisions kept for those keys and who holds the provider references
// the batch brings; it applies the transition function event by event in batch order to the
// attempts in memory (Apply: OnEvent; ApplyDecision: OnDecision; a kept decision applied as the
// step that makes its attempt UNKNOWN or terminal asks) and flushes what it buffered with a
// handful of set-based statements (Flush). Every step is buffered: the safe retry gate and
// duplicate bookings are judged on the versions in memory, an escalation asked for again is
// EscalationOnOpen's as the loaded states say, a claim another attempt holds is
// OnClaimConflict's, and a resolution closes every open outcome escalation in the order of
// OutcomeReasons. The ingester's batches are Bulks of many steps; ApplyEvent, ApplyDecision and
// the reconciler's and the escalator's causes are one-step batches (single), each flushed on its
// own. Only the database can answer three things, at Flush: a reference claimed meanwhile by
// another transaction (ClaimReference: both escalated); an attempt created meanwhile by another
// intent's transaction with a key of the batch (a one-step batch decides again, errNotWritten; a
// batch of many fails its COPY with a unique violation); a kept decision the database refuses
// (a one-step batch marks it failed under its savepoint; a batch of many fails). A batch of many
// that fails for a record's data is rerun by the ingester record by record, one-step batches
// under a savepoint each (docs/design.md#attempt-states, docs/design.md#safe-retry-gate,
// docs/design.md#escalations, docs/design.md#storage-rules).
type Bulk struct {
	t     *Tx
	codes []string
	byKey map[[2]string]*Row  // (tenant, key) → attempt, as the batch leaves it
	group map[groupKey][]*Row // (tenant, intent, operation, subject) → its versions
	// kept: the manual decisions waiting for (tenant, key), in the order they were kept (those
	// loaded, then those the batch kept).
	kept     map[[2]string][]keptDecision
	inserts  []*Row             // new attempts, final state
	inserted map[uuid.UUID]bool // the ids of inserts
	updates  map[uuid.UUID]*Row // existing attempts whose state changed
	fills    map[uuid.UUID]*Row // existing attempts a late start filled in
	refs     map[uuid.UUID]*Row // existing attempts a repeated outcome_unknown gave a provider reference
	marks    map[uuid.UUID]*Row // existing attempts the gate judged (gate_judged, blind_retry)
	audits   []bulkAudit
	messages []outbox.Message
	claims   []bulkClaim
	// escalations and anomalies are rows for COPY; keeps the decisions to keep; closes the
	// escalations to close; done the kept decisions applied or failed.
	escalations, anomalies [][]any
	keeps                  []keptRow
	closes                 []bulkClose
	done                   []keptDone
	// stored: the escalations of the loaded attempts that have any, by attempt and reason;
	// changed: the (attempt id, reason) escalations the batch opened or closed.
	stored  map[uuid.UUID]map[Reason]EscalationState
	changed map[escalationKey]EscalationState
	now     time.Time
	// single: a one-step batch (Tx.ApplyEvent, Tx.ApplyDecision and the reconciler's and the
	// escalator's causes): a create goes in insert-first and one that lost its race writes
	// nothing (errNotWritten: decide again), and the kept decisions of keptFor are applied after
	// the step's own writes, each under a savepoint (applyKeptIsolated).
	single  bool
	keptFor []*Row
	// owners: the claims of the batch's provider references (provider, operation, reference) →
	// the attempt holding it, as loaded and as the batch claims them; byID: the batch's attempts;
	// foreign: attempts outside the batch holding a reference one of its attempts brought, to
	// escalate duplicate_provider_reference at Flush (read there without their intent lock, as
	// ClaimReference does; the UNIQUE (attempt, reason) guards it).
	owners  map[[3]string]uuid.UUID
	byID    map[uuid.UUID]*Row
	foreign []uuid.UUID
	// check and deadlineDone: a one-step batch's WriteCheck (fenced: written first, and when the
	// lease was lost nothing is written, errNotWritten) and WriteDeadlineDone.
	check        *bulkCheck
	deadlineDone []uuid.UUID
}

// bulkCheck is a check that did not settle its attempt, fenced by the lease token.
type bulkCheck struct {
	a     *Row
	fence int64
}

// errNotWritten: a one-step batch found nothing to write to — a create that lost its race, a
// fenced check whose lease was lost — and wrote nothing.
var errNotWritten = errors.New("attempt: nothing to write to")

// bulkClaim is a provider reference claim: the attempt, the reference (as the step claimed it: a
// later step may change the attempt's) and the event that brought it (for a conflict's anomaly,
// as Step.ClaimEventID).
type bulkClaim struct {
	a       *Row
	ref     string
	eventID string
}

type bulkAudit struct {
	id uuid.UUID
	Audit
}

// bulkClose is an escalation to close, by whom (event, lookup or manual) and actor ("" none).
type bulkClose struct {
	id              uuid.UUID
	closedBy, actor string
}

// keptDecision is a manual decision waiting in pending_decision, as stored (raw JSON).
type keptDecision struct {
	eventID string
	raw     []byte
}

// keptRow is a decision to keep in pending_decision (raw: its JSON).
type keptRow struct {
	tenantID, key, eventID string
	raw                    []byte
}

// keptDone is a kept decision the batch applied (reason "") or marked failed.
type keptDone struct {
	tenantID, key, eventID, reason string
}

// groupKey is an attempt's (tenant, intent, operation, subject): the versions of one operation.
type groupKey struct {
	tenant, intent string
	op             events.Operation
	subject        string
}

func groupOf(a *Row) groupKey {
	return groupKey{a.TenantID, a.BookingIntentID, a.Operation, a.Subject}
}

// escalationKey is an (attempt, reason) escalation.
type escalationKey struct {
	id     uuid.UUID
	reason Reason
}

// NewBulk locks the intents of evs and decs (sorted, insert-first) and reads, in four
// statements, every attempt of those intents or with one of their keys, the escalations of
// those attempts and the manual decisions kept for the keys. transportCodes: see FactOf.
func (t *Tx) NewBulk(ctx context.Context, evs []events.Attempt, decs []events.Decision, transportCodes []string) (*Bulk, error) {
	n := len(evs) + len(decs)
	seenIntent, seenKey := make(map[[2]string]bool, n), make(map[[2]string]bool, n)
	tenants, intents, keyTenants, keys := make([]string, 0, n), make([]string, 0, n), make([]string, 0, n), make([]string, 0, n)
	var refs [][3]string
	keyOps := make(map[[2]string][2]string, n) // (tenant, key) → (provider, operation) of its events
	add := func(tenant, intent, key string) {
		if k := [2]string{tenant, intent}; !seenIntent[k] {
			seenIntent[k] = true
			tenants, intents = append(tenants, tenant), append(intents, intent)
		}
		if k := [2]string{tenant, key}; !seenKey[k] {
			seenKey[k] = true
			keyTenants, keys = append(keyTenants, tenant), append(keys, key)
		}
	}
	for _, ev := range evs {
		add(ev.TenantID, ev.BookingIntentID, ev.IdempotencyKey)
		keyOps[[2]string{ev.TenantID, ev.IdempotencyKey}] = [2]string{ev.Provider, string(ev.Operation)}
		if ev.Outcome != nil && ev.Outcome.ProviderReference != "" {
			refs = append(refs, [3]string{ev.Provider, string(ev.Operation), ev.Outcome.ProviderReference})
		}
	}
	for _, d := range decs {
		add(d.TenantID, d.BookingIntentID, d.IdempotencyKey)
	}
	b, err := t.loadBulk(ctx, true, transportCodes, tenants, intents, keyTenants, keys, refs, decs, keyOps)
	if err != nil {
		return nil, err
	}
	// About one audit row per event, and a resolution for about every other one.
	b.audits, b.messages = make([]bulkAudit, 0, n), make([]outbox.Message, 0, n/2+1)
	return b, nil
}

// oneStep is the one-step batch of a, an attempt read FOR UPDATE under its intent lock (held by
// the caller, not taken again): loaded as NewBulk loads (a's intent and key), and b's row for a.
// ref is the provider reference the step may claim ("" none).
func (t *Tx) oneStep(ctx context.Context, a *Row, ref string) (*Bulk, *Row, error) {
	var refs [][3]string
	if ref != "" {
		refs = [][3]string{{a.Provider, string(a.Operation), ref}}
	}
	b, err := t.loadBulk(ctx, false, nil, []string{a.TenantID}, []string{a.BookingIntentID}, []string{a.TenantID}, []string{a.IdempotencyKey}, refs, nil, nil)
	if err != nil {
		return nil, nil, err
	}
	b.single = true
	cur := b.byKey[[2]string{a.TenantID, a.IdempotencyKey}]
	if cur == nil {
		return nil, nil, fmt.Errorf("attempt: %s/%s: not found", a.TenantID, a.IdempotencyKey)
	}
	return b, cur, nil
}

// loadBulk locks the intents (tenants[i], intents[i]) when lock (else the caller holds them) and reads their attempts and those with the
// keys (keyTenants[i], keys[i]), the escalations of those attempts, the decisions kept for the
// keys, and who holds the provider references the steps may claim: refs (provider, operation,
// reference), and those of decs and of the kept decisions, at their attempt's provider and
// operation (keyOps's, from the batch's events, for an attempt not created yet).
func (t *Tx) loadBulk(ctx context.Context, lock bool, transportCodes, tenants, intents, keyTenants, keys []string, refs [][3]string,
	decs []events.Decision, keyOps map[[2]string][2]string) (*Bulk, error) {
	n := len(keys) // the batch's keys: about as many attempts as it holds
	b := &Bulk{t: t, codes: transportCodes, byKey: make(map[[2]string]*Row, n), group: make(map[groupKey][]*Row, n),
		kept: map[[2]string][]keptDecision{}, inserted: make(map[uuid.UUID]bool, n), updates: map[uuid.UUID]*Row{},
		fills: map[uuid.UUID]*Row{}, refs: map[uuid.UUID]*Row{}, marks: map[uuid.UUID]*Row{},
		stored: map[uuid.UUID]map[Reason]EscalationState{}, changed: map[escalationKey]EscalationState{},
		owners: make(map[[3]string]uuid.UUID, len(refs)), byID: make(map[uuid.UUID]*Row, n)}
	if len(tenants) == 0 {
		return b, nil
	}
	// The database clock: the transaction's start time, read once per transaction (Tx.Now).
	var err error
	if b.now, err = t.Now(ctx); err != nil {
		return nil, err
	}
	if lock {
		if _, err := t.tx.Exec(ctx, q("booking_intent_lock_many"), tenants, intents); err != nil {
			return nil, fmt.Errorf("attempt: lock %d intents: %w", len(tenants), err)
		}
	}
	all, err := scanRows(t.tx.Query(ctx, q("booking_attempt_of_intents_or_keys"), tenants, intents, keyTenants, keys))
	if err != nil {
		return nil, fmt.Errorf("attempt: read attempts: %w", err)
	}
	ids := make([]uuid.UUID, 0, len(all))
	for _, a := range all {
		b.byKey[[2]string{a.TenantID, a.IdempotencyKey}] = a
		b.addToGroup(a)
		b.byID[a.ID] = a
		ids = append(ids, a.ID)
	}
	if len(ids) > 0 {
		rows, err := t.tx.Query(ctx, q("escalation_states_of_attempts"), ids)
		if err != nil {
			return nil, fmt.Errorf("attempt: read escalations: %w", err)
		}
		var id uuid.UUID
		var r Reason
		var st EscalationState
		if _, err := pgx.ForEachRow(rows, []any{&id, &r, &st}, func() error {
			if b.stored[id] == nil {
				b.stored[id] = map[Reason]EscalationState{}
			}
			b.stored[id][r] = st
			return nil
		}); err != nil {
			return nil, fmt.Errorf("attempt: read escalations: %w", err)
		}
	}
	rows, err := t.tx.Query(ctx, q("pending_decision_of_keys"), keyTenants, keys)
	if err != nil {
		return nil, fmt.Errorf("attempt: read kept decisions: %w", err)
	}
	var k [2]string
	var kd keptDecision
	if _, err := pgx.ForEachRow(rows, []any{&k[0], &k[1], &kd.eventID, &kd.raw}, func() error {
		b.kept[k] = append(b.kept[k], keptDecision{kd.eventID, slices.Clone(kd.raw)})
		return nil
	}); err != nil {
		return nil, fmt.Errorf("attempt: read kept decisions: %w", err)
	}
	// A decision's reference is claimed at its attempt's provider and operation.
	decided := func(tenant, key, ref string) {
		if a := b.byKey[[2]string{tenant, key}]; a != nil && ref != "" {
			refs = append(refs, [3]string{a.Provider, string(a.Operation), ref})
		} else if po, ok := keyOps[[2]string{tenant, key}]; ok && ref != "" {
			refs = append(refs, [3]string{po[0], po[1], ref})
		}
	}
	for _, d := range decs {
		decided(d.TenantID, d.IdempotencyKey, d.ProviderReference)
	}
	for k, ks := range b.kept {
		for _, kd := range ks {
			var d struct{ ProviderReference string }
			if json.Unmarshal(kd.raw, &d) == nil {
				decided(k[0], k[1], d.ProviderReference)
			}
		}
	}
	return b, b.loadOwners(ctx, refs)
}

// loadOwners reads who holds the provider references refs (provider, operation, reference).
func (b *Bulk) loadOwners(ctx context.Context, refs [][3]string) error {
	var prov, op, ref []string
	for _, r := range refs {
		if _, ok := b.owners[r]; !ok {
			prov, op, ref = append(prov, r[0]), append(op, r[1]), append(ref, r[2])
		}
	}
	if len(prov) == 0 {
		return nil
	}
	rows, err := b.t.tx.Query(ctx, q("provider_reference_claim_owners"), prov, op, ref)
	if err != nil {
		return fmt.Errorf("attempt: read claims: %w", err)
	}
	var r [3]string
	var owner uuid.UUID
	if _, err := pgx.ForEachRow(rows, []any{&r[0], &r[1], &r[2], &owner}, func() error { b.owners[r] = owner; return nil }); err != nil {
		return fmt.Errorf("attempt: read claims: %w", err)
	}
	return nil
}

func (b *Bulk) env(provider string) Env {
	return Env{Now: b.now, FirstCheck: b.t.cfg.FirstCheck, Policy: b.t.cfg.Policies[provider]}
}

// Apply applies ev (deduplicated; d = ev.Digests() for a start, computed when zero) in memory:
// OnEvent on the attempt with ev's key as the batch leaves it, its Step buffered. Effects
// accumulate in the Tx that made the Bulk. Call Flush after the last event.
func (b *Bulk) Apply(ctx context.Context, ev events.Attempt, d events.Digests) error {
	if ev.EventType != events.EventStarted {
		d = events.Digests{}
	} else if d.RequestHash == "" {
		var err error
		if d, err = ev.Digests(); err != nil {
			return fmt.Errorf("attempt: request hash %s: %w", ev.EventID, err)
		}
	}
	_, err := b.apply(ev, d)
	return err
}

// apply is Apply with d as OnEvent takes it; it returns the Step buffered.
func (b *Bulk) apply(ev events.Attempt, d events.Digests) (Step, error) {
	cur := b.byKey[[2]string{ev.TenantID, ev.IdempotencyKey}]
	s := OnEvent(cur, ev, FactOf(ev, b.codes), d, b.env(ev.Provider))
	return s, b.write(cur, s)
}

// ApplyDecision applies one deduplicated manual decision in memory (OnDecision, as
// Tx.ApplyDecision) and returns its outcome: a decision kept is buffered for pending_decision
// and applied by a later step of the batch that makes its attempt UNKNOWN or terminal.
func (b *Bulk) ApplyDecision(ctx context.Context, d events.Decision) (string, error) {
	key := [2]string{d.TenantID, d.IdempotencyKey}
	cur := b.byKey[key]
	provider := ""
	if cur != nil {
		provider = cur.Provider
	}
	s := OnDecision(cur, d, b.env(provider))
	if s.Keep {
		raw, err := json.Marshal(d)
		if err != nil {
			return "", err
		}
		b.keeps = append(b.keeps, keptRow{d.TenantID, d.IdempotencyKey, d.EventID, raw})
		b.kept[key] = append(b.kept[key], keptDecision{d.EventID, raw})
		b.t.DecisionsKept++
		return DecisionKept, nil
	}
	if err := b.write(cur, s); err != nil {
		return "", err
	}
	if s.Decision == DecisionApplied {
		b.t.DecisionsApplied++
	}
	return s.Decision, nil
}

// write buffers Step s of the attempt cur (nil: s creates it) in Step's order: Next, the audit
// row, anomalies, the reference claim, the resolution and the outcome escalations it closes,
// duplicate bookings, escalations to open, the gate, escalations to close, kept decisions.
func (b *Bulk) write(cur *Row, s Step) error {
	known := "" // the provider reference cur had: claimed when it was stored
	if cur != nil {
		known = cur.ProviderReference
	}
	a := s.Next
	switch s.Write {
	case WriteNone:
	case WriteCreate:
		b.inserts = append(b.inserts, a)
		b.inserted[a.ID] = true
		b.byKey[[2]string{a.TenantID, a.IdempotencyKey}] = a
		b.byID[a.ID] = a
		b.addToGroup(a)
		b.t.Created[a.Status]++
	case WriteState, WriteFill, WriteReference:
		// The row in memory becomes Next, so the batch's maps and buffers see it.
		*cur = *a
		a = cur
		if !b.inserted[a.ID] {
			switch s.Write {
			case WriteState:
				b.updates[a.ID] = a
			case WriteFill:
				b.fills[a.ID] = a
			default:
				b.refs[a.ID] = a
			}
		}
	case WriteCheck, WriteDeadlineDone:
		// The reconciler's and the escalator's, one step per batch.
		if !b.single {
			return fmt.Errorf("attempt: %s/%s: write %d in a batch of several steps", a.TenantID, a.IdempotencyKey, s.Write)
		}
		*cur = *a
		a = cur
		if s.Write == WriteCheck {
			b.check = &bulkCheck{a, s.Fence}
		} else {
			b.deadlineDone = append(b.deadlineDone, a.ID)
		}
	default:
		return fmt.Errorf("attempt: %s/%s: unknown write %d", a.TenantID, a.IdempotencyKey, s.Write)
	}
	if s.UnknownClass != "" {
		b.t.UnknownByClass[s.UnknownClass]++
	}
	if s.Repeat {
		b.t.IdempotentRepeats++
	}
	if s.KeyConflict {
		b.t.KeyConflicts++
	}
	if s.Contradicted {
		b.t.Contradictions++
	}
	if s.Audit != nil {
		b.audits = append(b.audits, bulkAudit{a.ID, *s.Audit})
	}
	for _, an := range s.Anomalies {
		b.anomaly(a, an.Kind, an.EventID, an.Detail)
	}
	if s.Claim && a.ProviderReference != "" && a.ProviderReference != known {
		if err := b.claim(a, s.ClaimEventID); err != nil {
			return err
		}
	}
	if r := s.Resolve; r != nil {
		m, err := b.t.resolvedMessage(a, r.CauseID)
		if err != nil {
			return err
		}
		b.messages = append(b.messages, m)
		if err := b.close(a, Close{Reasons: OutcomeReasons, ClosedBy: r.ClosedBy, Actor: r.Actor}); err != nil {
			return err
		}
	}
	if s.Duplicates {
		if dups := DuplicateBookings(a, b.siblings(a)); len(dups) > 0 {
			for _, r := range append([]*Row{a}, dups...) { // a first, then the others
				if err := b.escalate(r, ReasonDuplicateBooking, ""); err != nil {
					return err
				}
			}
		}
	}
	for _, o := range s.Open {
		if err := b.escalate(a, o.Reason, o.Detail); err != nil {
			return err
		}
	}
	if s.Gate {
		// The gate's effects: gate_judged, and for a blind retry its anomaly, the blind_retry
		// escalation and the attempt marked blind_retry.
		for _, j := range GateJudgements(a, b.siblings(a), s.JudgeSelf, b.t.maxVersions) {
			r := j.Row
			r.GateJudged = true
			if !b.inserted[r.ID] {
				b.marks[r.ID] = r
			}
			if j.Safe {
				continue
			}
			b.anomaly(r, string(ReasonBlindRetry), "", map[string]any{"gate": j.Reason})
			if err := b.escalate(r, ReasonBlindRetry, string(j.Reason)); err != nil {
				return err
			}
		}
	}
	for _, c := range s.Close {
		if err := b.close(a, c); err != nil {
			return err
		}
	}
	if s.ApplyKept && len(b.kept[[2]string{a.TenantID, a.IdempotencyKey}]) > 0 {
		if b.single {
			b.keptFor = append(b.keptFor, a) // after the step's own writes, each under a savepoint (Flush)
			return nil
		}
		return b.applyKept(a)
	}
	return nil
}

// applyKept applies the manual decisions kept for a, in the order they were kept, to a as the
// batch leaves it (docs/design.md#cause-manual-decision): one that must still wait stays kept;
// one whose stored JSON does not decode is marked failed (ErrInvalidData) and reported in
// DecisionsFailed. In a batch of several steps a decision the database refuses fails the batch,
// which the ingester reruns record by record: one-step batches, where each kept decision is
// written under its own savepoint (applyKeptIsolated).
func (b *Bulk) applyKept(a *Row) error {
	key := [2]string{a.TenantID, a.IdempotencyKey}
	var waiting []keptDecision
	for _, k := range b.kept[key] {
		wait, err := b.applyOneKept(a, k)
		if err != nil {
			return err
		}
		if wait {
			waiting = append(waiting, k)
		}
	}
	b.kept[key] = waiting
	return nil
}

// applyOneKept buffers kept decision k of a; wait: it must still wait (a is IN_PROGRESS).
func (b *Bulk) applyOneKept(a *Row, k keptDecision) (wait bool, err error) {
	var d events.Decision
	if err := json.Unmarshal(k.raw, &d); err != nil {
		b.failKept(a, k, fmt.Errorf("attempt: kept decision %s: %w: %w", k.eventID, ErrInvalidData, err))
		return false, nil
	}
	s := OnDecision(a, d, b.env(a.Provider))
	if s.Keep {
		return true, nil
	}
	if err := b.write(a, s); err != nil {
		return false, err
	}
	if s.Decision == DecisionApplied {
		b.t.DecisionsApplied++
	}
	b.done = append(b.done, keptDone{a.TenantID, a.IdempotencyKey, k.eventID, ""})
	return false, nil
}

// failKept buffers kept decision k of a marked failed for its own data (err) and reports it.
func (b *Bulk) failKept(a *Row, k keptDecision, err error) {
	b.done = append(b.done, keptDone{a.TenantID, a.IdempotencyKey, k.eventID, FailureText(err)})
	b.t.DecisionsFailed = append(b.t.DecisionsFailed, FailedDecision{AttemptID: a.ID, TenantID: a.TenantID,
		IdempotencyKey: a.IdempotencyKey, EventID: k.eventID, Class: FailureClass(err), Err: err})
}

// applyKeptIsolated applies the kept decisions of a one-step batch's attempt a after the step's
// own writes, each flushed under a savepoint: one the database refuses for its own data
// (FailureClass) rolls back to its savepoint — the attempts in memory, the escalation states and
// the counted effects with it — and is marked failed; the transaction goes on. Any other error
// is returned: the whole transaction fails, to be retried.
func (b *Bulk) applyKeptIsolated(ctx context.Context, a *Row) error {
	key := [2]string{a.TenantID, a.IdempotencyKey}
	ks := b.kept[key]
	b.kept[key] = nil
	for _, k := range ks {
		group := b.group[groupOf(a)]
		rows := make([]Row, len(group))
		for i, r := range group {
			rows[i] = *r
		}
		changed, owners, effects, tx := maps.Clone(b.changed), maps.Clone(b.owners), b.t.Effects.clone(), b.t.tx
		wait := false
		err := postgres.Savepoint(ctx, tx, func(sp pgx.Tx) error {
			b.t.tx = sp
			defer func() { b.t.tx = tx }()
			var err error
			if wait, err = b.applyOneKept(a, k); err != nil {
				return err
			}
			return b.flush(ctx)
		})
		if wait {
			b.kept[key] = append(b.kept[key], k)
		}
		if err == nil {
			continue
		}
		for i, r := range group {
			*r = rows[i]
		}
		// Rolled back: the claims it made in memory too, or a later decision's claim of the same
		// reference would be taken as already held and never written.
		b.changed, b.owners, b.t.Effects = changed, owners, effects
		class := FailureClass(err)
		if class == "" || ctx.Err() != nil {
			return err
		}
		if _, err := tx.Exec(ctx, q("pending_decision_mark_failed"), a.TenantID, a.IdempotencyKey, k.eventID, FailureText(err)); err != nil {
			return fmt.Errorf("attempt: mark decision %s failed: %w", k.eventID, err)
		}
		b.t.DecisionsFailed = append(b.t.DecisionsFailed, FailedDecision{AttemptID: a.ID, TenantID: a.TenantID,
			IdempotencyKey: a.IdempotencyKey, EventID: k.eventID, Class: class, Err: err})
	}
	return nil
}

// claim buffers ClaimReference(a, eventID): a reference nobody holds is claimed (inserted at
// Flush); one another attempt holds is OnClaimConflict's — the anomaly on a and
// duplicate_provider_reference on both, the holder's at Flush when it is outside the batch.
func (b *Bulk) claim(a *Row, eventID string) error {
	r := [3]string{a.Provider, string(a.Operation), a.ProviderReference}
	owner, held := b.owners[r]
	if !held {
		b.owners[r] = a.ID
		b.claims = append(b.claims, bulkClaim{a, a.ProviderReference, eventID})
		return nil
	}
	dup, an := OnClaimConflict(a, owner, eventID)
	if !dup {
		return nil
	}
	b.t.DuplicateProvRefs++
	b.anomaly(a, an.Kind, an.EventID, an.Detail)
	if err := b.escalate(a, ReasonDuplicateProviderReference, ""); err != nil {
		return err
	}
	if other := b.byID[owner]; other != nil {
		return b.escalate(other, ReasonDuplicateProviderReference, "")
	}
	b.foreign = append(b.foreign, owner)
	return nil
}

// anomaly buffers one anomaly row on r.
func (b *Bulk) anomaly(r *Row, kind, eventID string, detail map[string]any) {
	d, _ := json.Marshal(detail)
	b.anomalies = append(b.anomalies, []any{r.TenantID, r.ID, kind, nz(eventID), d})
}

// close buffers Close c of a: a's open escalations that c closes, in the order of
// c.Reasons (Reasons() when nil), each with its escalation.closed outbox row.
func (b *Bulk) close(a *Row, c Close) error {
	reasons := c.Reasons
	if reasons == nil {
		reasons = Reasons()
	}
	for _, r := range reasons {
		if b.escalation(a, r) != EscalationOpen {
			continue
		}
		escID := escalationID(a, r) // only for an open one: a UUIDv5 each
		if !c.Closes(escID, r) {
			continue
		}
		m, err := b.t.closedMessage(a, escID, c.ClosedBy, c.Actor)
		if err != nil {
			return err
		}
		b.closes = append(b.closes, bulkClose{uuid.MustParse(escID), c.ClosedBy, c.Actor})
		b.messages = append(b.messages, m)
		b.changed[escalationKey{a.ID, r}] = EscalationClosed
		b.t.EscalationsClosed[r]++
	}
	a.OutcomeOpen = slices.ContainsFunc(OutcomeReasons, func(r Reason) bool { return b.escalation(a, r) == EscalationOpen })
	return nil
}

// escalate buffers Escalate(r, reason, detail): what the (r, reason) escalation the batch knows
// (escalation) means is EscalationOnOpen's; a new one is a row for COPY with its
// escalation.opened outbox row, and a blind_retry marks r.
func (b *Bulk) escalate(r *Row, reason Reason, detail string) error {
	switch EscalationOnOpen(b.escalation(r, reason)) {
	case OpeningNone:
		return nil
	case OpeningRecurred:
		b.anomaly(r, "escalation_recurred", "", map[string]any{"reason": reason})
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
	b.changed[escalationKey{r.ID, reason}] = EscalationOpen
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

// siblings returns the versions of a's (intent, operation, subject) as the batch leaves them, in
// version order: the group itself (addToGroup keeps it in that order), for reading only.
func (b *Bulk) siblings(a *Row) []*Row {
	return b.group[groupOf(a)]
}

// addToGroup puts a into its group in version order, after the versions equal to its own (a
// stable sort of the order they were added in). Where a does not go last the group is a new
// slice, so one taken before (applyKeptIsolated's) keeps its order.
func (b *Bulk) addToGroup(a *Row) {
	g := groupOf(a)
	rows := b.group[g]
	i := len(rows)
	for i > 0 && rows[i-1].Version > a.Version {
		i--
	}
	if i == len(rows) {
		b.group[g] = append(rows, a)
		return
	}
	b.group[g] = slices.Concat(rows[:i], []*Row{a}, rows[i:])
}

// escalation returns the state of r's (r, reason) escalation as the batch leaves it ("" none):
// every attempt the batch holds was loaded with its escalations or created by it.
func (b *Bulk) escalation(r *Row, reason Reason) EscalationState {
	if e, ok := b.changed[escalationKey{r.ID, reason}]; ok {
		return e
	}
	return b.stored[r.ID][reason]
}

// Flush writes everything buffered since the last Flush: attempts inserted and updated, audit
// rows, outbox rows and provider reference claims, then escalates the claims another attempt
// already holds.
func (b *Bulk) Flush(ctx context.Context) error {
	keptFor := b.keptFor
	b.keptFor = nil
	if err := b.flush(ctx); err != nil {
		return err
	}
	for _, a := range keptFor {
		if err := b.applyKeptIsolated(ctx, a); err != nil {
			return err
		}
	}
	return nil
}

// nz is s as a nullable column: NULL when empty.
func nz(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
