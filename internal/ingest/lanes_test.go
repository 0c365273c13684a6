package ingest

import (
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/bookrecon/bookrecon/events"
	"github.com/bookrecon/bookrecon/internal/attempt"
	"github.com/bookrecon/bookrecon/internal/harness/loadgen"
	"github.com/bookrecon/bookrecon/internal/harness/pgtest"
	"github.com/bookrecon/bookrecon/internal/harness/samples"
	"github.com/bookrecon/bookrecon/internal/telemetry"
)

// splitLanes is runPlan's split of items into at most n lanes with links (split); one lane
// holding every item when n ≤ 1 or items has fewer than two.
func splitLanes(items []item, n int, links map[identity][]identity) [][]int {
	if n <= 1 || len(items) < 2 {
		return [][]int{indexes(len(items))}
	}
	return pollIdentitiesOf(items).split(n, links)
}

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
			if got := fmt.Sprint(splitLanes(c.poll, c.n, nil)); got != c.lanes {
				t.Errorf("splitLanes = %s, want %s", got, c.lanes)
			}
		})
	}
}

// attWithOutcome is an attempt event of tenant t1 (its subject the intent) with outcome reference
// ref ("": none).
func attWithOutcome(intent, key, ev, ref string) item {
	a := &events.Attempt{TenantID: "t1", BookingIntentID: intent, IdempotencyKey: key, EventID: ev, KeySubject: intent}
	if ref != "" {
		a.Outcome = &events.Outcome{ProviderReference: ref}
	}
	return item{attempt: a}
}

// TestSplitLanesStoredLinks: records linked only through stored rows — as attempt.ReadLinks
// returns them — share a lane: a key whose stored attempt is of another record's intent (another
// intent's key, a sibling version: G1), a reference whose stored holder is of another record's
// intent (G2), a kept decision's reference another record brings (G3), and its holder's intent
// (G3 then G2); a link to no other record of the poll, or of another tenant, joins nothing.
func TestSplitLanesStoredLinks(t *testing.T) {
	att := attWithOutcome
	dec := func(intent, key, ev string) item {
		return item{decision: &events.Decision{TenantID: "t1", BookingIntentID: intent, IdempotencyKey: key, EventID: ev, Decision: events.DecisionFailed}}
	}
	keyOf := func(tenant, key, intent string) map[[2]string]string {
		return map[[2]string]string{{tenant, key}: intent}
	}
	for _, c := range []struct {
		name  string
		poll  []item
		links attempt.Links
		lanes string
	}{
		{"another intent's key (G1)", []item{att("j", "book:i:v1", "e1", ""), att("i", "pay:i:v1", "e2", ""), att("x", "book:x:v1", "e3", "")},
			attempt.Links{KeyIntents: keyOf("t1", "book:i:v1", "i")}, "[[0 1] [2]]"},
		{"a sibling version's key held by another intent (G1)", []item{att("i", "book:i:v2", "e1", ""), dec("j", "book:i:v1", "e2")},
			attempt.Links{KeyIntents: keyOf("t1", "book:i:v1", "i")}, "[[0 1]]"},
		{"a reference's stored holder (G2)", []item{att("j", "book:j:v1", "e1", "R1"), dec("i", "book:i:v1", "e2")},
			attempt.Links{Holders: map[string][][2]string{"R1": {{"t1", "i"}}}}, "[[0 1]]"},
		{"a kept decision's reference (G3)", []item{att("i", "book:i:v1", "e1", ""), att("j", "book:j:v1", "e2", "R1")},
			attempt.Links{KeptRefs: map[[2]string][]string{{"t1", "book:i:v1"}: {"R1"}}}, "[[0 1]]"},
		{"a kept decision's reference's stored holder (G3, G2)", []item{att("i", "book:i:v1", "e1", ""), att("h", "pay:h:v1", "e2", "")},
			attempt.Links{KeptRefs: map[[2]string][]string{{"t1", "book:i:v1"}: {"R1"}}, Holders: map[string][][2]string{"R1": {{"t1", "h"}}}},
			"[[0 1]]"},
		{"links to rows no other record reaches", []item{att("i", "book:i:v1", "e1", "R1"), att("j", "book:j:v1", "e2", "")},
			attempt.Links{KeyIntents: keyOf("t1", "book:i:v1", "i"), Holders: map[string][][2]string{"R1": {{"t1", "h"}}}}, "[[0] [1]]"},
		{"another tenant's key", []item{att("j", "book:i:v1", "e1", ""), att("i", "pay:i:v1", "e2", "")},
			attempt.Links{KeyIntents: keyOf("t2", "book:i:v1", "i")}, "[[0] [1]]"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := fmt.Sprint(splitLanes(c.poll, 2, linkIdentities(c.links))); got != c.lanes {
				t.Errorf("splitLanes = %s, want %s", got, c.lanes)
			}
		})
	}
}

