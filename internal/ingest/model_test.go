package ingest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/bookrecon/bookrecon/events"
	"github.com/bookrecon/bookrecon/internal/harness/pipelinetest"
)

// The generated workload: every intent follows one of five scenarios of four events each, built
// so that the final state of every attempt is known without running the state machine, given
// only that an intent's events are applied in publishing order (one key, one partition).
//
//	0 book+capture:    BOOK v1 started, succeeded; PAYMENT_CAPTURE v1 started, succeeded
//	1 safe retry:      BOOK v1 started, failed (retryable); BOOK v2 started, succeeded
//	2 unknown→settled: BOOK v1 started, outcome_unknown (read_timeout), the same start again
//	                   under a new eventId (idempotent repeat), succeeded
//	3 not sent:        BOOK v1 (air) started, outcome_unknown connect_timeout requestSent false
//	                   (FAILED not_sent); BOOK v2 started, failed (not retryable)
//	4 left unknown:    BOOK v1 at sim-legacy started, outcome_unknown client_timeout (UNKNOWN,
//	                   no_lookup_capability); PAYMENT_AUTHORIZE v1 started, failed with the
//	                   transport code GATEWAY_TIMEOUT (UNKNOWN)
const eventsPerIntent = 4

// wantAttempt is the modelled end state of one attempt.
type wantAttempt struct{ Status, Source string }

// model is a generated workload and its expected outcome.
type model struct {
	events       [][]byte // unique events, per intent in order (intent i: events[4i:4i+4])
	keys         [][]byte // record key of each event
	attempts     map[string]wantAttempt
	escalations  []string // "tenant/key reason", sorted
	stateChanges int      // attempt_transition rows whose status changes (creations included)
	repeats      int      // idempotent repeats
}

func (m *model) terminal() int {
	n := 0
	for _, a := range m.attempts {
		if a.Status == "CONFIRMED" || a.Status == "FAILED" {
			n++
		}
	}
	return n
}

