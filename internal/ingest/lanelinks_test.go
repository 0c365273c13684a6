package ingest_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/bookrecon/bookrecon/events"
	"github.com/bookrecon/bookrecon/internal/harness/pgtest"
	"github.com/bookrecon/bookrecon/internal/harness/samples"
	"github.com/bookrecon/bookrecon/internal/ingest"
)

// TestLanesSeeStoredLinks: a poll of two records linked only through stored rows leaves, in two
// lanes, exactly the database one lane leaves (dumpTables: every row, status, escalation and
// outbox body) — each on a fresh database seeded with the same stored state in one transaction:
//   - G1, another intent's stored attempt holding a record's key: the key conflict it raises on
//     that attempt and the other intent's resolution publish under one key in poll order;
//   - G2, the stored holder of a record's reference: a manual decision for the holder after the
//     duplicate closes the duplicate_provider_reference escalation it could not see in another
//     lane; one before it gives the escalation the holder's decided status;
//   - G3, a decision kept for a key whose reference another record brings: the kept decision,
//     applied first in poll order, holds the claim and the other record is the duplicate;
//   - G4, the stored holder of a record's reference claimed by the seed from a decision kept by
//     the poll before it: a manual decision for the holder after the duplicate closes the
//     escalation (the poll before and the seed each with a record of another intent, so that
//     each is split in the run read ahead, through a reach);
//   - G5, a decision for a key whose attempt the seed creates, bringing a reference an attempt of
//     the poll before holds, and a decision for that holder: its duplicate_provider_reference
//     escalation closes (the reference is looked up at the provider of the seed's attempt);
//   - G6, a decision the seed keeps for a key with no attempt yet, bringing a reference held by an
//     attempt of the poll before; the poll's outcome_unknown applies it, and a decision for the
//     holder closes the holder's escalation (claimed at the provider the poll's event brings);
//   - G7, G8: a kept reference held by an attempt of the poll before, claimed at the provider of
//     the key's first event, which creates the attempt (G7: in the seed; G8: in the poll), while
//     the key's last event is at another provider (a key conflict, which claims nothing): the
//     links are looked up at every provider of the key's events, so the holder's records join
//     (G8 failed in two lanes before that, with no read ahead: its 398 kept decisions make the
//     holder's lane the slower one).
//
// A third run applies the poll before, the seed and the poll as consecutive polls of the
// ingester, each poll's links read before the one before it is applied (Applier.ApplyPolls): it
// leaves the same database, since a poll's split joins its records through the reach of the poll
// before it, and reads again after its commit where a reach cannot tell (G1: a seed of one record
// has none; G5, G6: needsReread and lanePlan.split). TestSplitLanesThroughPollsInFlight holds the
// reach carried along a chain of polls.
func TestLanesSeeStoredLinks(t *testing.T) {
	if testing.Short() {
		t.Skip("needs PostgreSQL")
	}
	t.Parallel()
	m, err := samples.Providers()
	if err != nil {
		t.Fatal(err)
	}
	base := time.Now().UTC().Add(-time.Hour).Truncate(time.Millisecond)
	n := 0
	// ev is an attempt event of tenant t1 at sim-hotels (sim-pay for a payment), version 1;
	// outcome its outcome (nil: a start).
	ev := func(typ events.EventType, intent, key string, op events.Operation, outcome *events.Outcome) *kgo.Record {
		n++
		a := events.Attempt{SpecVersion: 1, EventID: fmt.Sprintf("ev_%d", n), EventType: typ, OccurredAt: base.Add(time.Duration(n) * time.Second),
			TenantID: "t1", BookingIntentID: intent, Operation: op, OperationVersion: 1, IdempotencyKey: key, Provider: "sim-hotels", Outcome: outcome}
		if op == events.OpPaymentAuthorize {
			a.Provider = "sim-pay"
		}
		if typ == events.EventStarted {
			a.Request = &events.Request{OfferVersion: "off:1", TravellerRef: "tr_1", Amount: &events.Amount{Value: "120.00", Currency: "EUR"},
				Stay: &events.Stay{PropertyID: "h_1", CheckIn: "2027-05-01", CheckOut: "2027-05-03"}}
			a.Recovery.ClientReference = "cr_" + intent
		}
		b, err := json.Marshal(a)
		if err != nil {
			t.Fatal(err)
		}
		return &kgo.Record{Topic: events.TopicAttempts, Key: []byte(intent), Value: b}
	}
	book := func(typ events.EventType, intent, key string, outcome *events.Outcome) *kgo.Record {
		return ev(typ, intent, key, events.OpBook, outcome)
	}
	dec := func(intent, key, verdict, ref string) *kgo.Record {
		n++
		d := fmt.Sprintf(`{"specVersion":1,"eventId":"dec_%d","eventType":"decision.recorded","occurredAt":%q,"tenantId":"t1",
			"bookingIntentId":%q,"idempotencyKey":%q,"decision":%q,"providerReference":%q,"actor":"ops.1","reason":"checked"}`,
			n, base.Add(time.Duration(n)*time.Second).Format(time.RFC3339Nano), intent, key, verdict, ref)
		return &kgo.Record{Topic: events.TopicManualDecisions, Key: []byte(intent), Value: []byte(d)}
	}
	ok := func(ref string) *events.Outcome { return &events.Outcome{ProviderReference: ref} }
	// at is rec, an attempt event, at provider instead.
	at := func(provider string, rec *kgo.Record) *kgo.Record {
		var a events.Attempt
		if err := json.Unmarshal(rec.Value, &a); err != nil {
			t.Fatal(err)
		}
		a.Provider = provider
		b, err := json.Marshal(a)
		if err != nil {
			t.Fatal(err)
		}
		rec.Value = b
		return rec
	}
	unknown := &events.Outcome{TimeoutClass: events.TimeoutRead}
	// heldClosed is what G5 and G6 leave (n: the case's number): the holder bi_h<n> decided FAILED
	// after the duplicate, its duplicate_provider_reference escalation closed, and bi_m<n>
	// CONFIRMED by decision with the reference, its escalation closed too.
	heldClosed := func(n string) map[string][]string {
		r := strings.NewReplacer("<n>", n)
		return map[string][]string{
			`SELECT concat_ws('|', a.idempotency_key, a.status, a.resolution_source, e.reason, e.state, e.closed_by, e.actor)
				FROM booking_attempt a LEFT JOIN escalation e ON e.attempt_id = a.id ORDER BY 1`: {
				r.Replace("book:bi_h<n>:v1|FAILED|manual|duplicate_provider_reference|closed|manual|ops.1"),
				r.Replace("book:bi_m<n>:v1|CONFIRMED|manual|duplicate_provider_reference|closed|manual|ops.1"), r.Replace("book:bi_y<n>:v1|IN_PROGRESS")},
			`SELECT concat_ws('|', convert_from(record_key, 'UTF8'), v->>'eventType', v->>'attemptStatus', v->>'status')
				FROM (SELECT record_key, id, convert_from(value, 'UTF8')::jsonb AS v FROM outbox) o ORDER BY record_key, id`: {
				r.Replace("bi_h<n>|attempt.resolved|CONFIRMED"), r.Replace("bi_h<n>|escalation.opened|CONFIRMED"), r.Replace("bi_h<n>|attempt.resolved|FAILED"),
				r.Replace("bi_h<n>|escalation.closed"), r.Replace("bi_m<n>|escalation.opened|CONFIRMED"), r.Replace("bi_m<n>|attempt.resolved|CONFIRMED"),
				r.Replace("bi_m<n>|escalation.closed")},
		}
	}
	// heavy are 398 decisions for keys of bi_h8 with no attempt (kept): they make the lane of
	// bi_h8's records the slower one, so that another lane commits first.
	var heavy []*kgo.Record
	for v := 2; v < 400; v++ {
		heavy = append(heavy, dec("bi_h8", fmt.Sprintf("book:bi_h8:v%d", v), "FAILED", ""))
	}
	for _, c := range []struct {
		name       string
		seed, poll []*kgo.Record
		// want: query → its rows in the one-lane run (and so in the two-lane run).
		want map[string][]string
		// before is a poll applied before seed (nil: none).
		before []*kgo.Record
	}{
		{"G1 another intent's stored attempt holds the key",
			[]*kgo.Record{ev(events.EventOutcomeUnknown, "bi_a", "cancel:bk_1:v1", events.OpCancel, unknown)},
			[]*kgo.Record{ev(events.EventSucceeded, "bi_j", "cancel:bk_1:v1", events.OpCancel, ok("CXL-J")),
				ev(events.EventSucceeded, "bi_a", "authorize:bi_a:v1", events.OpPaymentAuthorize, ok("PAY-A"))},
			map[string][]string{
				`SELECT concat_ws('|', v->>'eventType', v->>'idempotencyKey') FROM (SELECT id, convert_from(value, 'UTF8')::jsonb AS v
					FROM outbox WHERE record_key = 'bi_a') o ORDER BY id`: {
					"escalation.opened|cancel:bk_1:v1", "attempt.resolved|authorize:bi_a:v1"},
				`SELECT concat_ws('|', a.idempotency_key, a.booking_intent_id, a.status, e.reason, e.state)
					FROM booking_attempt a LEFT JOIN escalation e ON e.attempt_id = a.id ORDER BY 1`: {
					"authorize:bi_a:v1|bi_a|CONFIRMED", "cancel:bk_1:v1|bi_a|UNKNOWN|key_conflict|open"},
			}, nil},
		{"G2 the stored holder of the reference, decided after the duplicate",
			[]*kgo.Record{book(events.EventStarted, "bi_h", "book:bi_h:v1", nil), book(events.EventSucceeded, "bi_h", "book:bi_h:v1", ok("HTL-77"))},
			[]*kgo.Record{book(events.EventSucceeded, "bi_j", "book:bi_j:v1", ok("HTL-77")), dec("bi_h", "book:bi_h:v1", "FAILED", "")},
			map[string][]string{
				`SELECT concat_ws('|', a.idempotency_key, a.status, a.resolution_source, e.reason, e.state, e.closed_by, e.actor)
					FROM booking_attempt a LEFT JOIN escalation e ON e.attempt_id = a.id ORDER BY 1`: {
					"book:bi_h:v1|FAILED|manual|duplicate_provider_reference|closed|manual|ops.1",
					"book:bi_j:v1|CONFIRMED|event|duplicate_provider_reference|open"},
				`SELECT concat_ws('|', convert_from(record_key, 'UTF8'), v->>'eventType', v->>'attemptStatus', v->>'status')
					FROM (SELECT record_key, id, convert_from(value, 'UTF8')::jsonb AS v FROM outbox) o ORDER BY record_key, id`: {
					"bi_h|attempt.resolved|CONFIRMED", "bi_h|escalation.opened|CONFIRMED", "bi_h|attempt.resolved|FAILED",
					"bi_h|escalation.closed", "bi_j|escalation.opened|CONFIRMED", "bi_j|attempt.resolved|CONFIRMED"},
			}, nil},
		{"G2 the stored holder of the reference, decided before the duplicate",
			[]*kgo.Record{book(events.EventStarted, "bi_h", "book:bi_h:v1", nil), book(events.EventSucceeded, "bi_h", "book:bi_h:v1", ok("HTL-78"))},
			[]*kgo.Record{dec("bi_h", "book:bi_h:v1", "FAILED", ""), book(events.EventSucceeded, "bi_j", "book:bi_j:v1", ok("HTL-78"))},
			map[string][]string{
				`SELECT concat_ws('|', a.idempotency_key, a.status, a.resolution_source, e.reason, e.state, e.closed_by, e.actor)
					FROM booking_attempt a LEFT JOIN escalation e ON e.attempt_id = a.id ORDER BY 1`: {
					"book:bi_h:v1|FAILED|manual|duplicate_provider_reference|open",
					"book:bi_j:v1|CONFIRMED|event|duplicate_provider_reference|open"},
				`SELECT concat_ws('|', convert_from(record_key, 'UTF8'), v->>'eventType', v->>'attemptStatus', v->>'status')
					FROM (SELECT record_key, id, convert_from(value, 'UTF8')::jsonb AS v FROM outbox) o ORDER BY record_key, id`: {
					"bi_h|attempt.resolved|CONFIRMED", "bi_h|attempt.resolved|FAILED", "bi_h|escalation.opened|FAILED",
					"bi_j|escalation.opened|CONFIRMED", "bi_j|attempt.resolved|CONFIRMED"},
			}, nil},
		{"G3 a decision kept for the key brings the reference",
			[]*kgo.Record{book(events.EventStarted, "bi_k", "book:bi_k:v1", nil), dec("bi_k", "book:bi_k:v1", "CONFIRMED", "HTL-88")},
			[]*kgo.Record{book(events.EventOutcomeUnknown, "bi_k", "book:bi_k:v1", unknown), book(events.EventSucceeded, "bi_j", "book:bi_j:v1", ok("HTL-88"))},
			map[string][]string{
				`SELECT concat_ws('|', c.reference, a.idempotency_key) FROM provider_reference_claim c JOIN booking_attempt a ON a.id = c.attempt_id`: {
					"HTL-88|book:bi_k:v1"},
				`SELECT concat_ws('|', a.idempotency_key, n.kind, o.idempotency_key) FROM anomaly n JOIN booking_attempt a ON a.id = n.attempt_id
					LEFT JOIN booking_attempt o ON o.id = (n.detail->>'owner')::uuid ORDER BY 1`: {
					"book:bi_j:v1|duplicate_provider_reference|book:bi_k:v1"},
				`SELECT concat_ws('|', a.idempotency_key, a.status, a.resolution_source, e.reason, e.state)
					FROM booking_attempt a LEFT JOIN escalation e ON e.attempt_id = a.id ORDER BY 1`: {
					"book:bi_j:v1|CONFIRMED|event|duplicate_provider_reference|open",
					"book:bi_k:v1|CONFIRMED|manual|duplicate_provider_reference|open"},
				`SELECT concat_ws('|', idempotency_key, applied_at IS NOT NULL) FROM pending_decision`: {"book:bi_k:v1|t"},
			}, nil},
		{"G4 the poll before claims a reference a decision kept before it brings",
			[]*kgo.Record{book(events.EventOutcomeUnknown, "bi_m", "book:bi_m:v1", unknown), book(events.EventStarted, "bi_y", "book:bi_y:v1", nil)},
			[]*kgo.Record{book(events.EventSucceeded, "bi_j", "book:bi_j:v1", ok("HTL-90")), dec("bi_m", "book:bi_m:v1", "FAILED", "")},
			map[string][]string{
				`SELECT concat_ws('|', c.reference, a.idempotency_key) FROM provider_reference_claim c JOIN booking_attempt a ON a.id = c.attempt_id`: {
					"HTL-90|book:bi_m:v1"},
				`SELECT concat_ws('|', a.idempotency_key, a.status, a.resolution_source, e.reason, e.state, e.closed_by, e.actor)
					FROM booking_attempt a LEFT JOIN escalation e ON e.attempt_id = a.id ORDER BY 1`: {
					"book:bi_j:v1|CONFIRMED|event|duplicate_provider_reference|open",
					"book:bi_m:v1|FAILED|manual|duplicate_provider_reference|closed|manual|ops.1", "book:bi_y:v1|IN_PROGRESS", "book:bi_z:v1|IN_PROGRESS"},
			},
			[]*kgo.Record{book(events.EventStarted, "bi_m", "book:bi_m:v1", nil), dec("bi_m", "book:bi_m:v1", "CONFIRMED", "HTL-90"),
				book(events.EventStarted, "bi_z", "book:bi_z:v1", nil)}},
		{"G5 a decision for a key whose attempt the seed creates brings a reference held before",
			[]*kgo.Record{book(events.EventOutcomeUnknown, "bi_m5", "book:bi_m5:v1", unknown), book(events.EventStarted, "bi_y5", "book:bi_y5:v1", nil)},
			[]*kgo.Record{dec("bi_m5", "book:bi_m5:v1", "CONFIRMED", "HTL-95"), dec("bi_h5", "book:bi_h5:v1", "FAILED", "")},
			heldClosed("5"),
			[]*kgo.Record{book(events.EventStarted, "bi_h5", "book:bi_h5:v1", nil), book(events.EventSucceeded, "bi_h5", "book:bi_h5:v1", ok("HTL-95"))}},
		{"G6 the seed keeps a decision whose reference is held before",
			[]*kgo.Record{dec("bi_m6", "book:bi_m6:v1", "CONFIRMED", "HTL-96"), book(events.EventStarted, "bi_y6", "book:bi_y6:v1", nil)},
			[]*kgo.Record{book(events.EventOutcomeUnknown, "bi_m6", "book:bi_m6:v1", unknown), dec("bi_h6", "book:bi_h6:v1", "FAILED", "")},
			heldClosed("6"),
			[]*kgo.Record{book(events.EventStarted, "bi_h6", "book:bi_h6:v1", nil), book(events.EventSucceeded, "bi_h6", "book:bi_h6:v1", ok("HTL-96"))}},
		{"G7 a kept reference claimed at the provider of the seed's attempt, the seed's last event for the key at another",
			[]*kgo.Record{book(events.EventStarted, "bi_m7", "book:bi_m7:v1", nil),
				at("sim-air", book(events.EventOutcomeUnknown, "bi_m7", "book:bi_m7:v1", unknown)),
				book(events.EventStarted, "bi_y7", "book:bi_y7:v1", nil)},
			[]*kgo.Record{book(events.EventOutcomeUnknown, "bi_m7", "book:bi_m7:v1", unknown),
				at("sim-air", book(events.EventOutcomeUnknown, "bi_m7", "book:bi_m7:v1", unknown)),
				dec("bi_h7", "book:bi_h7:v1", "FAILED", "")},
			map[string][]string{`SELECT concat_ws('|', a.idempotency_key, a.provider, a.status, a.resolution_source, e.reason, e.state, e.closed_by, e.actor)
					FROM booking_attempt a LEFT JOIN escalation e ON e.attempt_id = a.id WHERE a.booking_intent_id IN ('bi_h7', 'bi_m7') ORDER BY 1`: {
				"book:bi_h7:v1|sim-hotels|FAILED|manual|duplicate_provider_reference|closed|manual|ops.1",
				"book:bi_m7:v1|sim-hotels|CONFIRMED|manual|duplicate_provider_reference|closed|manual|ops.1",
				"book:bi_m7:v1|sim-hotels|CONFIRMED|manual|key_conflict|closed|manual|ops.1"}},
			[]*kgo.Record{dec("bi_m7", "book:bi_m7:v1", "CONFIRMED", "HTL-97"),
				book(events.EventStarted, "bi_h7", "book:bi_h7:v1", nil), book(events.EventSucceeded, "bi_h7", "book:bi_h7:v1", ok("HTL-97"))}},
		{"G8 a kept reference claimed at the provider of the poll's first event for the key, its last at another",
			[]*kgo.Record{book(events.EventStarted, "bi_y8", "book:bi_y8:v1", nil)},
			append(append([]*kgo.Record{dec("bi_h8", "book:bi_h8:v1", "FAILED", "")}, heavy...),
				book(events.EventOutcomeUnknown, "bi_m8", "book:bi_m8:v1", unknown),
				at("sim-air", book(events.EventOutcomeUnknown, "bi_m8", "book:bi_m8:v1", unknown))),
			map[string][]string{`SELECT concat_ws('|', a.idempotency_key, a.provider, a.status, a.resolution_source, e.reason, e.state, e.closed_by, e.actor)
					FROM booking_attempt a LEFT JOIN escalation e ON e.attempt_id = a.id WHERE a.booking_intent_id IN ('bi_h8', 'bi_m8') ORDER BY 1`: {
				"book:bi_h8:v1|sim-hotels|FAILED|manual|duplicate_provider_reference|open",
				"book:bi_m8:v1|sim-hotels|CONFIRMED|manual|duplicate_provider_reference|open",
				"book:bi_m8:v1|sim-hotels|CONFIRMED|manual|key_conflict|open"}},
			[]*kgo.Record{dec("bi_m8", "book:bi_m8:v1", "CONFIRMED", "HTL-98"),
				book(events.EventStarted, "bi_h8", "book:bi_h8:v1", nil), book(events.EventSucceeded, "bi_h8", "book:bi_h8:v1", ok("HTL-98"))}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			// run seeds a fresh database with c.before and c.seed, each in one transaction, then
			// applies c.poll in lanes; with ahead they are consecutive polls applied in lanes, each
			// one's stored links read before the one before it is applied (Applier.ApplyPolls: the
			// ingester reads a poll ahead while the one before it is applied).
			run := func(lanes int, ahead bool) (*pgxpool.Pool, []string) {
				pool := pgtest.NewPool(t)
				ap, err := ingest.NewApplier(ingest.Config{Providers: m, Lanes: lanes}, pool, ingest.Deps{Logger: discardLogger()})
				if err != nil {
					t.Fatal(err)
				}
				var polls []ingest.Batch
				if c.before != nil {
					polls = append(polls, ap.Decode(c.before))
				}
				polls = append(polls, ap.Decode(c.seed))
				if ahead {
					err = ap.ApplyPolls(t.Context(), append(polls, ap.Decode(c.poll))...)
				} else {
					for _, b := range polls {
						if err = ap.Apply(t.Context(), b); err != nil {
							break
						}
					}
					if err == nil {
						err = ap.ApplyLanes(t.Context(), ap.Decode(c.poll))
					}
				}
				if err != nil {
					t.Fatal(err)
				}
				return pool, dumpTables(t, pool)
			}
			onePool, one := run(1, false)
			twoPool, two := run(2, false)
			aheadPool, ahead := run(2, true)
			for q, want := range c.want {
				for lanes, pool := range map[string]*pgxpool.Pool{"1 lane": onePool, "2 lanes": twoPool, "2 lanes, the poll's links read before the seed's": aheadPool} {
					rows, err := pool.Query(t.Context(), q)
					if err != nil {
						t.Fatal(err)
					}
					var got []string
					for rows.Next() {
						var s string
						if err := rows.Scan(&s); err != nil {
							t.Fatal(err)
						}
						got = append(got, s)
					}
					if rows.Close(); rows.Err() != nil {
						t.Fatal(rows.Err())
					}
					if !slices.Equal(got, want) {
						t.Errorf("%s: %s\n= %q\nwant %q", lanes, q, got, want)
					}
				}
			}
			for name, two := range map[string][]string{"two lanes": two, "two lanes, the poll's links read before the seed's": ahead} {
				if len(one) != len(two) {
					t.Errorf("%s leave %d rows, one lane %d", name, len(two), len(one))
				}
				for i := range min(len(one), len(two)) {
					if one[i] != two[i] {
						t.Errorf("row %d, %s:\n%s\none lane:\n%s", i, name, two[i], one[i])
					}
				}
			}
		})
	}
}
