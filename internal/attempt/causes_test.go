package attempt

// Table tests of the other causes — lookup verdicts, manual decisions, the stale-IN_PROGRESS
// timeout, the escalator's deadline check, the Producer API's begin — and of the escalation
// lifecycle. No PostgreSQL.

import (
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/bookrecon/bookrecon/events"
	"github.com/bookrecon/bookrecon/providers"
)

func lookupCause(l Lookup, token int64) LookupCause {
	return LookupCause{Lookup: l, Token: token, Caps: providers.Capabilities{AuthoritativeNotFound: true},
		NextCheck: func(a *Row, escalates bool) *time.Time {
			d := time.Duration(a.CheckCount+1) * time.Second
			if escalates || a.Escalated {
				d = time.Hour
			}
			return ptr(dbNow.Add(d))
		}}
}

func leased(st Status, token int64) *Row {
	a := row(st)
	a.Token = token
	return a
}

// TestOnLookup: docs/design.md#reconciliation, a verdict reaching the attempt.
func TestOnLookup(t *testing.T) {
	confirmed := Lookup{Result: providers.ResultFound, RecordStatus: providers.StatusConfirmed, RecordRef: "REF-5",
		Settle: &Settlement{Status: StatusConfirmed, Source: SourceClientReference, Reference: "REF-5"},
		Audit:  LookupAudit{Kind: "client_reference", Result: "found"}}
	rejected := Lookup{Result: providers.ResultFound, RecordStatus: providers.StatusRejected, RecordRef: "REF-5",
		Settle: &Settlement{Status: StatusFailed, Source: SourceClientReference, Reference: "REF-5", FailureCode: "REJECTED", Retryable: true},
		Audit:  LookupAudit{Kind: "client_reference", Result: "found"}}
	pending := Lookup{Result: providers.ResultFound, RecordStatus: providers.StatusPending, Audit: LookupAudit{Kind: "client_reference", Result: "found"}}
	several := Lookup{Result: providers.ResultSeveral, Escalate: ReasonAmbiguousMatch, Audit: LookupAudit{Kind: "client_reference", Result: "several"}}
	mismatch := Lookup{Result: providers.ResultFound, Escalate: ReasonContradiction, RecordStatus: providers.StatusConfirmed, Audit: LookupAudit{Kind: "client_reference", Result: "found"}}
	notFound := Lookup{Result: providers.ResultNotFound, AuthNotFound: true, Audit: LookupAudit{Kind: "client_reference", Result: "not_found"},
		Settle: &Settlement{Status: StatusFailed, Source: SourceAuthoritativeNotFound, FailureCode: "NOT_FOUND", Retryable: true}}
	noCap := Lookup{NoCapability: true}
	otherRef := confirmed
	otherRef.Settle = nil
	otherRef.RecordRef = "REF-9"
	cases := []struct {
		name  string
		cur   *Row
		l     Lookup
		token int64
		want  shape
		lost  bool
	}{
		{"CONFIRMED record settles", leased(StatusUnknown, 4), confirmed, 4, shape{action: ActionTransition, status: StatusConfirmed,
			source: SourceClientReference, write: WriteState, audit: "UNKNOWN→CONFIRMED:lookup:lookup by client_reference", resolve: "lookup",
			claim: true, dups: true, gate: "later", kept: true}, false},
		{"REJECTED record settles FAILED", leased(StatusUnknown, 4), rejected, 4, shape{action: ActionTransition, status: StatusFailed,
			source: SourceClientReference, write: WriteState, audit: "UNKNOWN→FAILED:lookup:lookup by client_reference", resolve: "lookup",
			claim: true, dups: true, gate: "later", kept: true}, false},
		{"PENDING: check recorded, back off", leased(StatusUnknown, 4), pending, 4, shape{status: StatusUnknown, write: WriteCheck,
			audit: "UNKNOWN→UNKNOWN:lookup:check 1"}, false},
		{"several: ambiguous_match", leased(StatusUnknown, 4), several, 4, shape{status: StatusUnknown, write: WriteCheck,
			audit: "UNKNOWN→UNKNOWN:lookup:check 1", open: []Reason{ReasonAmbiguousMatch}}, false},
		{"not matching: contradiction", leased(StatusUnknown, 4), mismatch, 4, shape{status: StatusUnknown, write: WriteCheck,
			audit: "UNKNOWN→UNKNOWN:lookup:check 1", anomalies: []string{"contradiction"}, open: []Reason{ReasonContradiction}, counters: "contradiction"}, false},
		{"no lookup applies: no further checks, no escalation", leased(StatusUnknown, 4), noCap, 4, shape{status: StatusUnknown, write: WriteCheck}, false},
		{"lease lost, still UNKNOWN: audited, not applied", leased(StatusUnknown, 5), confirmed, 4, shape{status: StatusUnknown,
			audit: "UNKNOWN→UNKNOWN:lookup:late lookup; lease lost, not applied"}, true},
		{"settled meanwhile, agreeing: audit only", leased(StatusConfirmed, 4), Lookup{Result: providers.ResultFound, RecordStatus: providers.StatusConfirmed, RecordRef: "REF-1",
			Audit: LookupAudit{Kind: "client_reference"}}, 4, shape{status: StatusConfirmed, source: SourceEvent,
			audit: "CONFIRMED→CONFIRMED:lookup:late lookup after CONFIRMED"}, false},
		{"CONFIRMED record while FAILED: contradiction", leased(StatusFailed, 4), confirmed, 4, shape{status: StatusFailed, source: SourceEvent,
			audit: "FAILED→FAILED:lookup:late lookup after FAILED", anomalies: []string{"contradiction"}, open: []Reason{ReasonContradiction}, counters: "contradiction"}, false},
		{"REJECTED while CONFIRMED, lease lost too", leased(StatusConfirmed, 5), rejected, 4, shape{status: StatusConfirmed, source: SourceEvent,
			audit: "CONFIRMED→CONFIRMED:lookup:late lookup after CONFIRMED; lease lost", anomalies: []string{"contradiction"}, open: []Reason{ReasonContradiction}, counters: "contradiction"}, true},
		{"CONFIRMED with another reference", leased(StatusConfirmed, 4), otherRef, 4, shape{status: StatusConfirmed, source: SourceEvent,
			audit: "CONFIRMED→CONFIRMED:lookup:late lookup after CONFIRMED", anomalies: []string{"contradiction"}, open: []Reason{ReasonContradiction}, counters: "contradiction"}, false},
		{"authoritative not-found while CONFIRMED", leased(StatusConfirmed, 4), notFound, 4, shape{status: StatusConfirmed, source: SourceEvent,
			audit: "CONFIRMED→CONFIRMED:lookup:late lookup after CONFIRMED", anomalies: []string{"contradiction"}, open: []Reason{ReasonContradiction}, counters: "contradiction"}, false},
		{"late, several: audit only", leased(StatusFailed, 4), several, 4, shape{status: StatusFailed, source: SourceEvent,
			audit: "FAILED→FAILED:lookup:late lookup after FAILED"}, false},
		{"late, no lookup made: nothing", leased(StatusFailed, 4), noCap, 4, shape{status: StatusFailed, source: SourceEvent}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, lost := OnLookup(c.cur, lookupCause(c.l, c.token), testEnv)
			if got := shapeOf(s); !reflect.DeepEqual(got, c.want) || lost != c.lost {
				t.Errorf("step\n got %+v lost=%v\nwant %+v lost=%v", got, lost, c.want, c.lost)
			}
		})
	}
	t.Run("check columns and fence", func(t *testing.T) {
		cur := leased(StatusUnknown, 4)
		cur.CheckCount = 2
		s, _ := OnLookup(cur, lookupCause(several, 4), testEnv)
		if s.Fence != 4 || s.Next.CheckCount != 3 || s.Next.LastLookupResult != "several" || !s.Next.NextCheckAt.Equal(dbNow.Add(time.Hour)) {
			t.Errorf("next %+v fence %d", s.Next, s.Fence)
		}
		s, _ = OnLookup(cur, lookupCause(pending, 4), testEnv)
		if !s.Next.NextCheckAt.Equal(dbNow.Add(3 * time.Second)) {
			t.Errorf("backoff next %v", s.Next.NextCheckAt)
		}
		s, _ = OnLookup(cur, lookupCause(noCap, 4), testEnv)
		if s.Next.NextCheckAt != nil || s.Next.LastLookupResult != "" || s.Audit != nil {
			t.Errorf("no capability: %+v", s.Next)
		}
	})
	t.Run("settled state", func(t *testing.T) {
		s, _ := OnLookup(leased(StatusUnknown, 4), lookupCause(rejected, 4), testEnv)
		a := s.Next
		if a.FailureCode != "REJECTED" || !a.Retryable || !a.FailedFactAt.Equal(dbNow) || !a.TerminalAt.Equal(dbNow) || a.NextCheckAt != nil ||
			a.ProviderReference != "REF-5" || s.Resolve.CauseID != "lookup:00000000-0000-7000-8000-000000000001:4" {
			t.Errorf("row %+v resolve %+v", a, s.Resolve)
		}
		s, _ = OnLookup(leased(StatusUnknown, 4), lookupCause(confirmed, 4), testEnv)
		if s.Next.FailureCode != "" || retryableOf(s.Next) != nil || s.Next.FailedFactAt != nil {
			t.Errorf("confirmed %+v", s.Next)
		}
	})
	t.Run("database clock floor", func(t *testing.T) {
		// The reconciler judged the not-found authoritative on its clock; the database's is
		// behind the window: back off instead.
		cur := leased(StatusUnknown, 4)
		cur.WindowStart = dbNow
		c := lookupCause(notFound, 4)
		c.Caps.ConsistencyWindow, c.ClockFloor = time.Minute, true
		s, _ := OnLookup(cur, c, testEnv)
		if s.Write != WriteCheck || s.Next.Status != StatusUnknown {
			t.Errorf("floor: %+v", shapeOf(s))
		}
		c.ClockFloor = false
		if s, _ := OnLookup(cur, c, testEnv); s.Next.Status != StatusFailed {
			t.Errorf("no floor: %s", s.Next.Status)
		}
	})
}

