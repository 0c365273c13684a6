package attempt

// Table tests of the transition function (transition.go, ladder.go) — no PostgreSQL: every row
// of docs/design.md's transition table, the timeout taxonomy, the gate, the ladder and the
// escalation lifecycle, with the exact state and effects each returns.

import (
	"errors"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/bookrecon/bookrecon/events"
	"github.com/bookrecon/bookrecon/providers"
)

var (
	t0      = time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC) // events' occurredAt
	dbNow   = t0.Add(2 * time.Second)                      // the transaction's database clock
	hashA   = events.Digests{RequestHash: "hash-a", Fingerprint: "fp-a"}
	hashB   = events.Digests{RequestHash: "hash-b", Fingerprint: "fp-b"}
	testEnv = Env{Now: dbNow, FirstCheck: 3 * time.Second, Policy: Policy{Lookups: []string{"client_reference"}, MaxVersions: 3}}
)

type evOpt func(*events.Attempt)

func withOutcome(o events.Outcome) evOpt { return func(e *events.Attempt) { e.Outcome = &o } }
func withVersion(n int) evOpt            { return func(e *events.Attempt) { e.OperationVersion = n } }
func withProvider(p string) evOpt        { return func(e *events.Attempt) { e.Provider = p } }
func withIntent(i string) evOpt          { return func(e *events.Attempt) { e.BookingIntentID = i } }
func withRecovery(r events.Recovery) evOpt {
	return func(e *events.Attempt) { e.Recovery = r }
}

func attemptEvent(typ events.EventType, opts ...evOpt) events.Attempt {
	e := events.Attempt{SpecVersion: 1, EventID: "ev-" + string(typ), EventType: typ, OccurredAt: t0, TenantID: "t",
		BookingIntentID: "bi_1", Operation: events.OpBook, OperationVersion: 1, IdempotencyKey: "book:bi_1:v1",
		KeySubject: "bi_1", Provider: "sim-hotels", Recovery: events.Recovery{ClientReference: "cr-1"}}
	if typ == events.EventStarted {
		e.Request = &events.Request{OfferVersion: "o:1", TravellerRef: "tr"}
	}
	for _, o := range opts {
		o(&e)
	}
	return e
}

var (
	started      = func(opts ...evOpt) events.Attempt { return attemptEvent(events.EventStarted, opts...) }
	succeeded    = attemptEvent(events.EventSucceeded, withOutcome(events.Outcome{ProviderReference: "REF-1"}))
	succeededRef = func(ref string) events.Attempt {
		return attemptEvent(events.EventSucceeded, withOutcome(events.Outcome{ProviderReference: ref}))
	}
	failed    = attemptEvent(events.EventFailed, withOutcome(events.Outcome{FailureCode: "SOLD_OUT", Retryable: ptr(true)}))
	unknownEv = func(class events.TimeoutClass, sent *bool) events.Attempt {
		return attemptEvent(events.EventOutcomeUnknown, withOutcome(events.Outcome{TimeoutClass: class, RequestSent: sent}))
	}
)

// row is an existing attempt of key book:bi_1:v1 in status st, its start applied with hashA.
func row(st Status) *Row {
	a := &Row{ID: uuid.MustParse("00000000-0000-7000-8000-000000000001"), TenantID: "t", BookingIntentID: "bi_1",
		Operation: events.OpBook, Subject: "bi_1", Version: 1, IdempotencyKey: "book:bi_1:v1", Provider: "sim-hotels",
		Status: st, RequestHash: hashA.RequestHash, Fingerprint: hashA.Fingerprint, ClientReference: "cr-1",
		FirstEventAt: t0.Add(-time.Minute), WindowStart: t0.Add(-time.Minute), CreatedAt: t0.Add(-time.Minute),
		StartedAt: ptr(t0.Add(-time.Minute)), recovery: events.Recovery{ClientReference: "cr-1"}}
	switch st {
	case StatusUnknown:
		a.UnknownSince, a.TimeoutClass = ptr(t0.Add(-30*time.Second)), "read_timeout"
	case StatusConfirmed:
		a.Source, a.ProviderReference, a.TerminalAt = SourceEvent, "REF-1", ptr(t0.Add(-30*time.Second))
	case StatusFailed:
		a.Source, a.FailureCode, a.Retryable = SourceEvent, "SOLD_OUT", true
		a.FailedFactAt, a.TerminalAt = ptr(t0.Add(-30*time.Second)), ptr(t0.Add(-30*time.Second))
	}
	return a
}

// shape is what a Step says, compared exactly.
type shape struct {
	action    Action
	status    Status
	source    Source
	write     Write
	audit     string // from→to:cause:note ("" no audit)
	anomalies []string
	open      []Reason
	resolve   string // closedBy ("" none)
	claim     bool
	dups      bool
	gate      string // "", "later", "self"
	kept      bool
	counters  string // repeat, key_conflict, contradiction, unknown:<class>
}