// TestSplitLanesThroughPollsInFlight: a poll whose stored links were read while the poll before
// it was applied (missing every row that poll wrote) is split through that poll's reach: its
// records that reach one of the poll before's groups share a lane. The chain below is the one a
// read ahead meets: poll A keeps a decision for key book:i:v1 bringing R1; poll B's event for that
// key settles the attempt and claims R1 for intent i (B's links, read before A's commit, lack the
// kept decision: B reaches R1 through A's group); poll C's links, read before B's commit, lack the
// claim: C's outcome R1 (intent j) and C's event of intent i under another key share a lane only
// through B's reach, which carried R1 over from A's group. Groups of the poll before that no record
// joins are dropped from the reach.
func TestSplitLanesThroughPollsInFlight(t *testing.T) {
	att := attWithOutcome
	dec := func(intent, key, ev, ref string) item {
		return item{decision: &events.Decision{TenantID: "t1", BookingIntentID: intent, IdempotencyKey: key, EventID: ev, ProviderReference: ref}}
	}
	split := func(poll []item, prev *reach) ([][]int, *reach) {
		return pollIdentitiesOf(poll).splitAfter(2, nil, prev, true)
	}
	a := []item{att("i", "book:i:v1", "a1", ""), dec("i", "book:i:v1", "a2", "R1"), att("z", "book:z:v1", "a3", "")}
	b := []item{att("i", "book:i:v1", "b1", ""), att("y", "book:y:v1", "b2", "")}
	c := []item{att("j", "book:j:v1", "c1", "R1"), att("i", "pay:i:v1", "c2", ""), att("x", "book:x:v1", "c3", "")}
	aLanes, aReach := split(a, nil)
	bLanes, bReach := split(b, aReach)
	cLanes, cReach := split(c, bReach)
	for _, l := range []struct {
		name  string
		lanes [][]int
		want  string
	}{{"A", aLanes, "[[0 1] [2]]"}, {"B", bLanes, "[[0] [1]]"}, {"C", cLanes, "[[0 1] [2]]"}} {
		if got := fmt.Sprint(l.lanes); got != l.want {
			t.Errorf("poll %s: lanes %s, want %s", l.name, got, l.want)
		}
	}
	if aReach == nil || bReach == nil || cReach == nil {
		t.Fatalf("reaches A %v, B %v, C %v: want all kept", aReach != nil, bReach != nil, cReach != nil)
	}
	r1 := refIdentity("R1")
	// B's group of intent i holds R1 (carried from A) and A's a2; A's group of z is no part of B's reach.
	if g, ok := bReach.group[r1]; !ok || g != bReach.group[identityOf('e', "t1", "a2")] || g != bReach.group[identityOf('i', "t1", "i")] {
		t.Errorf("B's reach: R1 in group %d (%v), want the group of intent i and of event a2", g, ok)
	}
	if _, ok := bReach.group[identityOf('i', "t1", "z")]; ok {
		t.Error("B's reach holds intent z, which no record of B joins")
	}
	if n, want := len(bReach.ids), 2; n != want {
		t.Errorf("B's reach has %d groups, want %d", n, want)
	}
	// Without A's reach, B's group of i lacks R1, and C's outcome R1 gets a lane of its own.
	_, bAlone := split(b, nil)
	if lanes, _ := split(c, bAlone); fmt.Sprint(lanes) != "[[0 2] [1]]" {
		t.Errorf("C through B's reach without A's: lanes %v, want [[0 2] [1]]", lanes)
	}
}

