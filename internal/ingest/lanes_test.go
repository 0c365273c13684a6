package ingest

import (
	"fmt"
	"testing"

	"github.com/bookrecon/bookrecon/events"
)

// TestSplitLanes: records that share an intent, idempotency key, event id, subject or reference
// share a lane, in poll order; records that did not decode share one lane; groups go largest
// first to the emptiest lane; one lane when n ≤ 1.
func TestSplitLanes(t *testing.T) {
	// att is an attempt event of tenant t1: intent, key, event id; its subject is the intent.
	att := func(intent, key, ev string) item {
		return item{attempt: &events.Attempt{TenantID: "t1", BookingIntentID: intent, IdempotencyKey: key, EventID: ev, KeySubject: intent}}
	}
	withOutcome := func(it item, ref string) item {
		it.attempt.Outcome = &events.Outcome{ProviderReference: ref}
		return it
	}
	withRecovery := func(it item, r events.Recovery) item {
		it.attempt.Recovery = r
		return it
	}
	dec := func(intent, key, ev, ref string) item {
		return item{decision: &events.Decision{TenantID: "t1", BookingIntentID: intent, IdempotencyKey: key, EventID: ev, ProviderReference: ref}}
	}
	invalid := item{invalid: &events.InvalidError{Reason: events.ReasonInvalidJSON}}
	for _, c := range []struct {
		name  string
		poll  []item
		n     int
		lanes string
	}{
		{"one lane asked", []item{att("a", "book:a:v1", "e1"), att("b", "book:b:v1", "e2")}, 1, "[[0 1]]"},
		{"one record", []item{att("a", "book:a:v1", "e1")}, 2, "[[0]]"},
		{"unrelated intents", []item{att("a", "book:a:v1", "e1"), att("b", "book:b:v1", "e2")}, 2, "[[0] [1]]"},
		{"an intent's records together, in poll order",
			[]item{att("a", "book:a:v1", "e1"), att("b", "book:b:v1", "e2"), att("a", "book:a:v1", "e3"), dec("b", "book:b:v1", "e4", "")}, 2,
			"[[0 2] [1 3]]"},
		{"a shared idempotency key", []item{att("a", "book:k:v1", "e1"), att("b", "book:k:v1", "e2")}, 2, "[[0 1]]"},
		{"a shared event id", []item{att("a", "book:a:v1", "e1"), att("b", "book:b:v1", "e1")}, 2, "[[0 1]]"},
		{"a shared outcome reference", []item{withOutcome(att("a", "book:a:v1", "e1"), "PNR1"), withOutcome(att("b", "book:b:v1", "e2"), "PNR1")}, 2, "[[0 1]]"},
		{"a decision's reference joins an attempt's outcome",
			[]item{withOutcome(att("a", "book:a:v1", "e1"), "PNR1"), dec("b", "book:b:v1", "e2", "PNR1")}, 2, "[[0 1]]"},
		{"a cancel's subject joins the booking's outcome reference",
			[]item{withOutcome(att("a", "book:a:v1", "e1"), "bk_1"), {attempt: &events.Attempt{TenantID: "t1", BookingIntentID: "c", IdempotencyKey: "cancel:bk_1:v1", EventID: "e2", KeySubject: "bk_1"}}}, 2,
			"[[0 1]]"},
		{"a recovery reference", []item{withRecovery(att("a", "book:a:v1", "e1"), events.Recovery{PaymentReference: "pay1"}),
			withRecovery(att("b", "book:b:v1", "e2"), events.Recovery{PaymentReference: "pay1"})}, 2, "[[0 1]]"},
		{"records that did not decode share a lane", []item{invalid, att("a", "book:a:v1", "e1"), invalid}, 2, "[[0 2] [1]]"},
		{"transitively: a–b by key, b–c by reference",
			[]item{att("a", "book:k:v1", "e1"), withOutcome(att("b", "book:k:v1", "e2"), "R"), withOutcome(att("c", "book:c:v1", "e3"), "R"), att("d", "book:d:v1", "e4")}, 2,
			"[[0 1 2] [3]]"},
		// Groups of 3 (a), 2 (b), 2 (c), 1 (d): a → lane 0, b → lane 1, c → lane 1 (2 < 3), d → lane 0 (3 < 4).
		{"balanced, largest first",
			[]item{att("b", "book:b:v1", "b1"), att("a", "book:a:v1", "a1"), att("c", "book:c:v1", "c1"), att("a", "book:a:v1", "a2"),
				att("d", "book:d:v1", "d1"), att("b", "book:b:v1", "b2"), att("a", "book:a:v1", "a3"), att("c", "book:c:v1", "c2")}, 2,
			"[[1 3 4 6] [0 2 5 7]]"},
		{"more lanes than groups", []item{att("a", "book:a:v1", "e1"), att("b", "book:b:v1", "e2")}, 4, "[[0] [1]]"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := fmt.Sprint(splitLanes(c.poll, c.n)); got != c.lanes {
				t.Errorf("splitLanes = %s, want %s", got, c.lanes)
			}
		})
	}
}