func shapeOf(s Step) shape {
	sh := shape{action: s.Verdict.Action, status: s.Verdict.Status, write: s.Write, claim: s.Claim, dups: s.Duplicates, kept: s.ApplyKept}
	if s.Next != nil {
		sh.status, sh.source = s.Next.Status, s.Next.Source
	}
	if a := s.Audit; a != nil {
		sh.audit = string(a.From) + "→" + string(a.To) + ":" + a.Cause + ":" + a.Note
	}
	for _, a := range s.Anomalies {
		sh.anomalies = append(sh.anomalies, a.Kind)
	}
	for _, o := range s.Open {
		sh.open = append(sh.open, o.Reason)
	}
	if s.Resolve != nil {
		sh.resolve = s.Resolve.ClosedBy
	}
	switch {
	case s.Gate && s.JudgeSelf:
		sh.gate = "self"
	case s.Gate:
		sh.gate = "later"
	}
	switch {
	case s.Repeat:
		sh.counters = "repeat"
	case s.KeyConflict:
		sh.counters = "key_conflict"
	case s.Contradicted:
		sh.counters = "contradiction"
	case s.UnknownClass != "":
		sh.counters = "unknown:" + string(s.UnknownClass)
	}
	return sh
}

// TestTransitionTable: every cell of docs/design.md#attempt-states for events carrying the
// attempt's own key, plus the rules under it (out-of-order starts, provider and intent
// conflicts, a repeated outcome_unknown bringing a reference).
func TestTransitionTable(t *testing.T) {
	notSent := unknownEv(events.TimeoutConnect, ptr(false))
	read := unknownEv(events.TimeoutRead, nil)
	cases := []struct {
		name string
		cur  *Row
		ev   events.Attempt
		d    events.Digests
		want shape
	}{
		// none
		{"none/started", nil, started(), hashA, shape{action: ActionCreate, status: StatusInProgress, write: WriteCreate,
			audit: "→IN_PROGRESS:event:started", gate: "self"}},
		{"none/succeeded", nil, succeeded, events.Digests{}, shape{action: ActionCreate, status: StatusConfirmed, source: SourceEvent,
			write: WriteCreate, audit: "→CONFIRMED:event:created by its outcome", resolve: "event", claim: true, dups: true, gate: "self", kept: true}},
		{"none/failed", nil, failed, events.Digests{}, shape{action: ActionCreate, status: StatusFailed, source: SourceEvent,
			write: WriteCreate, audit: "→FAILED:event:created by its outcome", resolve: "event", dups: true, gate: "self", kept: true}},
		{"none/outcome_unknown", nil, read, events.Digests{}, shape{action: ActionCreate, status: StatusUnknown, write: WriteCreate,
			audit: "→UNKNOWN:event:created by its outcome", gate: "self", kept: true, counters: "unknown:read_timeout"}},
		{"none/outcome_unknown not_sent", nil, notSent, events.Digests{}, shape{action: ActionCreate, status: StatusFailed,
			source: SourceNotSent, write: WriteCreate, audit: "→FAILED:event:created by its outcome", resolve: "event", dups: true, gate: "self", kept: true}},
		// IN_PROGRESS
		{"in_progress/started same hash (sc11)", row(StatusInProgress), started(), hashA, shape{action: ActionRepeat, status: StatusInProgress,
			audit: "IN_PROGRESS→IN_PROGRESS:event:same request hash", counters: "repeat"}},
		{"in_progress/started other hash (sc10)", row(StatusInProgress), started(), hashB, shape{action: ActionKeyConflict, status: StatusInProgress,
			audit: "IN_PROGRESS→IN_PROGRESS:event:request hash differs", anomalies: []string{"key_conflict"}, open: []Reason{ReasonKeyConflict}, counters: "key_conflict"}},
		{"in_progress/succeeded", row(StatusInProgress), succeeded, events.Digests{}, shape{action: ActionTransition, status: StatusConfirmed,
			source: SourceEvent, write: WriteState, audit: "IN_PROGRESS→CONFIRMED:event:attempt.succeeded", resolve: "event", claim: true, dups: true, gate: "later", kept: true}},
		{"in_progress/failed", row(StatusInProgress), failed, events.Digests{}, shape{action: ActionTransition, status: StatusFailed,
			source: SourceEvent, write: WriteState, audit: "IN_PROGRESS→FAILED:event:attempt.failed", resolve: "event", dups: true, gate: "later", kept: true}},
		{"in_progress/outcome_unknown", row(StatusInProgress), read, events.Digests{}, shape{action: ActionTransition, status: StatusUnknown,
			write: WriteState, audit: "IN_PROGRESS→UNKNOWN:event:outcome unknown: read_timeout", gate: "later", kept: true, counters: "unknown:read_timeout"}},
		{"in_progress/outcome_unknown not_sent", row(StatusInProgress), notSent, events.Digests{}, shape{action: ActionTransition, status: StatusFailed,
			source: SourceNotSent, write: WriteState, audit: "IN_PROGRESS→FAILED:event:outcome unknown: connect_timeout", resolve: "event", dups: true, gate: "later", kept: true}},
		// UNKNOWN
		{"unknown/started same hash", row(StatusUnknown), started(), hashA, shape{action: ActionRepeat, status: StatusUnknown,
			audit: "UNKNOWN→UNKNOWN:event:same request hash", counters: "repeat"}},
		{"unknown/started other hash", row(StatusUnknown), started(), hashB, shape{action: ActionKeyConflict, status: StatusUnknown,
			audit: "UNKNOWN→UNKNOWN:event:request hash differs", anomalies: []string{"key_conflict"}, open: []Reason{ReasonKeyConflict}, counters: "key_conflict"}},
		{"unknown/succeeded", row(StatusUnknown), succeeded, events.Digests{}, shape{action: ActionTransition, status: StatusConfirmed,
			source: SourceEvent, write: WriteState, audit: "UNKNOWN→CONFIRMED:event:attempt.succeeded", resolve: "event", claim: true, dups: true, gate: "later", kept: true}},
		{"unknown/failed", row(StatusUnknown), failed, events.Digests{}, shape{action: ActionTransition, status: StatusFailed,
			source: SourceEvent, write: WriteState, audit: "UNKNOWN→FAILED:event:attempt.failed", resolve: "event", dups: true, gate: "later", kept: true}},
		{"unknown/outcome_unknown: no change, audited", row(StatusUnknown), read, events.Digests{}, shape{action: ActionAuditOnly,
			status: StatusUnknown, audit: "UNKNOWN→UNKNOWN:event:outcome unknown again"}},
		// CONFIRMED
		{"confirmed/started same hash", row(StatusConfirmed), started(), hashA, shape{action: ActionRepeat, status: StatusConfirmed,
			source: SourceEvent, audit: "CONFIRMED→CONFIRMED:event:same request hash", counters: "repeat"}},
		{"confirmed/started other hash", row(StatusConfirmed), started(), hashB, shape{action: ActionKeyConflict, status: StatusConfirmed,
			source: SourceEvent, audit: "CONFIRMED→CONFIRMED:event:request hash differs", anomalies: []string{"key_conflict"}, open: []Reason{ReasonKeyConflict}, counters: "key_conflict"}},
		{"confirmed/succeeded same reference: repeat", row(StatusConfirmed), succeeded, events.Digests{}, shape{action: ActionRepeat,
			status: StatusConfirmed, source: SourceEvent, audit: "CONFIRMED→CONFIRMED:event:same provider reference", counters: "repeat"}},
		{"confirmed/succeeded other reference: contradiction", row(StatusConfirmed), succeededRef("REF-2"), events.Digests{}, shape{action: ActionContradiction,
			status: StatusConfirmed, source: SourceEvent, audit: "CONFIRMED→CONFIRMED:event:attempt.succeeded after CONFIRMED",
			anomalies: []string{"contradiction"}, open: []Reason{ReasonContradiction}, counters: "contradiction"}},
		{"confirmed/failed: contradiction, stays", row(StatusConfirmed), failed, events.Digests{}, shape{action: ActionContradiction,
			status: StatusConfirmed, source: SourceEvent, audit: "CONFIRMED→CONFIRMED:event:attempt.failed after CONFIRMED",
			anomalies: []string{"contradiction"}, open: []Reason{ReasonContradiction}, counters: "contradiction"}},
		{"confirmed/outcome_unknown: stale report", row(StatusConfirmed), read, events.Digests{}, shape{action: ActionAuditOnly,
			status: StatusConfirmed, source: SourceEvent, audit: "CONFIRMED→CONFIRMED:event:stale report after CONFIRMED"}},
		// FAILED
		{"failed/started same hash", row(StatusFailed), started(), hashA, shape{action: ActionRepeat, status: StatusFailed,
			source: SourceEvent, audit: "FAILED→FAILED:event:same request hash", counters: "repeat"}},
		{"failed/started other hash", row(StatusFailed), started(), hashB, shape{action: ActionKeyConflict, status: StatusFailed,
			source: SourceEvent, audit: "FAILED→FAILED:event:request hash differs", anomalies: []string{"key_conflict"}, open: []Reason{ReasonKeyConflict}, counters: "key_conflict"}},
		{"failed/succeeded: contradiction, stays FAILED (sc13)", row(StatusFailed), succeeded, events.Digests{}, shape{action: ActionContradiction,
			status: StatusFailed, source: SourceEvent, audit: "FAILED→FAILED:event:succeeded after FAILED",
			anomalies: []string{"contradiction"}, open: []Reason{ReasonContradiction}, counters: "contradiction"}},
		{"failed/failed: repeat", row(StatusFailed), failed, events.Digests{}, shape{action: ActionRepeat, status: StatusFailed,
			source: SourceEvent, audit: "FAILED→FAILED:event:failed again", counters: "repeat"}},
		{"failed/outcome_unknown: stale report", row(StatusFailed), read, events.Digests{}, shape{action: ActionAuditOnly,
			status: StatusFailed, source: SourceEvent, audit: "FAILED→FAILED:event:stale report after FAILED"}},
		// Key conflicts on provider and intent, whatever the state.
		{"provider differs", row(StatusUnknown), started(withProvider("sim-air")), hashA, shape{action: ActionKeyConflict, status: StatusUnknown,
			audit: "UNKNOWN→UNKNOWN:event:provider differs", anomalies: []string{"key_conflict"}, open: []Reason{ReasonKeyConflict}, counters: "key_conflict"}},
		{"intent differs", row(StatusConfirmed), succeeded, events.Digests{}, shape{}}, // filled below
	}
	cases[len(cases)-1].ev = attemptEvent(events.EventSucceeded, withIntent("bi_2"), withOutcome(events.Outcome{ProviderReference: "REF-1"}))
	cases[len(cases)-1].want = shape{action: ActionKeyConflict, status: StatusConfirmed, source: SourceEvent,
		audit: "CONFIRMED→CONFIRMED:event:bookingIntentId differs", anomalies: []string{"key_conflict"}, open: []Reason{ReasonKeyConflict}, counters: "key_conflict"}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := OnEvent(c.cur, c.ev, FactOf(c.ev, events.DefaultTransportTimeoutCodes()), c.d, testEnv)
			if got := shapeOf(s); !reflect.DeepEqual(got, c.want) {
				t.Errorf("step\n got %+v\nwant %+v", got, c.want)
			}
			if c.cur != nil && s.Write == WriteNone && s.Next != c.cur {
				t.Error("a step that writes nothing must leave the attempt as loaded")
			}
		})
	}
}