func decision(verdict, ref, escalationID string) events.Decision {
	return events.Decision{EventID: "d-1", TenantID: "t", BookingIntentID: "bi_1", IdempotencyKey: "book:bi_1:v1",
		Decision: verdict, ProviderReference: ref, Actor: "ops.1", Reason: "checked", EscalationID: escalationID, Retryable: true}
}

// TestOnDecision: docs/design.md#cause-manual-decision.
func TestOnDecision(t *testing.T) {
	anomalyClose := []Close{{Reasons: AnomalyReasons, ClosedBy: "manual", Actor: "ops.1"}}
	cases := []struct {
		name     string
		cur      *Row
		d        events.Decision
		outcome  string
		want     shape
		closes   []Close
		keep     bool
		manualAt bool
	}{
		{"no attempt yet: kept", nil, decision("CONFIRMED", "R", ""), DecisionKept, shape{}, nil, true, false},
		{"IN_PROGRESS: kept", row(StatusInProgress), decision("FAILED", "", ""), DecisionKept, shape{status: StatusInProgress}, nil, true, false},
		{"UNKNOWN → CONFIRMED", row(StatusUnknown), decision("CONFIRMED", "REF-3", ""), DecisionApplied, shape{action: ActionTransition,
			status: StatusConfirmed, source: SourceManual, write: WriteState, audit: "UNKNOWN→CONFIRMED:manual:manual decision", resolve: "manual",
			claim: true, dups: true, gate: "later"}, anomalyClose, false, false},
		{"terminal changed", row(StatusConfirmed), decision("FAILED", "", ""), DecisionApplied, shape{action: ActionTransition,
			status: StatusFailed, source: SourceManual, write: WriteState, audit: "CONFIRMED→FAILED:manual:manual decision changes a terminal state",
			resolve: "manual", claim: true, dups: true, gate: "later"}, anomalyClose, false, true},
		{"equal: unchanged, closes anomalies", row(StatusFailed), decision("FAILED", "", "esc-1"), DecisionUnchanged, shape{action: ActionRepeat,
			status: StatusFailed, source: SourceEvent, audit: "FAILED→FAILED:manual:decision equals the current state"},
			[]Close{{Reasons: AnomalyReasons, ClosedBy: "manual", Actor: "ops.1", OnlyID: "esc-1"}}, false, false},
		{"CONFIRMED, same reference: unchanged", row(StatusConfirmed), decision("CONFIRMED", "REF-1", ""), DecisionUnchanged, shape{action: ActionRepeat,
			status: StatusConfirmed, source: SourceEvent, audit: "CONFIRMED→CONFIRMED:manual:decision equals the current state"}, anomalyClose, false, false},
		{"CONFIRMED, other reference: applied", row(StatusConfirmed), decision("CONFIRMED", "REF-2", ""), DecisionApplied, shape{action: ActionTransition,
			status: StatusConfirmed, source: SourceManual, write: WriteState, audit: "CONFIRMED→CONFIRMED:manual:manual decision changes a terminal state",
			resolve: "manual", claim: true, dups: true, gate: "later"}, anomalyClose, false, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := OnDecision(c.cur, c.d, testEnv)
			if s.Decision != c.outcome || s.Keep != c.keep {
				t.Fatalf("outcome %s keep %v", s.Decision, s.Keep)
			}
			if c.keep {
				return
			}
			if got := shapeOf(s); !reflect.DeepEqual(got, c.want) || !reflect.DeepEqual(s.Close, c.closes) {
				t.Errorf("step\n got %+v %+v\nwant %+v %+v", got, s.Close, c.want, c.closes)
			}
		})
	}
	other := decision("CONFIRMED", "R", "")
	other.BookingIntentID = "bi_2"
	s := OnDecision(row(StatusUnknown), other, testEnv)
	want := shape{action: ActionAuditOnly, status: StatusUnknown, audit: "UNKNOWN→UNKNOWN:manual:decision rejected: it names another bookingIntentId than the attempt's",
		anomalies: []string{"decision_intent_mismatch"}}
	if got := shapeOf(s); s.Decision != DecisionRejected || !reflect.DeepEqual(got, want) {
		t.Errorf("rejected: %s %+v", s.Decision, got)
	}
	s = OnDecision(row(StatusUnknown), decision("FAILED", "", ""), testEnv)
	if s.Next.FailureCode != "MANUAL" || !s.Next.Retryable || s.Resolve.CauseID != "d-1" || s.Audit.EventID != "d-1" || s.Audit.Actor != "ops.1" {
		t.Errorf("manual FAILED: %+v %+v", s.Next, s.Audit)
	}
}

