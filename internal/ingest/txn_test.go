package ingest_test

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/bookrecon/bookrecon/events"
	"github.com/bookrecon/bookrecon/internal/harness/kafkatest"
	"github.com/bookrecon/bookrecon/internal/harness/pipelinetest"
	"github.com/bookrecon/bookrecon/internal/ingest"
	"github.com/bookrecon/bookrecon/internal/telemetry"
)

// TestTransactionalProducerReadCommitted publishes to a one-partition attempts topic through a
// transactional producer on the real broker: transaction 1 (4 valid events) aborts,
// transaction 2 (4 events) commits, transaction 3 (4 events) stays open for 5 s while a plain
// producer appends 8 more events behind it, then aborts. The ingester must apply exactly
// transaction 2 and the 8 later events — in publishing order, and the later ones only once
// transaction 3 has ended (the last stable offset holds them back) — and none of the aborted
// events: no attempt, audit row, processed_event row or consumed count of theirs.
func TestTransactionalProducerReadCommitted(t *testing.T) {
	t.Parallel()
	h := pipelinetest.New(t, 1)
	applied := newModel(t, h, "txok", 3) // intent 0: transaction 2; intents 1 and 2: behind transaction 3
	aborted := newModel(t, h, "txab", 2) // intent 0: transaction 1; intent 1: transaction 3
	committed, later := recordsOf(applied, 0, 4), recordsOf(applied, 4, 12)
	reg := telemetry.NewRegistry()
	// One lane: checkApplied holds the audit trail to publishing order across intents 1 and 2,
	// which two lanes keep per intent only (docs/design.md#transactions-and-locks).
	cfg := h.IngestConfig()
	cfg.Lanes = 1
	startIngester(t, cfg, ingest.Deps{Logger: discardLogger(), Registry: reg})

	ctx := context.Background()
	txn, err := kgo.NewClient(kgo.SeedBrokers(kafkatest.Brokers()...), kgo.TransactionalID("bookrecon-test-txn-"+kafkatest.Suffix()),
		kgo.DefaultProduceTopic(h.Topics.Attempts))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(txn.Close)
	transaction := func(recs []*kgo.Record, end kgo.TransactionEndTry, held func()) {
		t.Helper()
		if err := txn.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		produce(t, txn, h.Topics.Attempts, recs) // flushed: in the log before the end marker
		if held != nil {
			held()
		}
		if err := txn.EndTransaction(ctx, end); err != nil {
			t.Fatalf("end transaction (%v): %v", end, err)
		}
	}

	transaction(recordsOf(aborted, 0, 4), kgo.TryAbort, nil)
	transaction(committed, kgo.TryCommit, nil)
	h.WaitFor("transaction 2 applied", 60*time.Second, func() bool { return len(processedIDs(t, h)) >= 4 })
	time.Sleep(time.Second) // anything else the ingester was going to apply, it applies by now
	checkApplied(t, h, reg, applied, 4)

	adm := kafkatest.Admin(t)
	transaction(recordsOf(aborted, 4, 8), kgo.TryAbort, func() {
		produce(t, h.Producer, h.Topics.Attempts, later)
		// The broker holds the 8 later records behind the open transaction: log end offset
		// 4+1 + 4+1 + 4 + 8 = 22, last stable offset 10 (the open transaction's first record).
		end, stable := offsets(t, adm, h.Topics.Attempts)
		if end != 22 || stable != 10 {
			t.Fatalf("while transaction 3 is open: end offset %d, last stable offset %d; want 22, 10", end, stable)
		}
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
			if n := len(processedIDs(t, h)); n != 4 {
				t.Fatalf("while transaction 3 is open: %d processed events, want the 4 of transaction 2", n)
			}
		}
		checkApplied(t, h, reg, applied, 4)
	})
	h.WaitFor("the 8 later events applied", 60*time.Second, func() bool { return len(processedIDs(t, h)) >= 12 })
	time.Sleep(time.Second)
	checkApplied(t, h, reg, applied, 12)
	assertModel(t, h, applied)
	// The offsets are committed past the last abort marker too: the group's lag reaches 0.
	h.WaitFor("the group's lag at 0", 30*time.Second, func() bool {
		lag, _ := groupLag(t, adm, h.Group, h.Topics.Attempts)
		return lag == 0
	})
}

// recordsOf returns records of m's events [from, to) under their keys.
func recordsOf(m *model, from, to int) []*kgo.Record {
	var recs []*kgo.Record
	for i := from; i < to; i++ {
		recs = append(recs, &kgo.Record{Key: m.keys[i], Value: m.events[i]})
	}
	return recs
}

// checkApplied checks that exactly the first n events of m are applied, in order: the
// processed_event rows, the audit rows (one per event, in publishing order) and the consumed
// counts by event type.
func checkApplied(t *testing.T, h *pipelinetest.Harness, reg prometheus.Gatherer, m *model, n int) {
	t.Helper()
	var ids []string
	wantTypes := map[string]float64{}
	for _, b := range m.events[:n] {
		var e struct{ EventID, EventType string }
		if err := json.Unmarshal(b, &e); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, e.EventID)
		wantTypes[events.TopicAttempts+" "+e.EventType]++
	}
	sorted := slices.Sorted(slices.Values(ids))
	if diff := cmp.Diff(sorted, processedIDs(t, h)); diff != "" {
		t.Errorf("processed_event ids (-want +got):\n%s", diff)
	}
	var audit []string
	rows, err := h.Pool.Query(context.Background(), `SELECT event_id FROM attempt_transition ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		audit = append(audit, id)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(ids, audit); diff != "" {
		t.Errorf("audit rows' event ids in order (-want +got):\n%s", diff)
	}
	gotTypes := map[string]float64{}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "bookrecon_events_consumed_total" {
			continue
		}
		for _, s := range mf.GetMetric() {
			if v := s.GetCounter().GetValue(); v != 0 {
				labels := map[string]string{}
				for _, l := range s.GetLabel() {
					labels[l.GetName()] = l.GetValue()
				}
				gotTypes[labels["topic"]+" "+labels["event_type"]] = v
			}
		}
	}
	if diff := cmp.Diff(wantTypes, gotTypes); diff != "" {
		t.Errorf("bookrecon_events_consumed_total by event type (-want +got):\n%s", diff)
	}
}

// processedIDs returns the event ids of processed_event, sorted.
func processedIDs(t *testing.T, h *pipelinetest.Harness) []string {
	t.Helper()
	rows, err := h.Pool.Query(context.Background(), `SELECT event_id FROM processed_event ORDER BY event_id`)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return ids
}

// offsets returns partition 0's log end offset and last stable offset.
func offsets(t *testing.T, adm *kadm.Client, topic string) (end, stable int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatalf("end offsets: %v", err)
	}
	lso, err := adm.ListCommittedOffsets(ctx, topic)
	if err != nil {
		t.Fatalf("last stable offsets: %v", err)
	}
	e, _ := ends.Lookup(topic, 0)
	s, _ := lso.Lookup(topic, 0)
	return e.Offset, s.Offset
}