// TestTransitionState: the exact columns a transition stores, on the database clock.
func TestTransitionState(t *testing.T) {
	fc := testEnv.FirstCheck
	t.Run("created UNKNOWN", func(t *testing.T) {
		s := OnEvent(nil, unknownEv(events.TimeoutRead, nil), FactOf(unknownEv(events.TimeoutRead, nil), nil), events.Digests{}, testEnv)
		a := s.Next
		if a.UnknownSince == nil || !a.UnknownSince.Equal(dbNow) || a.NextCheckAt == nil || !a.NextCheckAt.Equal(dbNow.Add(fc)) ||
			!a.WindowStart.Equal(dbNow) || !a.FirstEventAt.Equal(t0) || a.StartedAt != nil || a.TerminalAt != nil ||
			a.TimeoutClass != "read_timeout" || a.RequestHash != "" || a.ClientReference != "cr-1" || !a.CreatedAt.Equal(dbNow) {
			t.Errorf("row %+v", a)
		}
	})
	t.Run("created FAILED not_sent keeps requestSent", func(t *testing.T) {
		ev := unknownEv(events.TimeoutConnect, ptr(false))
		a := OnEvent(nil, ev, FactOf(ev, nil), events.Digests{}, testEnv).Next
		if a.Status != StatusFailed || a.Source != SourceNotSent || a.FailureCode != "NOT_SENT" || !a.Retryable ||
			a.requestSent == nil || *a.requestSent || a.FailedFactAt == nil || !a.FailedFactAt.Equal(t0) ||
			a.TerminalAt == nil || !a.TerminalAt.Equal(dbNow) || a.NextCheckAt != nil || *retryableOf(a) != true {
			t.Errorf("row %+v", a)
		}
	})
	t.Run("IN_PROGRESS to CONFIRMED", func(t *testing.T) {
		late := attemptEvent(events.EventSucceeded, withOutcome(events.Outcome{ProviderReference: "REF-9"}))
		late.OccurredAt = dbNow.Add(time.Minute) // a producer clock ahead: window start is the later
		a := OnEvent(row(StatusInProgress), late, FactOf(late, nil), events.Digests{}, testEnv).Next
		if a.ProviderReference != "REF-9" || !a.WindowStart.Equal(late.OccurredAt) || a.TerminalAt == nil || !a.TerminalAt.Equal(dbNow) ||
			a.FailedFactAt != nil || a.NextCheckAt != nil || retryableOf(a) != nil || a.UnknownSince != nil {
			t.Errorf("row %+v", a)
		}
	})
	t.Run("UNKNOWN to FAILED keeps unknown_since", func(t *testing.T) {
		cur := row(StatusUnknown)
		a := OnEvent(cur, failed, FactOf(failed, nil), events.Digests{}, testEnv).Next
		if !a.UnknownSince.Equal(*cur.UnknownSince) || a.FailureCode != "SOLD_OUT" || !a.Retryable || !a.FailedFactAt.Equal(t0) ||
			a.TimeoutClass != "read_timeout" || !a.WindowStart.Equal(dbNow) {
			t.Errorf("row %+v", a)
		}
		if cur.Status != StatusUnknown {
			t.Error("the loaded row must not change")
		}
	})
	t.Run("repeated outcome_unknown records a new reference", func(t *testing.T) {
		ev := attemptEvent(events.EventOutcomeUnknown, withOutcome(events.Outcome{TimeoutClass: events.TimeoutRead, ProviderReference: "REF-7"}))
		s := OnEvent(row(StatusUnknown), ev, FactOf(ev, nil), events.Digests{}, testEnv)
		if got := shapeOf(s); !reflect.DeepEqual(got, shape{action: ActionAuditOnly, status: StatusUnknown, write: WriteReference,
			audit: "UNKNOWN→UNKNOWN:event:outcome unknown again; provider reference recorded", claim: true}) || s.Next.ProviderReference != "REF-7" {
			t.Errorf("step %+v, reference %q", got, s.Next.ProviderReference)
		}
	})
	t.Run("late start fills in (sc19)", func(t *testing.T) {
		cur := row(StatusConfirmed)
		cur.RequestHash, cur.Fingerprint, cur.StartedAt = "", "", nil
		cur.recovery = events.Recovery{PaymentReference: "pay-1"}
		cur.ClientReference = ""
		ev := started(withRecovery(events.Recovery{ClientReference: "cr-9", PaymentReference: "pay-2", CorrelationID: "c-1"}))
		s := OnEvent(cur, ev, FactOf(ev, nil), hashA, testEnv)
		want := shape{action: ActionFillRequest, status: StatusConfirmed, source: SourceEvent, write: WriteFill,
			audit: "CONFIRMED→CONFIRMED:event:late start fills in the request", claim: true, gate: "self"}
		if got := shapeOf(s); !reflect.DeepEqual(got, want) {
			t.Errorf("step\n got %+v\nwant %+v", got, want)
		}
		a := s.Next
		wantRc := events.Recovery{ClientReference: "cr-9", PaymentReference: "pay-1", CorrelationID: "c-1"}
		if a.RequestHash != "hash-a" || a.Fingerprint != "fp-a" || a.recovery != wantRc || a.ClientReference != "cr-9" ||
			!a.StartedAt.Equal(t0) || !a.WindowStart.Equal(dbNow) || a.request == nil {
			t.Errorf("row %+v", a)
		}
	})
	t.Run("late start on UNKNOWN without lookups escalates no_lookup_capability", func(t *testing.T) {
		cur := row(StatusUnknown)
		cur.RequestHash, cur.ClientReference, cur.recovery = "", "", events.Recovery{}
		env := testEnv
		env.Policy.Lookups = []string{"fingerprint"}
		ev := started(withRecovery(events.Recovery{}))
		ev.Operation, ev.IdempotencyKey, ev.KeySubject = events.OpCancel, "cancel:bk_1:v1", "bk_1"
		cur.Operation, cur.IdempotencyKey, cur.Subject = events.OpCancel, "cancel:bk_1:v1", "bk_1"
		s := OnEvent(cur, ev, FactOf(ev, nil), hashA, env)
		if !slices.Equal(shapeOf(s).open, []Reason{ReasonNoLookupCapability}) {
			t.Errorf("open %v", shapeOf(s).open)
		}
	})
}

