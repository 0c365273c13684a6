package escalate_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/bookrecon/bookrecon/internal/escalate"
	"github.com/bookrecon/bookrecon/internal/harness/pgtest"
	"github.com/bookrecon/bookrecon/internal/postgres"
)

// poison makes every INSERT into table for attempt id fail with SQLSTATE 23514 (a check
// violation: the candidate's own data refused), until the returned func drops the trigger.
func poison(t *testing.T, pool *pgxpool.Pool, table string, id uuid.UUID, when string) func() {
	t.Helper()
	ctx := context.Background()
	fn := "poison_" + table
	if _, err := pool.Exec(ctx, fmt.Sprintf(`CREATE FUNCTION %[1]s() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION 'poisoned %[2]s row' USING ERRCODE = '23514'; END $$`, fn, table)); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, fmt.Sprintf(`CREATE TRIGGER %[1]s BEFORE INSERT ON %[2]s FOR EACH ROW
		WHEN (NEW.attempt_id = '%[3]s'%[4]s) EXECUTE FUNCTION %[1]s()`, fn, table, id, when)); err != nil {
		t.Fatal(err)
	}
	return func() {
		t.Helper()
		if _, err := pool.Exec(ctx, fmt.Sprintf(`DROP TRIGGER %[1]s ON %[2]s; DROP FUNCTION %[1]s()`, fn, table)); err != nil {
			t.Fatal(err)
		}
	}
}

// logLines decodes a JSON log buffer.
func logLines(t *testing.T, b *bytes.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for line := range strings.Lines(b.String()) {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		out = append(out, m)
	}
	return out
}

type failure struct {
	count int
	err   string
	// retryIn is escalation_retry_at − now() on the database clock, in seconds.
	retryIn *float64
	done    bool
}

func readFailure(t *testing.T, pool *pgxpool.Pool, id uuid.UUID) failure {
	t.Helper()
	var f failure
	if err := pool.QueryRow(context.Background(), `SELECT escalation_failures, coalesce(escalation_error, ''),
		extract(epoch FROM escalation_retry_at - now())::float8, deadline_done FROM booking_attempt WHERE id = $1`, id).
		Scan(&f.count, &f.err, &f.retryIn, &f.done); err != nil {
		t.Fatal(err)
	}
	return f
}

// TestFailingCandidateNeverBlocksTheOthers: five aged UNKNOWN attempts; the oldest one's
// escalation insert fails (a trigger raises 23514). The round opens the other four escalations
// with their outbox rows, records the failure on the poisoned attempt (count, error, retry-at on
// the backoff), counts it and logs it at error level by attempt id, tenant and key. While its
// retry-at is ahead the scan skips it; when due it is retried (the backoff doubles), and once the
// trigger is gone it escalates: exactly five.
func TestFailingCandidateNeverBlocksTheOthers(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	poisoned := seed(t, pool, "old", 1, "10 minutes", "BOOK")[0]
	seed(t, pool, "aged", 4, "45 seconds", "BOOK")
	drop := poison(t, pool, "escalation", poisoned, "")

	var logs bytes.Buffer
	reg := prometheus.NewRegistry()
	e, err := escalate.New(escalate.Config{Providers: mapOf(t), RetryInitial: time.Minute, RetryMax: time.Hour}, pool,
		slog.New(slog.NewJSONHandler(&logs, nil)), reg)
	if err != nil {
		t.Fatal(err)
	}
	failures := func() float64 {
		return metric(t, reg, "bookrecon_item_failures_total", map[string]string{"stage": "escalate", "error_class": "integrity_constraint_violation"})
	}
	opened := func() float64 {
		return metric(t, reg, "bookrecon_escalations_opened_total", map[string]string{"reason": "deadline_exceeded"})
	}
	escalations := `SELECT count(*) FROM escalation WHERE reason = 'deadline_exceeded'`
	published := `SELECT count(*) FROM outbox WHERE convert_from(value, 'UTF8')::jsonb->>'eventType' = 'escalation.opened'`

	if n, err := e.RunOnce(ctx); err != nil || n != 4 {
		t.Fatalf("first round = %d, %v; want 4 opened and no error", n, err)
	}
	if got := count(t, pool, escalations); got != 4 {
		t.Fatalf("escalations = %d, want 4", got)
	}
	if got := count(t, pool, published); got != 4 {
		t.Fatalf("escalation.opened rows = %d, want 4", got)
	}
	if got := count(t, pool, `SELECT count(*) FROM escalation WHERE attempt_id = $1`, poisoned); got != 0 {
		t.Fatalf("poisoned attempt escalations = %d, want 0", got)
	}
	f := readFailure(t, pool, poisoned)
	if f.count != 1 || !strings.Contains(f.err, "poisoned escalation row (SQLSTATE 23514)") || f.done ||
		f.retryIn == nil || *f.retryIn < 40 || *f.retryIn > 72 {
		t.Fatalf("poisoned attempt after one failure: %+v (retry in %v s); want count 1, the trigger's error, not judged, retry in 48–72 s", f, deref(f.retryIn))
	}
	if failures() != 1 || opened() != 4 {
		t.Fatalf("metrics: failures %v, opened %v; want 1, 4", failures(), opened())
	}
	var errorLines int
	for _, l := range logLines(t, &logs) {
		if l["level"] != "ERROR" {
			continue
		}
		errorLines++
		if l["attempt_id"] != poisoned.String() || l["tenant_id"] != "t" || l["idempotency_key"] != "x:old1:v1" ||
			l["error_class"] != "integrity_constraint_violation" || l["failures"] != 1.0 {
			t.Errorf("error line %v; want the poisoned attempt's id, tenant, key, class and count", l)
		}
	}
	if errorLines != 1 {
		t.Fatalf("%d error lines, want 1:\n%s", errorLines, logs.String())
	}

	// Its retry-at is ahead: the next round skips it (no hot retry).
	if n, err := e.RunOnce(ctx); err != nil || n != 0 {
		t.Fatalf("second round = %d, %v; want 0", n, err)
	}
	if f := readFailure(t, pool, poisoned); f.count != 1 || failures() != 1 {
		t.Fatalf("retried before its retry-at: count %d, metric %v", f.count, failures())
	}

	// Due again (its retry-at moved to the past), still poisoned: the backoff doubles.
	due := func() {
		t.Helper()
		if _, err := pool.Exec(ctx, `UPDATE booking_attempt SET escalation_retry_at = now() - interval '1 second' WHERE id = $1`, poisoned); err != nil {
			t.Fatal(err)
		}
	}
	due()
	if n, err := e.RunOnce(ctx); err != nil || n != 0 {
		t.Fatalf("third round = %d, %v; want 0", n, err)
	}
	if f := readFailure(t, pool, poisoned); f.count != 2 || f.retryIn == nil || *f.retryIn < 90 || *f.retryIn > 144 || failures() != 2 {
		t.Fatalf("after the second failure: %+v (retry in %v s), metric %v; want count 2, retry in 96–144 s, metric 2", f, deref(f.retryIn), failures())
	}

	drop()
	due()
	if n, err := e.RunOnce(ctx); err != nil || n != 1 {
		t.Fatalf("round after the fix = %d, %v; want 1", n, err)
	}
	if got, pub := count(t, pool, escalations), count(t, pool, published); got != 5 || pub != 5 {
		t.Fatalf("escalations %d, escalation.opened rows %d; want 5, 5", got, pub)
	}
	if f := readFailure(t, pool, poisoned); !f.done || f.count != 2 || failures() != 2 || opened() != 5 {
		t.Fatalf("after the fix: %+v, metrics failures %v opened %v; want judged, count 2 kept, 2, 5", f, failures(), opened())
	}
}