// TestOnStale: docs/design.md#attempt-states, stale_in_progress.
func TestOnStale(t *testing.T) {
	timeout := 15 * time.Minute
	old := row(StatusInProgress)
	old.CreatedAt = t0.Add(-16 * time.Minute)
	s := OnStale(old, t0, timeout, testEnv)
	want := shape{action: ActionTransition, status: StatusUnknown, write: WriteState, audit: "IN_PROGRESS→UNKNOWN:timeout:stale_in_progress",
		gate: "later", kept: true, counters: "unknown:stale"}
	if got := shapeOf(s); !reflect.DeepEqual(got, want) {
		t.Errorf("stale\n got %+v\nwant %+v", got, want)
	}
	if a := s.Next; a.TimeoutClass != "stale" || !a.UnknownSince.Equal(dbNow) || !a.WindowStart.Equal(dbNow) || !a.NextCheckAt.Equal(dbNow.Add(3*time.Second)) {
		t.Errorf("row %+v", a)
	}
	for _, c := range []struct {
		name string
		a    *Row
	}{{"young", row(StatusInProgress)}, {"settled meanwhile", func() *Row { a := row(StatusFailed); a.CreatedAt = old.CreatedAt; return a }()}} {
		if s := OnStale(c.a, t0, timeout, testEnv); s.Write != WriteNone || s.Audit != nil || s.Next != c.a {
			t.Errorf("%s: %+v", c.name, shapeOf(s))
		}
	}
	// A version ≥ 2 not judged yet is judged when it turns UNKNOWN; no lookup: no_lookup_capability.
	v2 := version(2, StatusInProgress, false, false)
	v2.CreatedAt = old.CreatedAt
	env := testEnv
	env.Policy.Lookups = nil
	s = OnStale(v2, t0, timeout, env)
	if got := shapeOf(s); got.gate != "self" || !slices.Equal(got.open, []Reason{ReasonNoLookupCapability}) {
		t.Errorf("v2: %+v", got)
	}
}