// TestTimeoutTaxonomy: docs/design.md#timeout-taxonomy and the transport-timeout rule.
func TestTimeoutTaxonomy(t *testing.T) {
	f, tr := ptr(false), ptr(true)
	cases := []struct {
		class  events.TimeoutClass
		sent   *bool
		status Status
		source Source
		label  events.TimeoutClass
	}{
		{events.TimeoutConnect, f, StatusFailed, SourceNotSent, events.TimeoutConnect},
		{events.TimeoutConnect, tr, StatusUnknown, "", events.TimeoutConnect},
		{events.TimeoutConnect, nil, StatusUnknown, "", events.TimeoutConnect},
		{events.TimeoutRead, f, StatusUnknown, "", events.TimeoutRead}, // requestSent false counts as null
		{events.TimeoutRead, nil, StatusUnknown, "", events.TimeoutRead},
		{events.TimeoutConnectionReset, f, StatusUnknown, "", events.TimeoutConnectionReset},
		{events.TimeoutClient, f, StatusUnknown, "", events.TimeoutClient},
		{events.TimeoutBusiness, nil, StatusUnknown, "", events.TimeoutBusiness},
		{"gateway_hiccup", f, StatusUnknown, "", events.TimeoutOther}, // kept as written, counted as other
	}
	for _, c := range cases {
		ev := unknownEv(c.class, c.sent)
		fact := FactOf(ev, nil)
		s := OnEvent(row(StatusInProgress), ev, fact, events.Digests{}, testEnv)
		if s.Next.Status != c.status || s.Next.Source != c.source || s.Next.TimeoutClass != string(c.class) {
			t.Errorf("%s sent=%v: %s/%s class %q; want %s/%s", c.class, c.sent, s.Next.Status, s.Next.Source, s.Next.TimeoutClass, c.status, c.source)
		}
		if c.status == StatusUnknown && s.UnknownClass != c.label {
			t.Errorf("%s: counted as %q, want %q", c.class, s.UnknownClass, c.label)
		}
	}
	// A failed event whose failureCode is a transport timeout is not proof of failure.
	for _, code := range events.DefaultTransportTimeoutCodes() {
		ev := attemptEvent(events.EventFailed, withOutcome(events.Outcome{FailureCode: code, Retryable: ptr(false)}))
		s := OnEvent(row(StatusInProgress), ev, FactOf(ev, events.DefaultTransportTimeoutCodes()), events.Digests{}, testEnv)
		if s.Next.Status != StatusUnknown || s.Next.TimeoutClass != "read_timeout" || s.Next.FailureCode != code || s.UnknownClass != events.TimeoutRead {
			t.Errorf("%s: %+v", code, s.Next)
		}
	}
	// Exact match only.
	ev := attemptEvent(events.EventFailed, withOutcome(events.Outcome{FailureCode: "READ_TIMEOUT_X", Retryable: ptr(false)}))
	if s := OnEvent(row(StatusInProgress), ev, FactOf(ev, events.DefaultTransportTimeoutCodes()), events.Digests{}, testEnv); s.Next.Status != StatusFailed {
		t.Errorf("READ_TIMEOUT_X: %s, want FAILED", s.Next.Status)
	}
}

