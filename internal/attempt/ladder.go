package attempt

import (
	"fmt"
	"time"

	"github.com/bookrecon/bookrecon/events"
	"github.com/bookrecon/bookrecon/providers"
)

// Plan is the one lookup a check uses: the first rung of the lookup ladder
// (docs/design.md#lookup-ladder) that applies.
type Plan struct {
	Query providers.Query
	// None: no lookup applies. NoCapability: and none ever will (escalate no_lookup_capability,
	// no further checks); None without it: the start has not arrived, back off (the deadline runs).
	None, NoCapability bool
}

// Ladder is the lookup ladder (docs/design.md#lookup-ladder) for a, the only copy: by outcome
// provider reference, by client reference, by fingerprint (BOOK and MODIFY, once the start is
// applied, in a window of ±fingerprintWindow around the started occurredAt), else no lookup — for
// good when the provider has none or the start is applied. lookups are the provider's lookup kinds.
func Ladder(a *Row, lookups []providers.LookupKind, fingerprintWindow time.Duration) Plan {
	has := func(k providers.LookupKind) bool {
		for _, l := range lookups {
			if l == k {
				return true
			}
		}
		return false
	}
	q := providers.Query{Provider: a.Provider, Operation: a.Operation}
	started := a.RequestHash != ""
	switch {
	case a.ProviderReference != "" && has(providers.LookupProviderReference):
		q.Kind, q.Value = providers.LookupProviderReference, a.ProviderReference
	case a.ClientReference != "" && has(providers.LookupClientReference):
		q.Kind, q.Value = providers.LookupClientReference, a.ClientReference
	case a.Operation.HasFingerprint() && started && a.Fingerprint != "" && has(providers.LookupFingerprint):
		start := a.FirstEventAt
		if a.StartedAt != nil {
			start = *a.StartedAt
		}
		q.Kind, q.Value = providers.LookupFingerprint, a.Fingerprint
		q.From, q.To = start.Add(-fingerprintWindow), start.Add(fingerprintWindow)
	case len(lookups) == 0 || started:
		return Plan{None: true, NoCapability: true}
	default:
		return Plan{None: true}
	}
	return Plan{Query: q}
}

func (p Policy) kinds() []providers.LookupKind {
	out := make([]providers.LookupKind, 0, len(p.Lookups))
	for _, l := range p.Lookups {
		out = append(out, providers.LookupKind(l))
	}
	return out
}

func (p Policy) maxVersions() int {
	if p.MaxVersions > 0 {
		return p.MaxVersions
	}
	return 3
}

// LookupAudit is a lookup as the audit trail keeps it.
type LookupAudit struct {
	Kind      string `json:"kind"`
	Result    string `json:"result"`
	Records   int    `json:"records"`
	Status    string `json:"status,omitempty"`
	Reference string `json:"reference,omitempty"`
	Error     string `json:"error,omitempty"`
	At        string `json:"at"`
}

// Lookup is what one check concluded: the lookup verdict cause of OnLookup.
type Lookup struct {
	// Settle is the terminal verdict of a conclusive lookup (nil: the attempt stays UNKNOWN).
	Settle *Settlement
	// Escalate is ambiguous_match (several records) or contradiction (one record that does not
	// match), "" otherwise.
	Escalate     Reason
	RetryAfter   time.Duration // a provider error's Retry-After
	Result       providers.Result
	Audit        LookupAudit
	AuthNotFound bool // a conclusive not-found
	RecordStatus providers.RecordStatus
	RecordRef    string
	// NoCapability: no lookup applies and none ever will (Plan.NoCapability); no further checks.
	NoCapability bool
}