// newModel generates intents×4 valid events; tag keeps identifiers distinct between models.
func newModel(t testing.TB, h *pipelinetest.Harness, tag string, intents int) *model {
	t.Helper()
	m := &model{attempts: map[string]wantAttempt{}}
	base := time.Now().UTC().Add(-time.Hour).Truncate(time.Second)
	yes, no := true, false
	for i := range intents {
		tenant := []string{"t_storm_a", "t_storm_b"}[i%2]
		intent := fmt.Sprintf("bi_%s_%05d", tag, i)
		seq := 0
		at := func() time.Time { seq++; return base.Add(time.Duration(i*eventsPerIntent+seq) * time.Millisecond) }
		ev := func(typ events.EventType, op events.Operation, prefix string, v int, provider string) events.Attempt {
			return events.Attempt{SpecVersion: 1, EventID: fmt.Sprintf("evt-%s-%05d-%d", tag, i, seq+1), EventType: typ,
				OccurredAt: at(), TenantID: tenant, BookingIntentID: intent, Operation: op, OperationVersion: v,
				IdempotencyKey: fmt.Sprintf("%s:%s:v%d", prefix, intent, v), Provider: provider}
		}
		stay := func(v int) *events.Request {
			return &events.Request{OfferVersion: fmt.Sprintf("off_%d:%d", i, v), TravellerRef: fmt.Sprintf("tr_%05d", i),
				Amount: &events.Amount{Value: fmt.Sprintf("%d.%02d", 100+i%400, i%100), Currency: "EUR"},
				Stay:   &events.Stay{PropertyID: fmt.Sprintf("h_%d", i%997), CheckIn: "2027-02-03", CheckOut: "2027-02-06"}}
		}
		flight := func(v int) *events.Request {
			return &events.Request{OfferVersion: fmt.Sprintf("off_%d:%d", i, v), TravellerRef: fmt.Sprintf("tr_%05d", i),
				Amount:   &events.Amount{Value: fmt.Sprintf("%d", 20000+i), Currency: "JPY"},
				Segments: []events.Segment{{From: "LHR", To: "JFK", Date: "2027-03-01", Flight: fmt.Sprintf("BA%d", 100+i%900)}}}
		}
		pay := func() *events.Request {
			return &events.Request{OfferVersion: fmt.Sprintf("off_%d:1", i), TravellerRef: fmt.Sprintf("tr_%05d", i),
				Amount: &events.Amount{Value: "49.90", Currency: "EUR"}}
		}
		rec := func(cr string) events.Recovery {
			return events.Recovery{ClientReference: cr, CorrelationID: "corr_" + intent}
		}
		key := func(prefix string, v int) string { return fmt.Sprintf("%s/%s:%s:v%d", tenant, prefix, intent, v) }
		var evs []events.Attempt
		switch i % 5 {
		case 0:
			s := ev(events.EventStarted, events.OpBook, "book", 1, "sim-hotels")
			s.Request, s.Recovery = stay(1), rec("cr_"+intent)
			ok := ev(events.EventSucceeded, events.OpBook, "book", 1, "sim-hotels")
			ok.Outcome = &events.Outcome{ProviderReference: fmt.Sprintf("HTL-%s-%05d", tag, i)}
			c := ev(events.EventStarted, events.OpPaymentCapture, "capture", 1, "sim-pay")
			c.Request, c.Recovery = pay(), rec("crp_"+intent)
			cok := ev(events.EventSucceeded, events.OpPaymentCapture, "capture", 1, "sim-pay")
			cok.Outcome = &events.Outcome{ProviderReference: fmt.Sprintf("PAY-%s-%05d", tag, i)}
			evs = []events.Attempt{s, ok, c, cok}
			m.attempts[key("book", 1)] = wantAttempt{"CONFIRMED", "event"}
			m.attempts[key("capture", 1)] = wantAttempt{"CONFIRMED", "event"}
			m.stateChanges += 4
		case 1:
			s := ev(events.EventStarted, events.OpBook, "book", 1, "sim-hotels")
			s.Request, s.Recovery = stay(1), rec("cr_"+intent+"_1")
			f := ev(events.EventFailed, events.OpBook, "book", 1, "sim-hotels")
			f.Outcome = &events.Outcome{FailureCode: "SOLD_OUT", Retryable: &yes}
			s2 := ev(events.EventStarted, events.OpBook, "book", 2, "sim-hotels")
			s2.Request, s2.Recovery = stay(2), rec("cr_"+intent+"_2")
			ok := ev(events.EventSucceeded, events.OpBook, "book", 2, "sim-hotels")
			ok.Outcome = &events.Outcome{ProviderReference: fmt.Sprintf("HTL-%s-%05d", tag, i)}
			evs = []events.Attempt{s, f, s2, ok}
			m.attempts[key("book", 1)] = wantAttempt{"FAILED", "event"}
			m.attempts[key("book", 2)] = wantAttempt{"CONFIRMED", "event"}
			m.stateChanges += 4
		case 2:
			s := ev(events.EventStarted, events.OpBook, "book", 1, "sim-hotels")
			s.Request, s.Recovery = stay(1), rec("cr_"+intent)
			u := ev(events.EventOutcomeUnknown, events.OpBook, "book", 1, "sim-hotels")
			u.Outcome = &events.Outcome{TimeoutClass: events.TimeoutRead}
			again := ev(events.EventStarted, events.OpBook, "book", 1, "sim-hotels")
			again.Request, again.Recovery = stay(1), rec("cr_"+intent)
			ok := ev(events.EventSucceeded, events.OpBook, "book", 1, "sim-hotels")
			ok.Outcome = &events.Outcome{ProviderReference: fmt.Sprintf("HTL-%s-%05d", tag, i)}
			evs = []events.Attempt{s, u, again, ok}
			m.attempts[key("book", 1)] = wantAttempt{"CONFIRMED", "event"}
			m.stateChanges += 3
			m.repeats++
		case 3:
			s := ev(events.EventStarted, events.OpBook, "book", 1, "sim-air")
			s.Request = flight(1)
			u := ev(events.EventOutcomeUnknown, events.OpBook, "book", 1, "sim-air")
			u.Outcome = &events.Outcome{TimeoutClass: events.TimeoutConnect, RequestSent: &no}
			s2 := ev(events.EventStarted, events.OpBook, "book", 2, "sim-air")
			s2.Request = flight(2)
			f := ev(events.EventFailed, events.OpBook, "book", 2, "sim-air")
			f.Outcome = &events.Outcome{FailureCode: "PAYMENT_DECLINED", Retryable: &no}
			evs = []events.Attempt{s, u, s2, f}
			m.attempts[key("book", 1)] = wantAttempt{"FAILED", "not_sent"}
			m.attempts[key("book", 2)] = wantAttempt{"FAILED", "event"}
			m.stateChanges += 4
		case 4:
			s := ev(events.EventStarted, events.OpBook, "book", 1, "sim-legacy")
			s.Request = stay(1)
			u := ev(events.EventOutcomeUnknown, events.OpBook, "book", 1, "sim-legacy")
			u.Outcome = &events.Outcome{TimeoutClass: events.TimeoutClient}
			a := ev(events.EventStarted, events.OpPaymentAuthorize, "authorize", 1, "sim-pay")
			a.Request, a.Recovery = pay(), rec("cra_"+intent)
			f := ev(events.EventFailed, events.OpPaymentAuthorize, "authorize", 1, "sim-pay")
			f.Outcome = &events.Outcome{FailureCode: "GATEWAY_TIMEOUT", Retryable: &yes}
			evs = []events.Attempt{s, u, a, f}
			m.attempts[key("book", 1)] = wantAttempt{"UNKNOWN", ""}
			m.attempts[key("authorize", 1)] = wantAttempt{"UNKNOWN", ""}
			m.escalations = append(m.escalations, key("book", 1)+" no_lookup_capability")
			m.stateChanges += 4
		}
		for _, e := range evs {
			b, err := json.Marshal(e)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := events.DecodeAttempt(b, events.DecodeOptions{KnownProvider: h.Providers.Known}); err != nil {
				t.Fatalf("generated event is invalid: %v\n%s", err, b)
			}
			m.events = append(m.events, b)
			m.keys = append(m.keys, []byte(intent))
		}
	}
	sort.Strings(m.escalations)
	return m
}