func sibling(v int, st Status, src Source, retryable bool, failedAt time.Time) Sibling {
	return Sibling{Version: v, Status: st, Source: src, Retryable: retryable, FailedFactAt: failedAt}
}

// TestSafeRetryGate: docs/design.md#safe-retry-gate.
func TestSafeRetryGate(t *testing.T) {
	start := t0
	before := t0.Add(-time.Minute)
	ok := func(v int) Sibling { return sibling(v, StatusFailed, SourceEvent, true, before) }
	cases := []struct {
		name    string
		n       int
		earlier []Sibling
		max     int
		safe    bool
		reason  GateReason
	}{
		{"first version", 1, nil, 3, true, GateSafeRetry},
		{"v2 after a retryable failure", 2, []Sibling{ok(1)}, 3, true, GateSafeRetry},
		{"v3 after two", 3, []Sibling{ok(1), ok(2)}, 3, true, GateSafeRetry},
		{"beyond maxVersions", 4, []Sibling{ok(1), ok(2), ok(3)}, 3, false, GateMaxVersions},
		{"missing earlier version", 3, []Sibling{ok(2)}, 3, false, GateEarlierMissing},
		{"earlier IN_PROGRESS", 2, []Sibling{sibling(1, StatusInProgress, "", false, time.Time{})}, 3, false, GateEarlierInProgress},
		{"earlier UNKNOWN", 2, []Sibling{sibling(1, StatusUnknown, "", false, time.Time{})}, 3, false, GateEarlierUnknown},
		{"earlier CONFIRMED", 2, []Sibling{sibling(1, StatusConfirmed, SourceEvent, false, time.Time{})}, 3, false, GateEarlierConfirmed},
		{"not retryable", 2, []Sibling{sibling(1, StatusFailed, SourceEvent, false, before)}, 3, false, GateNotRetryable},
		{"failure proves nothing", 2, []Sibling{sibling(1, StatusFailed, "", true, before)}, 3, false, GateNotRetryable},
		{"failed after the start", 2, []Sibling{sibling(1, StatusFailed, SourceEvent, true, start.Add(time.Second))}, 3, false, GateFailedAfterStart},
		{"failed at the start", 2, []Sibling{sibling(1, StatusFailed, SourceEvent, true, start)}, 3, true, GateSafeRetry},
		{"not_sent", 2, []Sibling{sibling(1, StatusFailed, SourceNotSent, true, before)}, 3, true, GateSafeRetry},
		{"authoritative not found", 2, []Sibling{sibling(1, StatusFailed, SourceAuthoritativeNotFound, true, before)}, 3, true, GateSafeRetry},
		{"lookup REJECTED", 2, []Sibling{sibling(1, StatusFailed, SourceClientReference, true, before)}, 3, true, GateSafeRetry},
		{"manual", 2, []Sibling{sibling(1, StatusFailed, SourceManual, true, before)}, 3, true, GateSafeRetry},
		{"manual not retryable", 2, []Sibling{sibling(1, StatusFailed, SourceManual, false, before)}, 3, false, GateNotRetryable},
	}
	for _, c := range cases {
		if safe, reason := SafeRetry(c.n, start, c.earlier, c.max); safe != c.safe || reason != c.reason {
			t.Errorf("%s: %v %s; want %v %s", c.name, safe, reason, c.safe, c.reason)
		}
	}
}

