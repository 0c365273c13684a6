package ingest_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// discardLogger discards logs, unless BOOKRECON_TEST_LOG is set (then they go to stderr).
func discardLogger() *slog.Logger {
	if os.Getenv("BOOKRECON_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	return slog.New(slog.DiscardHandler)
}

// metric returns the value of a counter or gauge series; labels are name, value pairs.
func metric(t testing.TB, g prometheus.Gatherer, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				if !hasLabel(m, labels[i], labels[i+1]) {
					continue series
				}
			}
			if c := m.GetCounter(); c != nil {
				return c.GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	t.Fatalf("metric %s%v not found", name, labels)
	return 0
}

func hasLabel(m *dto.Metric, k, v string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == k && l.GetValue() == v {
			return true
		}
	}
	return false
}

// logBuffer collects JSON log lines from the ingester's goroutines.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// lines decodes the lines written so far.
func (l *logBuffer) lines(t testing.TB) []map[string]any {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(l.b.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		out = append(out, m)
	}
	return out
}

// dumpTables returns every row of booking_attempt, attempt_transition, escalation, anomaly,
// outbox, provider_reference_claim, pending_decision and processed_event as text, each table
// ended by "--", without the columns a transaction's clock, a sequence or a random id fills in:
// times are compared by whether they are set, an attempt by its key, a duplicate reference's
// owner by its key, an outbox record by its key, topic, event id and body (without its
// occurredAt, resolvedAt and unknownSince; a dead letter's body not at all), in id order per key.
func dumpTables(t testing.TB, pool *pgxpool.Pool) []string {
	t.Helper()
	var out []string
	for _, q := range []string{
		`SELECT concat_ws('|', tenant_id, idempotency_key, booking_intent_id, operation, subject, operation_version, provider,
			status, resolution_source, request::text, request_hash, fingerprint, client_reference, provider_session_id,
			correlation_id, payment_reference, subject_provider_reference, provider_idempotency_key, provider_reference,
			failure_code, retryable, timeout_class, request_sent, started_at, first_event_at, failed_fact_at IS NULL,
			unknown_since IS NULL, terminal_at IS NULL, next_check_at IS NULL, check_count, last_lookup_result,
			gate_judged, blind_retry, deadline_done, lease_token, lease_owner)
			FROM booking_attempt ORDER BY tenant_id, idempotency_key`,
		`SELECT concat_ws('|', a.idempotency_key, t.from_status, t.to_status, t.cause, t.event_id, t.lookup::text, t.actor,
			t.reason, t.note) FROM attempt_transition t JOIN booking_attempt a ON a.id = t.attempt_id ORDER BY a.idempotency_key, t.id`,
		`SELECT concat_ws('|', a.idempotency_key, e.escalation_id, e.reason, e.state, e.closed_by, e.actor, e.closed_at IS NULL)
			FROM escalation e JOIN booking_attempt a ON a.id = e.attempt_id ORDER BY a.idempotency_key, e.reason`,
		`SELECT concat_ws('|', a.idempotency_key, n.tenant_id, n.kind, n.event_id, CASE WHEN n.kind = 'duplicate_provider_reference'
			THEN (SELECT 'owner ' || o.idempotency_key FROM booking_attempt o WHERE o.id = (n.detail->>'owner')::uuid) ELSE n.detail::text END)
			FROM anomaly n JOIN booking_attempt a ON a.id = n.attempt_id ORDER BY a.idempotency_key, n.id`,
		`SELECT count(*)::text FROM anomaly WHERE attempt_id IS NULL`,
		`SELECT concat_ws('|', convert_from(record_key, 'UTF8'), topic, event_id, CASE WHEN topic NOT LIKE '%.dlq.%'
			THEN (convert_from(value, 'UTF8')::jsonb - 'occurredAt' - 'resolvedAt' - 'unknownSince')::text END)
			FROM outbox ORDER BY convert_from(record_key, 'UTF8'), id`,
		`SELECT concat_ws('|', c.provider, c.operation, c.reference, c.tenant_id, a.idempotency_key)
			FROM provider_reference_claim c JOIN booking_attempt a ON a.id = c.attempt_id ORDER BY 1`,
		`SELECT concat_ws('|', tenant_id, idempotency_key, event_id, decision::text, applied_at IS NULL, failed_at IS NULL, failure_reason)
			FROM pending_decision ORDER BY tenant_id, idempotency_key, seq`,
		`SELECT concat_ws('|', tenant_id, event_id) FROM processed_event ORDER BY 1`,
	} {
		rows, err := pool.Query(t.Context(), q)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var s string
			if err := rows.Scan(&s); err != nil {
				t.Fatal(err)
			}
			out = append(out, s)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		out = append(out, "--")
	}
	return out
}