// TestOnDeadline: docs/design.md#escalations, deadline_exceeded on the database clock.
func TestOnDeadline(t *testing.T) {
	unknown := row(StatusUnknown) // UNKNOWN since t0-30s; the database clock is t0+2s
	cases := []struct {
		name     string
		a        *Row
		deadline time.Duration
		escs     map[Reason]EscalationState
		write    Write
		open     []Reason
	}{
		{"past the deadline", unknown, 30 * time.Second, nil, WriteDeadlineDone, []Reason{ReasonDeadlineExceeded}},
		{"at the deadline", unknown, 32 * time.Second, nil, WriteDeadlineDone, []Reason{ReasonDeadlineExceeded}},
		{"before it", unknown, 33 * time.Second, nil, WriteNone, nil},
		{"held by ambiguous_match", unknown, time.Second, map[Reason]EscalationState{ReasonAmbiguousMatch: EscalationOpen}, WriteDeadlineDone, nil},
		{"held by no_lookup_capability", unknown, time.Second, map[Reason]EscalationState{ReasonNoLookupCapability: EscalationOpen}, WriteDeadlineDone, nil},
		{"a closed ambiguous_match holds nothing", unknown, time.Second, map[Reason]EscalationState{ReasonAmbiguousMatch: EscalationClosed}, WriteDeadlineDone, []Reason{ReasonDeadlineExceeded}},
		{"other escalations hold nothing", unknown, time.Second, map[Reason]EscalationState{ReasonKeyConflict: EscalationOpen}, WriteDeadlineDone, []Reason{ReasonDeadlineExceeded}},
		{"settled meanwhile", row(StatusConfirmed), time.Second, nil, WriteNone, nil},
	}
	for _, c := range cases {
		s := OnDeadline(c.a, c.escs, c.deadline, testEnv)
		if got := shapeOf(s); got.write != c.write || !slices.Equal(got.open, c.open) {
			t.Errorf("%s: write %v open %v", c.name, got.write, got.open)
		}
	}
}