func version(v int, st Status, judged, blind bool) *Row {
	a := row(st)
	a.ID = uuid.MustParse("00000000-0000-7000-8000-00000000000" + string(rune('0'+v)))
	a.Version, a.IdempotencyKey, a.GateJudged, a.BlindRetry = v, "book:bi_1:v"+string(rune('0'+v)), judged, blind
	if st == StatusFailed {
		a.FailedFactAt = ptr(t0.Add(-2 * time.Minute))
	}
	return a
}

// TestGateJudgements: who the gate judges again when a version is written.
func TestGateJudgements(t *testing.T) {
	three := func(string) int { return 3 }
	judged := func(js []GateJudgement) (out []string) {
		for _, j := range js {
			out = append(out, j.Row.IdempotencyKey+":"+string(j.Reason))
		}
		return out
	}
	v1u, v2, v3 := version(1, StatusUnknown, false, false), version(2, StatusInProgress, true, false), version(3, StatusInProgress, false, false)
	// v2 created while v1 is UNKNOWN: a blind retry.
	if got := judged(GateJudgements(v2, []*Row{v1u, v2}, true, three)); !slices.Equal(got, []string{"book:bi_1:v2:earlier_unknown"}) {
		t.Errorf("self: %v", got)
	}
	// Not judging self: nothing (v1 is never judged).
	if got := judged(GateJudgements(v2, []*Row{v1u, v2}, false, three)); got != nil {
		t.Errorf("not self: %v", got)
	}
	// v1 settled FAILED later: the already judged v2 is judged again (its start predates the failure); v3, never judged, is not.
	v1f := version(1, StatusFailed, false, false)
	v1f.FailedFactAt = ptr(t0)
	if got := judged(GateJudgements(v1f, []*Row{v1f, v2, v3}, false, three)); !slices.Equal(got, []string{"book:bi_1:v2:failed_after_start"}) {
		t.Errorf("later: %v", got)
	}
	// Once raised it stays raised: a blind retry is not judged again.
	v2b := version(2, StatusInProgress, true, true)
	if got := judged(GateJudgements(v1f, []*Row{v1f, v2b}, false, three)); got != nil {
		t.Errorf("blind: %v", got)
	}
}