// deliveries returns every event 1–5 times (drawn from copies with rng), duplicates identical to
// the first copy. Within an intent the first copies keep the events' order and every duplicate
// follows its first copy; intents are interleaved at random.
func (m *model) deliveries(rng *rand.Rand, copies []int) []*kgo.Record {
	intents := len(m.events) / eventsPerIntent
	per := make([][]int, intents) // per intent: event indices in delivery order
	for i := range intents {
		next, pending := 0, []int(nil)
		for next < eventsPerIntent || len(pending) > 0 {
			n := len(pending)
			if next < eventsPerIntent {
				n++
			}
			r := rng.IntN(n)
			if r == len(pending) {
				e := i*eventsPerIntent + next
				per[i] = append(per[i], e)
				for range copies[rng.IntN(len(copies))] - 1 {
					pending = append(pending, e)
				}
				next++
				continue
			}
			per[i] = append(per[i], pending[r])
			pending[r] = pending[len(pending)-1]
			pending = pending[:len(pending)-1]
		}
	}
	active := make([]int, intents)
	for i := range active {
		active[i] = i
	}
	var out []*kgo.Record
	for len(active) > 0 {
		j := rng.IntN(len(active))
		i := active[j]
		e := per[i][0]
		out = append(out, &kgo.Record{Key: m.keys[e], Value: m.events[e]})
		if per[i] = per[i][1:]; len(per[i]) == 0 {
			active[j] = active[len(active)-1]
			active = active[:len(active)-1]
		}
	}
	return out
}

// checkDeliveries verifies what deliveries promises for recs: every event 1–5 times with its
// own key and identical bytes, and within an intent every copy of event k after the first copy
// of event k−1 and every duplicate after its first copy.
func (m *model) checkDeliveries(t testing.TB, recs []*kgo.Record) {
	t.Helper()
	index := make(map[string]int, len(m.events))
	for i, e := range m.events {
		index[string(e)] = i
	}
	copies := make([]int, len(m.events))
	for _, r := range recs {
		i, ok := index[string(r.Value)]
		if !ok || string(r.Key) != string(m.keys[i]) {
			t.Fatalf("delivery %q is not a generated event under its key", r.Value)
		}
		if k := i % eventsPerIntent; copies[i] == 0 && k > 0 && copies[i-1] == 0 {
			t.Fatalf("event %d published before event %d of its intent", i, i-1)
		}
		copies[i]++
	}
	for i, n := range copies {
		if n < 1 || n > 5 {
			t.Fatalf("event %d published %d times, want 1–5", i, n)
		}
	}
}

// produce publishes recs to topic with async Produce and one Flush; fresh records each time, so
// a slice can be published twice.
func produce(t testing.TB, cl *kgo.Client, topic string, recs []*kgo.Record) {
	t.Helper()
	ctx := context.Background()
	var mu sync.Mutex
	var first error
	for _, r := range recs {
		cl.Produce(ctx, &kgo.Record{Topic: topic, Key: r.Key, Value: r.Value}, func(_ *kgo.Record, err error) {
			if err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		t.Fatalf("flush: %v", err)
	}
	if first != nil {
		t.Fatalf("produce: %v", first)
	}
}

// groupLag returns the records of topic not yet committed by group (committed offsets against
// end offsets) and the sum of the committed offsets.
func groupLag(t testing.TB, adm *kadm.Client, group, topic string) (lag, committed int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatalf("end offsets: %v", err)
	}
	offs, err := adm.FetchOffsets(ctx, group)
	if err != nil {
		t.Fatalf("group offsets: %v", err)
	}
	ends.Each(func(e kadm.ListedOffset) {
		at := int64(0)
		if o, ok := offs.Lookup(topic, e.Partition); ok && o.At > 0 {
			at = o.At
		}
		committed += at
		lag += e.Offset - at
	})
	return lag, committed
}

// sumMetric adds every series of a counter family over the gatherers.
func sumMetric(t testing.TB, name string, gs ...prometheus.Gatherer) float64 {
	t.Helper()
	total := 0.0
	for _, g := range gs {
		mfs, err := g.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == name {
				for _, m := range mf.GetMetric() {
					total += m.GetCounter().GetValue()
				}
			}
		}
	}
	return total
}