// metric sums the counters of name whose labels include every given pair; a metric not
// registered fails the test.
func metric(t *testing.T, g prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		sum := 0.0
	series:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for k, v := range labels {
				if have[k] != v {
					continue series
				}
			}
			sum += m.GetCounter().GetValue()
		}
		return sum
	}
	t.Fatalf("metric %s not registered", name)
	return 0
}

func deref(p *float64) any {
	if p == nil {
		return nil
	}
	return *p
}

// TestOutageIsNotTheCandidatesFailure: the escalator's connections are terminated in the middle
// of its first escalation (pg_terminate_backend, before the commit): the round fails as an
// outage and records nothing on any attempt; the next round escalates all three.
func TestOutageIsNotTheCandidatesFailure(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewURL(t)
	pool, err := postgres.Open(ctx, url, 4)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	admin, err := postgres.Open(ctx, url, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	seed(t, admin, "aged", 3, "45 seconds", "BOOK")
	reg := prometheus.NewRegistry()
	e, err := escalate.New(escalate.Config{Providers: mapOf(t)}, pool, slog.New(slog.DiscardHandler), reg)
	if err != nil {
		t.Fatal(err)
	}
	var kills atomic.Int64
	escalate.SetBeforeCommit(e, func(context.Context, uuid.UUID) {
		if kills.Add(1) != 1 {
			return
		}
		if _, err := admin.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> pg_backend_pid()`); err != nil {
			t.Errorf("terminate: %v", err)
		}
	})
	if n, err := e.RunOnce(ctx); err == nil || n != 0 {
		t.Fatalf("round during the outage = %d, %v; want 0 and an error", n, err)
	}
	if got := count(t, admin, `SELECT count(*) FROM booking_attempt WHERE escalation_failures > 0 OR escalation_error IS NOT NULL
		OR escalation_retry_at IS NOT NULL`); got != 0 {
		t.Fatalf("%d attempts recorded as failed by an outage, want 0", got)
	}
	if v := metric(t, reg, "bookrecon_item_failures_total", nil); v != 0 {
		t.Fatalf("item failures counted during an outage: %v", v)
	}
	if n, err := e.RunOnce(ctx); err != nil || n != 3 {
		t.Fatalf("round after the outage = %d, %v; want 3", n, err)
	}
}