// TestOnBegin: the Producer API's begin (docs/design.md Part 2): a gate refusal is a value.
func TestOnBegin(t *testing.T) {
	v2 := started(withVersion(2))
	v2.IdempotencyKey, v2.OccurredAt = "book:bi_1:v2", dbNow
	cases := []struct {
		name    string
		sibs    []*Row
		refused GateReason
	}{
		{"earlier UNKNOWN: reconcile, never a new create", []*Row{version(1, StatusUnknown, false, false)}, GateEarlierUnknown},
		{"earlier IN_PROGRESS", []*Row{version(1, StatusInProgress, false, false)}, GateEarlierInProgress},
		{"earlier CONFIRMED", []*Row{version(1, StatusConfirmed, false, false)}, GateEarlierConfirmed},
		{"earlier FAILED retryable: allowed", []*Row{version(1, StatusFailed, false, false)}, ""},
	}
	for _, c := range cases {
		s := OnBegin(nil, c.sibs, v2, hashA, testEnv)
		if s.Refused != c.refused {
			t.Errorf("%s: refused %q, want %q", c.name, s.Refused, c.refused)
		}
		if c.refused != "" && (s.Next != nil || s.Write != WriteNone || s.Audit != nil) {
			t.Errorf("%s: a refusal writes nothing: %+v", c.name, shapeOf(s))
		}
		if c.refused == "" && (s.Write != WriteCreate || s.Next.Status != StatusInProgress || !s.Next.GateJudged) {
			t.Errorf("%s: %+v", c.name, shapeOf(s))
		}
	}
	four := started(withVersion(4))
	if s := OnBegin(nil, nil, four, hashA, testEnv); s.Refused != GateMaxVersions {
		t.Errorf("v4: %q", s.Refused)
	}
	// An existing operation key skips the gate: the started column of the table.
	if s := OnBegin(row(StatusUnknown), []*Row{version(1, StatusUnknown, false, false)}, started(), hashB, testEnv); s.Refused != "" || s.Verdict.Action != ActionKeyConflict {
		t.Errorf("existing key: %+v", shapeOf(s))
	}
	if s := OnBegin(row(StatusUnknown), nil, started(), hashA, testEnv); s.Verdict.Action != ActionRepeat {
		t.Errorf("existing key, same hash: %v", s.Verdict.Action)
	}
}