// TestLadder: docs/design.md#reconciliation, the ladder's rungs in order.
func TestLadder(t *testing.T) {
	ref, cr, fp := providers.LookupProviderReference, providers.LookupClientReference, providers.LookupFingerprint
	all := []providers.LookupKind{fp, cr, ref}
	withRef := func(a *Row) *Row { a.ProviderReference = "REF-1"; return a }
	noStart := func(a *Row) *Row { a.RequestHash = ""; return a }
	noClient := func(a *Row) *Row { a.ClientReference = ""; return a }
	cancel := func(a *Row) *Row { a.Operation = events.OpCancel; return a }
	cases := []struct {
		name    string
		a       *Row
		lookups []providers.LookupKind
		kind    providers.LookupKind
		value   string
		none    bool
		noCap   bool
	}{
		{"provider reference first", withRef(row(StatusUnknown)), all, ref, "REF-1", false, false},
		{"reference known, not supported: client reference", withRef(row(StatusUnknown)), []providers.LookupKind{cr}, cr, "cr-1", false, false},
		{"client reference", row(StatusUnknown), all, cr, "cr-1", false, false},
		{"fingerprint for BOOK once started", noClient(row(StatusUnknown)), all, fp, "fp-a", false, false},
		{"no fingerprint for CANCEL: started, none applies", cancel(noClient(row(StatusUnknown))), all, "", "", true, true},
		{"no fingerprint before the start: back off", noStart(noClient(row(StatusUnknown))), all, "", "", true, false},
		{"provider without lookups", row(StatusUnknown), nil, "", "", true, true},
		{"start applied, no identity", noClient(row(StatusUnknown)), []providers.LookupKind{cr}, "", "", true, true},
	}
	for _, c := range cases {
		p := Ladder(c.a, c.lookups, 10*time.Minute)
		if p.Query.Kind != c.kind || p.Query.Value != c.value || p.None != c.none || p.NoCapability != c.noCap {
			t.Errorf("%s: %+v", c.name, p)
		}
	}
	p := Ladder(noClient(row(StatusUnknown)), all, 10*time.Minute)
	start := t0.Add(-time.Minute)
	if !p.Query.From.Equal(start.Add(-10*time.Minute)) || !p.Query.To.Equal(start.Add(10*time.Minute)) || p.Query.Provider != "sim-hotels" || p.Query.Operation != events.OpBook {
		t.Errorf("fingerprint window %+v", p.Query)
	}
}

