package attempt

import (
	"time"

	"github.com/google/uuid"

	"github.com/bookrecon/bookrecon/events"
)

// The transition function: one pure function per cause — an event (OnEvent), a lookup verdict
// (OnLookup), a manual decision (OnDecision), the stale-IN_PROGRESS timeout (OnStale), the
// escalator's deadline check (OnDeadline) and the Producer API's begin (OnBegin) — each taking
// the attempt as loaded under its intent lock and the cause, and returning a Step: the
// attempt's new state and every effect as a value. Nothing here reads or writes the database;
// the store (Bulk, the one write path) writes a Step as it is, in a fixed order, and no SQL
// decides a transition.
// The rules are docs/design.md#attempt-states, docs/design.md#timeout-taxonomy,
// docs/design.md#safe-retry-gate, docs/design.md#reconciliation and "Escalations".

// Env is what every cause is judged against: the transaction's database clock (now() — the
// clock unknown_since, terminal_at and window_start are recorded on) and the provider's policy.
type Env struct {
	Now        time.Time
	FirstCheck time.Duration // from turning UNKNOWN to the first check (default 1s)
	Policy     Policy
}

func (e Env) firstCheck() time.Duration {
	if e.FirstCheck <= 0 {
		return defaultFirstCheck
	}
	return e.FirstCheck
}

// Write names the statement that stores a Step's Next row.
type Write int

// The writes of a Step.
const (
	WriteNone         Write = iota
	WriteCreate             // insert Next (a new attempt)
	WriteState              // the state columns of Next (status, source, references, times), lease released
	WriteFill               // the request, hash and recovery identities a late start fills in
	WriteReference          // provider_reference only (a repeated outcome_unknown that brings one)
	WriteCheck              // check_count, last_lookup_result, next_check_at, fenced by Step.Fence
	WriteDeadlineDone       // deadline_done: the escalator judged the deadline
)

// Anomaly is one detection of a rule breach, recorded every time it happens.
type Anomaly struct {
	Kind    string
	EventID string
	Detail  map[string]any
}

// Open asks for the (attempt, Reason) escalation, insert-first (EscalationOnOpen decides what an
// existing one means).
type Open struct {
	Reason Reason
	Detail string // for the traveller-safe summary
}

// Close closes the attempt's open escalations of Reasons (nil: every reason), OnlyID alone when
// set, publishing escalation.closed for each.
type Close struct {
	Reasons  []Reason
	ClosedBy string // event, lookup or manual
	Actor    string
	OnlyID   string
}

// Resolve publishes attempt.resolved for Next, whose deterministic id comes from CauseID, and
// closes Next's outcome escalations (closedBy, actor).
type Resolve struct {
	CauseID, ClosedBy, Actor string
}