// JudgeLookup judges a provider's answer (recs, err) to q for attempt a at now
// (docs/design.md#reconciliation): one matching record CONFIRMED → CONFIRMED, REJECTED or CANCELLED
// → FAILED (source = the lookup used, reference kept), PENDING → back off; one not matching →
// contradiction; several → ambiguous_match, never a guess; none → FAILED authoritative_not_found
// only when AuthoritativeNotFound; an error → back off, at least Retry-After. errClass is the
// provider error's class and retryAfter its Retry-After (providers.ClassOf, providers.RetryAfter).
func JudgeLookup(a *Row, caps providers.Capabilities, q providers.Query, recs []providers.Record, err error,
	errClass string, retryAfter time.Duration, now time.Time) Lookup {
	res := providers.ResultOf(recs, err)
	l := Lookup{Result: res, Audit: LookupAudit{Kind: string(q.Kind), Result: string(res), Records: len(recs), At: now.UTC().Format(time.RFC3339Nano)}}
	source := Source(q.Kind)
	switch res {
	case providers.ResultError:
		l.Audit.Error, l.RetryAfter = errClass, retryAfter
	case providers.ResultSeveral:
		l.Escalate = ReasonAmbiguousMatch
	case providers.ResultFound:
		rec := recs[0]
		l.RecordStatus, l.RecordRef = rec.Status, rec.ProviderReference
		l.Audit.Status, l.Audit.Reference = string(rec.Status), rec.ProviderReference
		matches := q.Kind == providers.LookupFingerprint && rec.Fingerprint == a.Fingerprint ||
			q.Kind != providers.LookupFingerprint && (rec.Fingerprint == "" || a.Fingerprint == "" || rec.Fingerprint == a.Fingerprint)
		if !matches {
			l.Escalate = ReasonContradiction
			break
		}
		switch rec.Status {
		case providers.StatusConfirmed:
			l.Settle = &Settlement{Status: StatusConfirmed, Source: source, Reference: rec.ProviderReference}
		case providers.StatusRejected, providers.StatusCancelled:
			l.Settle = &Settlement{Status: StatusFailed, Source: source, Reference: rec.ProviderReference,
				FailureCode: string(rec.Status), Retryable: true}
		}
	case providers.ResultNotFound:
		if AuthoritativeNotFound(a, caps, q.Kind, now) {
			l.AuthNotFound = true
			l.Settle = &Settlement{Status: StatusFailed, Source: SourceAuthoritativeNotFound, FailureCode: "NOT_FOUND", Retryable: true}
		}
	}
	return l
}

// AuthoritativeNotFound: docs/design.md#reconciliation: a not-found settles FAILED only for a
// provider whose not-found is authoritative, by provider_reference or client_reference, at or
// after window start + consistencyWindow, and for business_timeout and client_timeout also
// after window start + maxProcessingTime.
func AuthoritativeNotFound(a *Row, caps providers.Capabilities, kind providers.LookupKind, now time.Time) bool {
	if !caps.AuthoritativeNotFound || !kind.IsReference() {
		return false
	}
	need := caps.ConsistencyWindow
	if tc := events.TimeoutClass(a.TimeoutClass); tc == events.TimeoutBusiness || tc == events.TimeoutClient {
		need = max(need, caps.MaxProcessingTime)
	}
	return !now.Before(a.WindowStart.Add(need))
}

// Notes of the audit rows of lookup verdicts that were not applied.
const (
	noteLate      = "late lookup after "                   // + the terminal status set meanwhile
	noteLeaseLost = "; lease lost"                         // appended when another reconciler took the lease over
	noteUnapplied = "late lookup; lease lost, not applied" // the attempt is still UNKNOWN, held by another reconciler
)

// LookupCause is a lookup verdict reaching the attempt's write transaction.
type LookupCause struct {
	Lookup Lookup
	// Token is the lease token the check claimed the attempt with.
	Token int64
	// Caps is the provider's capability map entry; ClockFloor re-checks an authoritative
	// not-found's window on the database clock (env.Now), so a reconciler clock running ahead
	// cannot hasten a FAILED.
	Caps       providers.Capabilities
	ClockFloor bool
	// NextCheck is the reconciler's backoff: the next check time for a still UNKNOWN (nil: no
	// further checks), given the attempt as read and whether this check escalates.
	NextCheck func(a *Row, escalates bool) *time.Time
}