// TestJudgeLookup: what one lookup answer concludes.
func TestJudgeLookup(t *testing.T) {
	caps := providers.Capabilities{Name: "sim-hotels", AuthoritativeNotFound: true, ConsistencyWindow: time.Minute, MaxProcessingTime: 5 * time.Minute}
	a := row(StatusUnknown) // window start t0-1m, read_timeout
	cq := providers.Query{Kind: providers.LookupClientReference, Value: "cr-1"}
	fq := providers.Query{Kind: providers.LookupFingerprint, Value: "fp-a"}
	rec := func(st providers.RecordStatus, fp string) []providers.Record {
		return []providers.Record{{ProviderReference: "REF-5", Status: st, Fingerprint: fp}}
	}
	type want struct {
		settle   string // status/source/code
		escalate Reason
		auth     bool
	}
	set := func(l Lookup) want {
		w := want{escalate: l.Escalate, auth: l.AuthNotFound}
		if s := l.Settle; s != nil {
			w.settle = string(s.Status) + "/" + string(s.Source) + "/" + s.FailureCode + "/" + s.Reference
		}
		return w
	}
	now := t0.Add(time.Minute) // window start + 2m
	cases := []struct {
		name string
		a    *Row
		q    providers.Query
		recs []providers.Record
		err  error
		now  time.Time
		want want
	}{
		{"CONFIRMED", a, cq, rec(providers.StatusConfirmed, ""), nil, now, want{settle: "CONFIRMED/client_reference//REF-5"}},
		{"REJECTED", a, cq, rec(providers.StatusRejected, ""), nil, now, want{settle: "FAILED/client_reference/REJECTED/REF-5"}},
		{"CANCELLED", a, cq, rec(providers.StatusCancelled, "fp-a"), nil, now, want{settle: "FAILED/client_reference/CANCELLED/REF-5"}},
		{"PENDING: back off", a, cq, rec(providers.StatusPending, ""), nil, now, want{}},
		{"reference lookup, other fingerprint: contradiction", a, cq, rec(providers.StatusConfirmed, "fp-x"), nil, now, want{escalate: ReasonContradiction}},
		{"fingerprint equal", a, fq, rec(providers.StatusConfirmed, "fp-a"), nil, now, want{settle: "CONFIRMED/fingerprint//REF-5"}},
		{"fingerprint lookup, record without one: contradiction", a, fq, rec(providers.StatusConfirmed, ""), nil, now, want{escalate: ReasonContradiction}},
		{"several: ambiguous, never a guess", a, cq, append(rec(providers.StatusConfirmed, ""), rec(providers.StatusConfirmed, "")...), nil, now, want{escalate: ReasonAmbiguousMatch}},
		{"none, authoritative, window passed", a, cq, nil, nil, now, want{settle: "FAILED/authoritative_not_found/NOT_FOUND/", auth: true}},
		{"none, at the window's end", a, cq, nil, nil, t0, want{settle: "FAILED/authoritative_not_found/NOT_FOUND/", auth: true}},
		{"none, window not passed", a, cq, nil, nil, t0.Add(-time.Second), want{}},
		{"none by fingerprint: never authoritative", a, fq, nil, nil, now, want{}},
		{"provider error", a, cq, nil, errors.New("boom"), now, want{}},
	}
	for _, c := range cases {
		if got := set(JudgeLookup(c.a, caps, c.q, c.recs, c.err, "", 0, c.now)); got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
	notAuth := caps
	notAuth.AuthoritativeNotFound = false
	if l := JudgeLookup(a, notAuth, cq, nil, nil, "", 0, now); l.Settle != nil {
		t.Error("a provider whose not-found is not authoritative never settles on one")
	}
	business := row(StatusUnknown)
	business.TimeoutClass = string(events.TimeoutBusiness)
	for _, tc := range []struct {
		now  time.Time
		auth bool
	}{{now, false}, {t0.Add(4 * time.Minute), true}} {
		if l := JudgeLookup(business, caps, cq, nil, nil, "", 0, tc.now); l.AuthNotFound != tc.auth {
			t.Errorf("business_timeout at %s: %v, want %v (maxProcessingTime)", tc.now, l.AuthNotFound, tc.auth)
		}
	}
	l := JudgeLookup(a, caps, cq, nil, errors.New("429"), "rate_limited", 7*time.Second, now)
	if l.Result != providers.ResultError || l.RetryAfter != 7*time.Second || l.Audit.Error != "rate_limited" || l.Audit.Kind != "client_reference" {
		t.Errorf("error: %+v", l)
	}
}