// Step is a cause's outcome: the new state and every effect as a value, in the order the store
// writes them: Next, Audit, Anomalies, the provider-reference Claim, Resolve, the duplicate
// booking check, Open, the Gate re-judgement, Close, then the kept decisions (ApplyKept).
type Step struct {
	Verdict Verdict
	// Next is the attempt after the cause (the current row when nothing changes; nil for a kept
	// decision or a refused begin). Write says which statement stores it.
	Next  *Row
	Write Write
	// Fence is the lease token a WriteCheck carries (`AND lease_token = Fence AND status =
	// UNKNOWN`); zero rows mean the lease was lost and nothing after the write happens.
	Fence     int64
	Audit     *Audit
	Anomalies []Anomaly
	// Claim: claim Next.ProviderReference insert-first; ClaimEventID goes to a conflict's anomaly.
	Claim        bool
	ClaimEventID string
	Resolve      *Resolve
	// Duplicates: escalate duplicate_booking when another version of Next's (intent, operation,
	// subject) is CONFIRMED too (DuplicateBookings).
	Duplicates bool
	Open       []Open
	// Gate: re-judge the safe retry gate for the later versions already judged, and for Next
	// itself when JudgeSelf (GateJudgements).
	Gate      bool
	JudgeSelf bool
	Close     []Close
	// ApplyKept: apply the manual decisions kept for Next (it turned UNKNOWN or terminal).
	ApplyKept bool
	// Keep: a manual decision for an attempt that does not exist yet or is IN_PROGRESS, kept.
	Keep bool
	// Decision is the manual decision outcome (DecisionApplied, …), "" for other causes.
	Decision string
	// Refused is the gate's refusal of a begin ("" when allowed); nothing is written.
	Refused GateReason
	// Counters for metrics.
	UnknownClass events.TimeoutClass // set when Next turned UNKNOWN
	Repeat       bool
	KeyConflict  bool
	Contradicted bool
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func ptr[T any](v T) *T { return &v }

// us is t as PostgreSQL keeps it (microseconds), so the state computed here equals the stored one.
func us(t time.Time) time.Time { return t.Truncate(time.Microsecond) }

// OnEvent is the transition for an attempt event carrying the attempt's own key
// (docs/design.md#attempt-states table, out-of-order starts, provider references). cur is the
// attempt with ev's key as loaded under the intent lock, nil when none exists; f is FactOf(ev); d
// is ev.Digests() for a start (zero otherwise).
func OnEvent(cur *Row, ev events.Attempt, f Fact, d events.Digests, env Env) Step {
	var c *Current
	if cur != nil {
		c = &Current{Status: cur.Status, BookingIntentID: cur.BookingIntentID, Provider: cur.Provider,
			RequestHash: cur.RequestHash, ProviderReference: cur.ProviderReference}
	}
	v := Decide(c, ev, f, d.RequestHash)
	s := Step{Verdict: v, Next: cur}
	if cur != nil {
		s.Audit = &Audit{From: cur.Status, To: cur.Status, Cause: CauseEvent, EventID: ev.EventID, Note: v.Note}
	}
	now, occ := us(env.Now), us(ev.OccurredAt) // values: a pointer to each (ptr) only where a row keeps one
	switch v.Action {
	case ActionCreate:
		a := created(ev, f, v, d, now, env.firstCheck())
		s.Next, s.Write = a, WriteCreate
		s.Audit = &Audit{To: a.Status, Cause: CauseEvent, EventID: ev.EventID, Note: v.Note}
		s.afterChange(a, ev, f, true, true, env)
	case ActionRepeat:
		s.Repeat = true
	case ActionKeyConflict:
		s.KeyConflict = true
		detail := map[string]any{"rule": v.Note, "eventType": ev.EventType}
		if f.Reference != "" {
			detail["providerReference"] = f.Reference // not applied: audit trail only
		}
		s.Anomalies = []Anomaly{{Kind: string(ReasonKeyConflict), EventID: ev.EventID, Detail: detail}}
		s.Open = []Open{{Reason: ReasonKeyConflict}}
	case ActionContradiction:
		s.Contradicted = true
		s.Anomalies = []Anomaly{{Kind: string(ReasonContradiction), EventID: ev.EventID,
			Detail: map[string]any{"eventType": ev.EventType, "providerReference": f.Reference}}}
		s.Open = []Open{{Reason: ReasonContradiction}}
	case ActionAuditOnly:
		if cur.Status == StatusUnknown && f.Reference != "" && cur.ProviderReference == "" {
			// A repeated outcome_unknown that brings a provider reference records it.
			a := *cur
			a.ProviderReference = f.Reference
			s.Next, s.Write = &a, WriteReference
			s.Audit.Note += "; provider reference recorded"
			s.Claim, s.ClaimEventID = true, ev.EventID
		}
	case ActionFillRequest:
		a := *cur
		a.request, a.RequestHash, a.Fingerprint = ev.Request, d.RequestHash, d.Fingerprint
		a.recovery = fillRecovery(cur.recovery, ev.Recovery)
		a.ClientReference = a.recovery.ClientReference
		a.StartedAt = ptr(occ)
		a.WindowStart = later(later(cur.WindowStart, occ), now)
		s.Next, s.Write = &a, WriteFill
		s.afterChange(&a, ev, f, false, true, env)
	case ActionTransition:
		a := *cur
		a.Status, a.Source = v.Status, v.Source
		if f.Reference != "" {
			a.ProviderReference = f.Reference
		}
		if f.FailureCode != "" {
			a.FailureCode = f.FailureCode
		}
		a.Retryable = v.Status == StatusFailed && f.Retryable
		if f.TimeoutClass != "" {
			a.TimeoutClass = string(f.TimeoutClass)
		}
		a.WindowStart = later(occ, now)
		a.FailedFactAt, a.TerminalAt, a.NextCheckAt = nil, nil, nil
		switch v.Status {
		case StatusUnknown:
			a.UnknownSince, a.NextCheckAt = ptr(now), ptr(now.Add(env.firstCheck()))
		case StatusFailed:
			a.FailedFactAt, a.TerminalAt = ptr(occ), ptr(now)
		default:
			a.TerminalAt = ptr(now)
		}
		s.Next, s.Write = &a, WriteState
		s.Audit.To = a.Status
		s.afterChange(&a, ev, f, true, false, env)
	}
	return s
}

// created is the attempt an event creates: from the envelope, in the state the verdict says.
func created(ev events.Attempt, f Fact, v Verdict, d events.Digests, now time.Time, firstCheck time.Duration) *Row {
	occ := us(ev.OccurredAt)
	a := &Row{ID: uuid.Must(uuid.NewV7()), TenantID: ev.TenantID, BookingIntentID: ev.BookingIntentID,
		Operation: ev.Operation, Subject: ev.KeySubject, Version: ev.OperationVersion, IdempotencyKey: ev.IdempotencyKey,
		Provider: ev.Provider, Status: v.Status, Source: v.Source, ClientReference: ev.Recovery.ClientReference,
		ProviderReference: f.Reference, FailureCode: f.FailureCode, TimeoutClass: string(f.TimeoutClass),
		FirstEventAt: occ, WindowStart: later(occ, now), CreatedAt: now, recovery: ev.Recovery}
	if ev.EventType == events.EventStarted {
		a.StartedAt, a.request, a.RequestHash, a.Fingerprint = &occ, ev.Request, d.RequestHash, d.Fingerprint
	}
	if ev.Outcome != nil && !f.Transport && ev.Outcome.RequestSent != nil && f.TimeoutClass == events.TimeoutConnect {
		a.requestSent = ptr(*ev.Outcome.RequestSent)
	}
	switch v.Status {
	case StatusUnknown:
		a.UnknownSince, a.NextCheckAt = &now, ptr(now.Add(firstCheck))
	case StatusFailed:
		a.Retryable, a.FailedFactAt, a.TerminalAt = f.Retryable, &occ, &now
	case StatusConfirmed:
		a.TerminalAt = &now
	}
	return a
}

// fillRecovery keeps every recovery identity already known and fills in the others.
func fillRecovery(old, start events.Recovery) events.Recovery {
	or := func(a, b string) string {
		if a != "" {
			return a
		}
		return b
	}
	return events.Recovery{ClientReference: or(old.ClientReference, start.ClientReference),
		ProviderSessionID: or(old.ProviderSessionID, start.ProviderSessionID), CorrelationID: or(old.CorrelationID, start.CorrelationID),
		PaymentReference: or(old.PaymentReference, start.PaymentReference), ProviderReference: or(old.ProviderReference, start.ProviderReference),
		ProviderIdempotencyKey: or(old.ProviderIdempotencyKey, start.ProviderIdempotencyKey)}
}

// afterChange adds the rules that follow a creation, a status change or a filled-in request:
// UNKNOWN bookkeeping, the reference claim, resolution and duplicate bookings, the
// no_lookup_capability escalation, the gate, kept decisions.
func (s *Step) afterChange(a *Row, ev events.Attempt, f Fact, statusChanged, judgeSelf bool, env Env) {
	if statusChanged && a.Status == StatusUnknown {
		s.UnknownClass = f.TimeoutClass.MetricLabel()
	}
	s.Claim, s.ClaimEventID = a.ProviderReference != "", ev.EventID
	if statusChanged && a.Status.Terminal() {
		s.Resolve = &Resolve{CauseID: ev.EventID, ClosedBy: CauseEvent}
		s.Duplicates = true
	}
	if a.Status == StatusUnknown && Ladder(a, env.Policy.kinds(), 0).NoCapability {
		s.Open = append(s.Open, Open{Reason: ReasonNoLookupCapability})
	}
	s.Gate, s.JudgeSelf = true, judgeSelf
	s.ApplyKept = statusChanged && (a.Status == StatusUnknown || a.Status.Terminal())
}

// OnSettle is the transition for a terminal verdict reached outside an attempt event: a
// conclusive lookup or a manual decision (Settlement). cur is read under its intent lock; the
// caller checked that the verdict applies (fence, status).
func OnSettle(cur *Row, st Settlement, env Env) Step {
	now := us(env.Now)
	a := *cur
	a.Status, a.Source = st.Status, st.Source
	if st.Reference != "" {
		a.ProviderReference = st.Reference
	}
	a.Retryable, a.FailedFactAt = false, nil
	if st.Status == StatusFailed {
		if st.FailureCode != "" {
			a.FailureCode = st.FailureCode
		}
		a.Retryable, a.FailedFactAt = st.Retryable, &now
	} else {
		a.FailureCode = ""
	}
	a.TerminalAt, a.NextCheckAt = &now, nil
	closedBy, eventID := CauseLookup, ""
	if st.Source == SourceManual {
		closedBy = CauseManual
	}
	if st.Cause == CauseManual {
		eventID = st.CauseID
	}
	return Step{Verdict: Verdict{Action: ActionTransition, Status: a.Status, Source: a.Source, Note: st.Note},
		Next: &a, Write: WriteState,
		Audit: &Audit{From: cur.Status, To: a.Status, Cause: st.Cause, EventID: eventID, Lookup: st.Lookup,
			Actor: st.Actor, Reason: st.Reason, Note: st.Note},
		Claim: a.ProviderReference != "", Resolve: &Resolve{CauseID: st.CauseID, ClosedBy: closedBy, Actor: st.Actor},
		Duplicates: true, Gate: true,
		ApplyKept: cur.Status != StatusInProgress && !cur.Status.Terminal() && st.Source != SourceManual}
}

// OnDecision is the transition for a manual decision (docs/design.md#cause-manual-decision). cur is
// the attempt as loaded, nil when it does not exist yet:
//   - kept (Keep): the attempt does not exist yet or is IN_PROGRESS;
//   - rejected: it names another bookingIntentId than the attempt's: audited, an anomaly;
//   - unchanged: it equals the current state: the anomaly escalations close (the decision's
//     escalationId alone, when given);
//   - applied: UNKNOWN → the decision, or a terminal state changed; the anomaly escalations close.
func OnDecision(cur *Row, d events.Decision, env Env) Step {
	if cur != nil && cur.BookingIntentID != d.BookingIntentID {
		return Step{Next: cur, Decision: DecisionRejected, Verdict: Verdict{Action: ActionAuditOnly, Status: cur.Status},
			Audit: &Audit{From: cur.Status, To: cur.Status, Cause: CauseManual, EventID: d.EventID, Actor: d.Actor, Reason: d.Reason,
				Note: "decision rejected: it names another bookingIntentId than the attempt's"},
			Anomalies: []Anomaly{{Kind: "decision_intent_mismatch", EventID: d.EventID, Detail: map[string]any{"decisionIntent": d.BookingIntentID}}}}
	}
	if cur == nil || cur.Status == StatusInProgress {
		return Step{Next: cur, Keep: true, Decision: DecisionKept}
	}
	status := Status(d.Decision)
	closeAnomalies := Close{Reasons: AnomalyReasons, ClosedBy: CauseManual, Actor: d.Actor, OnlyID: d.EscalationID}
	if cur.Status == status && (status != StatusConfirmed || d.ProviderReference == "" || d.ProviderReference == cur.ProviderReference) {
		return Step{Next: cur, Decision: DecisionUnchanged, Verdict: Verdict{Action: ActionRepeat, Status: cur.Status},
			Audit: &Audit{From: cur.Status, To: cur.Status, Cause: CauseManual, EventID: d.EventID, Actor: d.Actor, Reason: d.Reason,
				Note: "decision equals the current state"},
			Close: []Close{closeAnomalies}}
	}
	note := "manual decision"
	if cur.Status.Terminal() {
		note = "manual decision changes a terminal state"
	}
	s := OnSettle(cur, Settlement{Status: status, Source: SourceManual, Reference: d.ProviderReference,
		FailureCode: "MANUAL", Retryable: d.Retryable, CauseID: d.EventID, Cause: CauseManual,
		Actor: d.Actor, Reason: d.Reason, Note: note}, env)
	s.Decision = DecisionApplied
	s.Close = []Close{closeAnomalies}
	return s
}

// Stale reports whether a has been IN_PROGRESS longer than timeout, from when it was recorded
// (docs/design.md#attempt-states: inProgressTimeout).
func Stale(a *Row, now time.Time, timeout time.Duration) bool {
	return a.Status == StatusInProgress && a.CreatedAt.Before(now.Add(-timeout))
}

// OnStale is the stale-IN_PROGRESS timeout: an attempt IN_PROGRESS longer than timeout turns
// UNKNOWN with timeout class `stale`, audited (cause timeout, stale_in_progress); then
// no_lookup_capability when no lookup can apply, the gate (of a version ≥ 2 not judged yet), and
// the kept decisions. now is the reconciler's clock for the timeout, env.Now the database's. An
// attempt that is not stale (settled or restarted meanwhile) gets an empty Step.
func OnStale(cur *Row, now time.Time, timeout time.Duration, env Env) Step {
	if !Stale(cur, now, timeout) {
		return Step{Next: cur}
	}
	dbNow := us(env.Now)
	a := *cur
	a.Status, a.TimeoutClass = StatusUnknown, string(events.TimeoutStale)
	a.UnknownSince, a.WindowStart = &dbNow, later(cur.WindowStart, dbNow)
	a.NextCheckAt = ptr(dbNow.Add(env.firstCheck()))
	s := Step{Verdict: Verdict{Action: ActionTransition, Status: StatusUnknown, Note: "stale_in_progress"},
		Next: &a, Write: WriteState, UnknownClass: events.TimeoutStale,
		Audit: &Audit{From: StatusInProgress, To: StatusUnknown, Cause: CauseTimeout, Note: "stale_in_progress"},
		Gate:  true, JudgeSelf: a.Version > 1 && !a.GateJudged, ApplyKept: true}
	if Ladder(&a, env.Policy.kinds(), 0).NoCapability {
		s.Open = []Open{{Reason: ReasonNoLookupCapability}}
	}
	return s
}

// OnDeadline is the escalator's deadline check (docs/design.md#escalations): an attempt UNKNOWN for
// longer than deadline, on the database clock (env.Now) from when the pipeline recorded it
// UNKNOWN, is marked judged and escalated deadline_exceeded — unless an ambiguous_match or
// no_lookup_capability escalation is open (escalations as loaded), which holds it back for good.
func OnDeadline(cur *Row, escalations map[Reason]EscalationState, deadline time.Duration, env Env) Step {
	s := Step{Next: cur}
	if cur.Status != StatusUnknown || cur.UnknownSince == nil || cur.UnknownSince.Add(deadline).After(env.Now) {
		return s
	}
	s.Write = WriteDeadlineDone
	if DeadlineHeld(escalations) {
		return s
	}
	s.Open = []Open{{Reason: ReasonDeadlineExceeded}}
	return s
}

// OnBegin is the Producer API's begin of version ev.OperationVersion of (intent, operation,
// subject) (docs/design.md Part 2, "Producer API"): an operation key that exists (cur) skips the
// gate and is a started event (OnEvent); a new one is judged by the gate against its earlier
// versions (siblings as loaded under the intent lock) at env.Now, and is either refused
// (Step.Refused, nothing written) or created IN_PROGRESS, judged.
func OnBegin(cur *Row, siblings []*Row, ev events.Attempt, d events.Digests, env Env) Step {
	f := FactOf(ev, nil)
	if cur != nil {
		return OnEvent(cur, ev, f, d, env)
	}
	var earlier []Sibling
	for _, s := range ToSiblings(siblings) {
		if s.Version < ev.OperationVersion {
			earlier = append(earlier, s)
		}
	}
	if ok, reason := SafeRetry(ev.OperationVersion, env.Now, earlier, env.Policy.maxVersions()); !ok {
		return Step{Refused: reason, Verdict: Verdict{Action: ActionAuditOnly, Note: "gate refused: " + string(reason)}}
	}
	s := OnEvent(nil, ev, f, d, env)
	s.Next.GateJudged = ev.OperationVersion > 1
	return s
}

// EscalationState is an escalation's state: open or closed ("" when none exists).
type EscalationState string

// The escalation states of docs/design.md#escalations.
const (
	EscalationOpen   EscalationState = "open"
	EscalationClosed EscalationState = "closed"
)

// EscalationStates lists every EscalationState, as the escalation table's CHECK does.
func EscalationStates() []EscalationState {
	return []EscalationState{EscalationOpen, EscalationClosed}
}

// Opening is what asking for an escalation does.
type Opening int

// The outcomes of EscalationOnOpen.
const (
	OpeningInsert   Opening = iota // none exists: inserted with its escalation.opened outbox row
	OpeningNone                    // already open: nothing
	OpeningRecurred                // closed before: audited (an anomaly) and counted, not reopened
)

// EscalationOnOpen is the lifecycle rule for a reason raised on an attempt whose (attempt,
// reason) escalation is in state existing ("" none).
func EscalationOnOpen(existing EscalationState) Opening {
	switch existing {
	case "":
		return OpeningInsert
	case EscalationClosed:
		return OpeningRecurred
	}
	return OpeningNone
}

// DeadlineHeld reports whether an open ambiguous_match or no_lookup_capability holds the
// deadline_exceeded escalation back.
func DeadlineHeld(escalations map[Reason]EscalationState) bool {
	return escalations[ReasonAmbiguousMatch] == EscalationOpen || escalations[ReasonNoLookupCapability] == EscalationOpen
}

// Closes reports whether c closes an open escalation (id, reason).
func (c Close) Closes(id string, reason Reason) bool {
	if c.OnlyID != "" && c.OnlyID != id {
		return false
	}
	return c.Reasons == nil || containsReason(c.Reasons, reason)
}

func containsReason(rs []Reason, r Reason) bool {
	for _, x := range rs {
		if x == r {
			return true
		}
	}
	return false
}

// OnClaimConflict is the rule for a provider reference already claimed by owner: a claim by
// the owner is a no-op; another attempt's is a duplicate_provider_reference, an anomaly on a and
// an escalation on both (each in its own tenant).
func OnClaimConflict(a *Row, owner uuid.UUID, eventID string) (dup bool, anomaly Anomaly) {
	if owner == a.ID {
		return false, Anomaly{}
	}
	return true, Anomaly{Kind: string(ReasonDuplicateProviderReference), EventID: eventID, Detail: map[string]any{"owner": owner}}
}

// duplicateBookingOps are the operations where a second CONFIRMED version is a duplicate.
var duplicateBookingOps = map[events.Operation]bool{events.OpBook: true, events.OpPaymentAuthorize: true,
	events.OpPaymentCapture: true, events.OpRefund: true}

// DuplicateBookings returns the other CONFIRMED versions of a's (intent, operation, subject)
// among siblings, when a is CONFIRMED and its operation is BOOK, PAYMENT_AUTHORIZE,
// PAYMENT_CAPTURE or REFUND (docs/design.md#escalations: duplicate_booking escalates every one
// involved); nil otherwise.
func DuplicateBookings(a *Row, siblings []*Row) []*Row {
	if a.Status != StatusConfirmed || !duplicateBookingOps[a.Operation] {
		return nil
	}
	var out []*Row
	for _, s := range siblings {
		if s.ID != a.ID && s.Status == StatusConfirmed {
			out = append(out, s)
		}
	}
	return out
}

// GateJudgement is the gate's verdict on one version: Safe, or the reason it is a blind retry.
type GateJudgement struct {
	Row    *Row
	Safe   bool
	Reason GateReason
}

// GateJudgements judges the safe retry gate (docs/design.md#safe-retry-gate) for
// every version of changed's (intent, operation, subject) that needs it after changed was
// written: later versions already judged (an earlier version was created or settled), and
// changed itself when judgeSelf. Versions 1 and those already raised as blind retries are never
// judged again. siblings are every version as loaded after the write; maxVersions gives a
// provider's limit.
func GateJudgements(changed *Row, siblings []*Row, judgeSelf bool, maxVersions func(provider string) int) []GateJudgement {
	var all []Sibling // ToSiblings(siblings), once a version needs judging
	var out []GateJudgement
	for _, s := range siblings {
		self := s.ID == changed.ID
		if s.Version < 2 || s.BlindRetry || (self && !judgeSelf) || (!self && (s.Version <= changed.Version || !s.GateJudged)) {
			continue
		}
		start := s.FirstEventAt
		if s.StartedAt != nil {
			start = *s.StartedAt
		}
		if all == nil {
			all = ToSiblings(siblings)
		}
		var earlier []Sibling
		for _, e := range all {
			if e.Version < s.Version {
				earlier = append(earlier, e)
			}
		}
		ok, reason := SafeRetry(s.Version, start, earlier, maxVersions(s.Provider))
		out = append(out, GateJudgement{Row: s, Safe: ok, Reason: reason})
	}
	return out
}

// The causes of an audit row (attempt_transition.cause) and who closed an escalation
// (escalation.closed_by): docs/design.md#storage-rules — an event, a lookup, or actor + reason.
const (
	CauseEvent   = "event"
	CauseLookup  = "lookup"
	CauseManual  = "manual"
	CauseTimeout = "timeout"
)

// Causes lists every audit cause, as attempt_transition's CHECK does.
func Causes() []string { return []string{CauseEvent, CauseLookup, CauseManual, CauseTimeout} }

// ClosedBys lists every escalation closer (event, lookup, manual), as escalation's CHECK does.
func ClosedBys() []string { return []string{CauseEvent, CauseLookup, CauseManual} }