// OnLookup is the transition for a lookup verdict (docs/design.md#reconciliation), cur re-read
// under the intent lock. It returns the Step and whether the lease was lost (another reconciler
// re-claimed the attempt, bumping the token: it owns the attempt's state).
//   - cur settled meanwhile: the lookup reaches the audit trail only, a contradiction when it is
//     conclusive and disagrees (a record CONFIRMED while FAILED; REJECTED or CANCELLED while
//     CONFIRMED; CONFIRMED with another reference; an authoritative not-found while CONFIRMED);
//   - lease lost while still UNKNOWN: audited, not applied;
//   - conclusive: settled (OnSettle), cause lookup;
//   - otherwise: the check is recorded (fenced WriteCheck), audited, with its contradiction or
//     ambiguous_match escalation. no_lookup_capability is never raised on a later check.
func OnLookup(cur *Row, c LookupCause, env Env) (Step, bool) {
	l := c.Lookup
	lost := cur.Token != c.Token
	if l.AuthNotFound && c.ClockFloor && !AuthoritativeNotFound(cur, c.Caps, providers.LookupKind(l.Audit.Kind), env.Now) {
		// Skew may only delay a FAILED, never hasten it: back off instead; for a late verdict the
		// not-found is not conclusive.
		l.Settle, l.AuthNotFound = nil, false
	}
	s := Step{Next: cur}
	audit := func(note string) *Audit {
		return &Audit{From: cur.Status, To: cur.Status, Cause: CauseLookup, Lookup: l.Audit, Note: note}
	}
	switch {
	case cur.Status != StatusUnknown:
		if !cur.Status.Terminal() || l.Result == "" {
			return s, lost // IN_PROGRESS cannot follow UNKNOWN; nothing to record
		}
		note := noteLate + string(cur.Status)
		if lost {
			note += noteLeaseLost
		}
		s.Audit = audit(note)
		if LateDisagrees(cur, l) {
			s.Contradicted = true
			s.Anomalies = []Anomaly{{Kind: string(ReasonContradiction), Detail: map[string]any{"lookup": l.Audit}}}
			s.Open = []Open{{Reason: ReasonContradiction, Detail: "late lookup disagrees"}}
		}
		return s, lost
	case lost:
		if l.Result != "" {
			s.Audit = audit(noteUnapplied)
		}
		return s, lost
	case l.Settle != nil:
		st := *l.Settle
		st.CauseID = fmt.Sprintf("lookup:%s:%d", cur.ID, c.Token)
		st.Cause, st.Lookup, st.Note = CauseLookup, l.Audit, "lookup by "+l.Audit.Kind
		return OnSettle(cur, st, env), false
	}
	a := *cur
	var next *time.Time
	if !l.NoCapability {
		next = c.NextCheck(cur, l.Escalate != "")
	}
	a.CheckCount++
	a.LastLookupResult = string(l.Result)
	a.NextCheckAt = next
	s.Next, s.Write, s.Fence = &a, WriteCheck, c.Token
	if l.Result != "" {
		s.Audit = audit(fmt.Sprint("check ", a.CheckCount))
	}
	if l.Escalate == ReasonContradiction {
		s.Contradicted = true
		s.Anomalies = []Anomaly{{Kind: string(ReasonContradiction), Detail: map[string]any{"lookup": l.Audit}}}
	}
	if l.Escalate != "" {
		s.Open = []Open{{Reason: l.Escalate}}
	}
	return s, false
}

// LateDisagrees reports whether a lookup that arrived after a was settled contradicts it: it is
// conclusive and disagrees.
func LateDisagrees(a *Row, l Lookup) bool {
	switch {
	case l.Result == providers.ResultFound && l.Escalate == "":
		switch {
		case l.RecordStatus == providers.StatusConfirmed && a.Status == StatusFailed:
			return true
		case (l.RecordStatus == providers.StatusRejected || l.RecordStatus == providers.StatusCancelled) && a.Status == StatusConfirmed:
			return true
		case l.RecordStatus == providers.StatusConfirmed && a.ProviderReference != "" && l.RecordRef != a.ProviderReference:
			return true
		}
	case l.AuthNotFound && a.Status == StatusConfirmed:
		return true
	}
	return false
}