// TestSplitLanesRealisticMix: the realistic mix (loadgen.DefaultMix, seed 12, 240 intents:
// redeliveries, key conflicts, blind retries, out-of-order pairs: 504 records) splits into two
// lanes of 252, and every intent's records are in one lane, in poll order — the split that
// TestBatchSizeInvariance's lane runs apply.
func TestSplitLanesRealisticMix(t *testing.T) {
	gen := loadgen.Generate(loadgen.Config{Intents: 240, Seed: 12, Start: time.Now().Add(-time.Hour), Mix: loadgen.DefaultMix})
	m, err := samples.Providers()
	if err != nil {
		t.Fatal(err)
	}
	in := newIngester(Config{Providers: m}.withDefaults(), slog.New(slog.DiscardHandler), nil, telemetry.NewRegistry())
	recs := make([]*kgo.Record, len(gen.Records))
	for i := range recs {
		recs[i] = &kgo.Record{Topic: events.TopicAttempts, Key: gen.Keys[i], Value: gen.Records[i], Offset: int64(i)}
	}
	items := in.decodeAll(recs)
	lanes := splitLanes(items, 2, nil)
	if len(lanes) != 2 {
		t.Fatalf("%d lanes, want 2", len(lanes))
	}
	if a, b := len(lanes[0]), len(lanes[1]); len(items) != 504 || a != 252 || b != 252 {
		t.Errorf("lanes of %d and %d records of %d, want 252 and 252 of 504", a, b, len(items))
	}
	laneOf := map[string]int{}
	for l, idx := range lanes {
		for j, i := range idx {
			if j > 0 && idx[j-1] >= i {
				t.Fatalf("lane %d: item %d after item %d: not in poll order", l, i, idx[j-1])
			}
			a := items[i].attempt
			if a == nil {
				t.Fatalf("record %d did not decode: %v", i, items[i].invalid)
			}
			if prev, ok := laneOf[a.BookingIntentID]; ok && prev != l {
				t.Errorf("intent %s in lanes %d and %d", a.BookingIntentID, prev, l)
			}
			laneOf[a.BookingIntentID] = l
		}
	}
	if len(laneOf) != 240 {
		t.Errorf("%d intents, want 240", len(laneOf))
	}
}

// BenchmarkSplitLanes: the cost per poll of the split of the realistic mix (504 records) into two
// lanes — "split": the split on the poll's own identities and again with links, as planLanes does;
// "read+split": with the pre-read of the stored links (storedLinks) on a database holding the mix
// applied once, so every key has a stored attempt.
func BenchmarkSplitLanes(b *testing.B) {
	gen := loadgen.Generate(loadgen.Config{Intents: 240, Seed: 12, Start: time.Now().Add(-time.Hour), Mix: loadgen.DefaultMix})
	m, err := samples.Providers()
	if err != nil {
		b.Fatal(err)
	}
	recs := make([]*kgo.Record, len(gen.Records))
	for i := range recs {
		recs[i] = &kgo.Record{Topic: events.TopicAttempts, Key: gen.Keys[i], Value: gen.Records[i], Offset: int64(i)}
	}
	b.Run("split", func(b *testing.B) {
		in := newIngester(Config{Providers: m}.withDefaults(), slog.New(slog.DiscardHandler), nil, telemetry.NewRegistry())
		items := in.decodeAll(recs)
		for b.Loop() {
			ids := pollIdentitiesOf(items)
			ids.split(2, nil)
			ids.split(2, map[identity][]identity{})
		}
	})
	b.Run("read+split", func(b *testing.B) {
		if testing.Short() {
			b.Skip("needs PostgreSQL")
		}
		in := newIngester(Config{Providers: m}.withDefaults(), slog.New(slog.DiscardHandler), pgtest.NewPool(b), telemetry.NewRegistry())
		items := in.decodeAll(recs)
		if err := in.applyItems(b.Context(), items); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			ids := pollIdentitiesOf(items)
			ids.split(2, nil)
			links, err := in.storedLinks(b.Context(), items)
			if err != nil {
				b.Fatal(err)
			}
			ids.split(2, links)
		}
	})
}