// assertModel checks the database against m: every event applied exactly once, nothing lost.
func assertModel(t testing.TB, h *pipelinetest.Harness, m *model) {
	t.Helper()
	ctx := context.Background()
	if n := h.Scalar(`SELECT count(*) FROM processed_event`); n != len(m.events) {
		t.Errorf("processed_event rows = %d, want %d", n, len(m.events))
	}
	got := map[string]wantAttempt{}
	rows, err := h.Pool.Query(ctx, `SELECT tenant_id || '/' || idempotency_key, status, coalesce(resolution_source, '') FROM booking_attempt`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var k string
		var a wantAttempt
		if err := rows.Scan(&k, &a.Status, &a.Source); err != nil {
			t.Fatal(err)
		}
		got[k] = a
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(m.attempts, got); diff != "" {
		t.Errorf("attempts (-want +got), %d vs %d:\n%s", len(m.attempts), len(got), clip(diff))
	}
	// One audit row per applied event, and exactly the modelled state changes.
	if n := h.Scalar(`SELECT count(*) FROM attempt_transition`); n != len(m.events) {
		t.Errorf("attempt_transition rows = %d, want one per event = %d", n, len(m.events))
	}
	if n := h.Scalar(`SELECT count(*) FROM attempt_transition WHERE from_status IS DISTINCT FROM to_status`); n != m.stateChanges {
		t.Errorf("state changes = %d, want %d", n, m.stateChanges)
	}
	// Exactly one resolution outbox fact per terminal attempt, none for the others (the facts'
	// values: in the outbox while pending, on the topic once published).
	perAttempt := map[string]int{}
	resolutions := h.FactValues(h.Topics.Resolutions)
	for id, v := range resolutions {
		var r struct{ TenantID, IdempotencyKey string }
		if err := json.Unmarshal(v, &r); err != nil {
			t.Fatalf("resolution %s: %v", id, err)
		}
		perAttempt[r.TenantID+"/"+r.IdempotencyKey]++
	}
	bad := 0
	for k, a := range m.attempts {
		want := 0
		if a.Status == "CONFIRMED" || a.Status == "FAILED" {
			want = 1
		}
		if perAttempt[k] != want && bad < 10 {
			bad++
			t.Errorf("%s (%s): %d resolution rows, want %d", k, a.Status, perAttempt[k], want)
		}
	}
	if n := h.Scalar(`SELECT count(*) FROM outbox_fact WHERE topic = $1`, h.Topics.Resolutions); n != m.terminal() || len(resolutions) != n {
		t.Errorf("resolution facts = %d (%d values read), want %d terminal attempts", n, len(resolutions), m.terminal())
	}
	// Escalations: exactly the modelled ones, each with its one escalation.opened row.
	rows, err = h.Pool.Query(ctx, `SELECT a.tenant_id || '/' || a.idempotency_key || ' ' || e.reason
		FROM escalation e JOIN booking_attempt a ON a.id = e.attempt_id ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	gotEsc := []string{}
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		gotEsc = append(gotEsc, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(append([]string{}, m.escalations...), gotEsc); diff != "" {
		t.Errorf("escalations (-want +got):\n%s", clip(diff))
	}
	if n := h.Scalar(`SELECT count(*) FROM outbox_fact WHERE topic = $1`, h.Topics.Escalations); n != len(m.escalations) {
		t.Errorf("escalation outbox rows = %d, want %d", n, len(m.escalations))
	}
	for _, q := range []string{
		`SELECT count(*) FROM anomaly`,
		`SELECT count(*) FROM outbox_fact WHERE topic NOT IN ('` + h.Topics.Resolutions + `', '` + h.Topics.Escalations + `')`,
	} {
		if n := h.Scalar(q); n != 0 {
			t.Errorf("%s = %d, want 0", q, n)
		}
	}
}

func clip(s string) string {
	if len(s) > 4000 {
		return s[:4000] + "\n…"
	}
	return strings.TrimSpace(s)
}