// TestEscalationLifecycle: docs/design.md#escalations: opened once, a recurrence after closing is
// audited and not reopened; outcome escalations close on a terminal state by any cause, anomaly
// escalations on a manual decision (its escalationId alone when given); duplicates.
func TestEscalationLifecycle(t *testing.T) {
	for existing, want := range map[EscalationState]Opening{"": OpeningInsert, EscalationOpen: OpeningNone, EscalationClosed: OpeningRecurred} {
		if got := EscalationOnOpen(existing); got != want {
			t.Errorf("existing %q: %v, want %v", existing, got, want)
		}
	}
	if !slices.Equal(EscalationStates(), []EscalationState{"open", "closed"}) {
		t.Errorf("states %v", EscalationStates())
	}
	for _, r := range Reasons() {
		want := r == ReasonDeadlineExceeded || r == ReasonAmbiguousMatch || r == ReasonNoLookupCapability
		if r.Outcome() != want || slices.Contains(OutcomeReasons, r) != want || slices.Contains(AnomalyReasons, r) == want {
			t.Errorf("%s: outcome %v", r, r.Outcome())
		}
	}
	outcome := Close{Reasons: OutcomeReasons, ClosedBy: "event"}
	anomaly := Close{Reasons: AnomalyReasons, ClosedBy: "manual", OnlyID: "esc-1"}
	for _, c := range []struct {
		c      Close
		id     string
		reason Reason
		closes bool
	}{
		{outcome, "x", ReasonDeadlineExceeded, true},
		{outcome, "x", ReasonKeyConflict, false},
		{anomaly, "esc-1", ReasonKeyConflict, true},
		{anomaly, "esc-2", ReasonKeyConflict, false},
		{anomaly, "esc-1", ReasonAmbiguousMatch, false},
		{Close{}, "x", ReasonBlindRetry, true},
	} {
		if got := c.c.Closes(c.id, c.reason); got != c.closes {
			t.Errorf("%+v closes %s %s = %v", c.c, c.id, c.reason, got)
		}
	}
	// Every cause that turns an attempt terminal resolves it, which closes its outcome escalations.
	for closedBy, s := range map[string]Step{
		CauseEvent:  OnEvent(row(StatusUnknown), succeeded, FactOf(succeeded, nil), events.Digests{}, testEnv),
		CauseLookup: OnSettle(row(StatusUnknown), Settlement{Status: StatusFailed, Source: SourceAuthoritativeNotFound, Cause: CauseLookup}, testEnv),
		CauseManual: OnDecision(row(StatusUnknown), decision("FAILED", "", ""), testEnv),
	} {
		if s.Resolve == nil || s.Resolve.ClosedBy != closedBy {
			t.Errorf("%s: resolve %+v", closedBy, s.Resolve)
		}
	}
	// Provider reference claims.
	a := row(StatusConfirmed)
	if dup, _ := OnClaimConflict(a, a.ID, "e"); dup {
		t.Error("a claim by the owner is a no-op")
	}
	owner := uuid.MustParse("00000000-0000-7000-8000-0000000000ff")
	if dup, an := OnClaimConflict(a, owner, "e"); !dup || an.Kind != "duplicate_provider_reference" || an.EventID != "e" || an.Detail["owner"] != owner {
		t.Errorf("duplicate: %v %+v", dup, an)
	}
	// Duplicate bookings: a second CONFIRMED version of BOOK, PAYMENT_AUTHORIZE, PAYMENT_CAPTURE or REFUND.
	v1, v2 := version(1, StatusConfirmed, false, false), version(2, StatusConfirmed, true, false)
	if got := DuplicateBookings(v2, []*Row{v1, v2}); len(got) != 1 || got[0] != v1 {
		t.Errorf("duplicates %v", got)
	}
	v1.Operation, v2.Operation = events.OpCancel, events.OpCancel
	if got := DuplicateBookings(v2, []*Row{v1, v2}); got != nil {
		t.Errorf("CANCEL duplicates %v", got)
	}
	if got := DuplicateBookings(version(2, StatusFailed, true, false), []*Row{version(1, StatusConfirmed, false, false)}); got != nil {
		t.Errorf("FAILED duplicates %v", got)
	}
}
