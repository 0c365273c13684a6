package reconcile_test

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
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/bookrecon/bookrecon/events"
	"github.com/bookrecon/bookrecon/internal/attempt"
	"github.com/bookrecon/bookrecon/internal/harness/pgtest"
	"github.com/bookrecon/bookrecon/internal/postgres"
	"github.com/bookrecon/bookrecon/internal/reconcile"
	"github.com/bookrecon/bookrecon/providers"
	"github.com/bookrecon/bookrecon/providers/simulator"
)

// poisonTransitions makes every attempt_transition INSERT for attempt id with the given cause
// fail with SQLSTATE 23514 (the attempt's own data refused) until the returned func drops the
// trigger.
func poisonTransitions(t *testing.T, pool *pgxpool.Pool, id uuid.UUID, cause string) func() {
	t.Helper()
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `CREATE FUNCTION poison() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION 'poisoned transition' USING ERRCODE = '23514'; END $$`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, fmt.Sprintf(`CREATE TRIGGER poison BEFORE INSERT ON attempt_transition FOR EACH ROW
		WHEN (NEW.attempt_id = '%s' AND NEW.cause = '%s') EXECUTE FUNCTION poison()`, id, cause)); err != nil {
		t.Fatal(err)
	}
	return func() {
		t.Helper()
		if _, err := pool.Exec(ctx, `DROP TRIGGER poison ON attempt_transition; DROP FUNCTION poison()`); err != nil {
			t.Fatal(err)
		}
	}
}

type checkFailure struct {
	Failures int
	Error    string
}

func readCheckFailure(t *testing.T, ctx context.Context, pool *pgxpool.Pool, id uuid.UUID) checkFailure {
	t.Helper()
	var f checkFailure
	if err := pool.QueryRow(ctx, `SELECT check_failures, coalesce(check_error, '') FROM booking_attempt WHERE id = $1`, id).
		Scan(&f.Failures, &f.Error); err != nil {
		t.Fatal(err)
	}
	return f
}

// errorLogs returns the error-level lines of a JSON log buffer.
func errorLogs(t *testing.T, b *bytes.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for line := range strings.Lines(b.String()) {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if m["level"] == "ERROR" {
			out = append(out, m)
		}
	}
	return out
}

// TestFailingCheckNeverBlocksTheOthers: three UNKNOWN attempts found CONFIRMED by client
// reference; the verdict write of one fails (its audit row refused with 23514). The other two
// settle in the same round and RunOnce reports no error; the failing one stays UNKNOWN, its
// failure recorded (check_failures 1, the error, lease released, check_count unchanged) with
// next_check_at on the backoff (+2 s), counted and logged at error level. It is not due a
// millisecond earlier; at +2 s it fails again (+4 s); once the cause is gone it settles.
func TestFailingCheckNeverBlocksTheOthers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	m := mapPath(t)
	scfg := storeConfig(m)
	now := time.Now().UTC()
	var specs []attemptSpec
	truth := simulator.Truth{}
	for i := range 3 {
		s := attemptSpec{Tenant: "t_fail", Intent: fmt.Sprintf("bi_f%d", i), Provider: "sim-hotels",
			ClientRef: fmt.Sprintf("cr_f%d", i), Traveller: "tr", Stay: hotelStay(60 + i)}
		specs = append(specs, s)
		truth["sim-hotels"] = append(truth["sim-hotels"], record(fmt.Sprintf("HTL-F%d", i), s.ClientRef, providers.StatusConfirmed, now.Add(-time.Hour), ""))
		applyEvent(t, ctx, pool, scfg, s.Started(now.Add(-2*time.Second)))
		applyEvent(t, ctx, pool, scfg, s.Unknown(now.Add(-time.Second), "read_timeout", ""))
	}
	poisoned := readRow(t, ctx, pool, "t_fail", specs[1].Key()).ID
	drop := poisonTransitions(t, pool, poisoned, "lookup")

	clk := newStepClock(time.Now().UTC().Truncate(time.Millisecond).Add(2 * time.Second))
	var logs bytes.Buffer
	reg := prometheus.NewRegistry()
	rec, err := reconcile.New(demoConfig(m), pool, startSim(t, newSim(truth, m, clk, 1, simulator.Faults{}), clk),
		slog.New(slog.NewJSONHandler(&logs, nil)), reg, clk.Now)
	if err != nil {
		t.Fatal(err)
	}
	failures := func() float64 {
		return metricWith(t, reg, "bookrecon_item_failures_total", map[string]string{"stage": "check", "error_class": "integrity_constraint_violation"})
	}

	if n, err := rec.RunOnce(ctx); err != nil || n != 3 {
		t.Fatalf("first round = %d, %v; want 3 checked and no error", n, err)
	}
	for i, s := range specs {
		r := readRow(t, ctx, pool, s.Tenant, s.Key())
		if i == 1 {
			continue
		}
		if r.Status != "CONFIRMED" || r.Source != "client_reference" || r.Ref != fmt.Sprintf("HTL-F%d", i) {
			t.Fatalf("%s: %s/%s/%s, want CONFIRMED/client_reference/HTL-F%d", s.Key(), r.Status, r.Source, r.Ref, i)
		}
	}
	checkedAt := clk.Now()
	r := readRow(t, ctx, pool, "t_fail", specs[1].Key())
	f := readCheckFailure(t, ctx, pool, poisoned)
	if r.Status != "UNKNOWN" || r.CheckCount != 0 || r.LeaseOwner != "" || r.NextCheck == nil || !r.NextCheck.Equal(checkedAt.Add(2*time.Second)) ||
		f.Failures != 1 || !strings.Contains(f.Error, "poisoned transition (SQLSTATE 23514)") {
		t.Fatalf("failing attempt: %+v %+v; want UNKNOWN, 0 checks, no lease, next check at %s, 1 failure with the trigger's error",
			r, f, checkedAt.Add(2*time.Second))
	}
	if got := failures(); got != 1 {
		t.Fatalf("item failures = %v, want 1", got)
	}
	if got := metric(t, reg, "bookrecon_resolutions_total"); got != 2 {
		t.Fatalf("resolutions = %v, want 2", got)
	}
	lines := errorLogs(t, &logs)
	if len(lines) != 1 || lines[0]["attempt_id"] != poisoned.String() || lines[0]["tenant_id"] != "t_fail" ||
		lines[0]["idempotency_key"] != specs[1].Key() || lines[0]["error_class"] != "integrity_constraint_violation" {
		t.Fatalf("error lines %v; want one naming the failing attempt", lines)
	}

	clk.Set(r.NextCheck.Add(-time.Millisecond))
	if n, err := rec.RunOnce(ctx); err != nil || n != 0 {
		t.Fatalf("1ms before its retry: RunOnce = %d, %v; want nothing due", n, err)
	}
	clk.Set(*r.NextCheck)
	if n, err := rec.RunOnce(ctx); err != nil || n != 1 {
		t.Fatalf("at its retry: RunOnce = %d, %v; want 1", n, err)
	}
	r = readRow(t, ctx, pool, "t_fail", specs[1].Key())
	if f := readCheckFailure(t, ctx, pool, poisoned); f.Failures != 2 || r.NextCheck == nil || !r.NextCheck.Equal(clk.Now().Add(4*time.Second)) || failures() != 2 {
		t.Fatalf("second failure: %+v, next check %v, metric %v; want 2 failures, next at +4s, metric 2", f, r.NextCheck, failures())
	}

	drop()
	clk.Set(*r.NextCheck)
	if n, err := rec.RunOnce(ctx); err != nil || n != 1 {
		t.Fatalf("after the fix: RunOnce = %d, %v; want 1", n, err)
	}
	if r := readRow(t, ctx, pool, "t_fail", specs[1].Key()); r.Status != "CONFIRMED" || r.Ref != "HTL-F1" {
		t.Fatalf("after the fix: %s/%s, want CONFIRMED/HTL-F1", r.Status, r.Ref)
	}
	if got := len(resolutions(t, ctx, pool)); got != 3 || failures() != 2 {
		t.Fatalf("%d resolutions, %v failures; want 3, 2", got, failures())
	}
}

// TestFailingStaleSweepNeverBlocksChecks: an attempt stuck IN_PROGRESS whose turn to UNKNOWN
// fails (its timeout audit row refused) is recorded and retried with backoff, and the round
// still checks the UNKNOWN attempt that is due.
func TestFailingStaleSweepNeverBlocksChecks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	m := mapPath(t)
	scfg := storeConfig(m)
	now := time.Now().UTC()
	stuck := attemptSpec{Tenant: "t_fail", Intent: "bi_stuck", Provider: "sim-hotels", ClientRef: "cr_stuck", Traveller: "tr", Stay: hotelStay(70)}
	due := attemptSpec{Tenant: "t_fail", Intent: "bi_due", Provider: "sim-hotels", ClientRef: "cr_due", Traveller: "tr", Stay: hotelStay(71)}
	applyEvent(t, ctx, pool, scfg, stuck.Started(now))
	applyEvent(t, ctx, pool, scfg, due.Started(now))
	applyEvent(t, ctx, pool, scfg, due.Unknown(now, "read_timeout", ""))
	id := readRow(t, ctx, pool, "t_fail", stuck.Key()).ID
	drop := poisonTransitions(t, pool, id, "timeout")
	truth := simulator.Truth{"sim-hotels": {record("HTL-DUE", "cr_due", providers.StatusConfirmed, now.Add(-time.Hour), "")}}
	clk := newStepClock(time.Now().UTC().Truncate(time.Millisecond).Add(2 * time.Minute))
	cfg := demoConfig(m)
	cfg.InProgressTimeout = time.Minute
	rec, reg := newReconciler(t, cfg, pool, startSim(t, newSim(truth, m, clk, 1, simulator.Faults{}), clk), clk)

	if n, err := rec.RunOnce(ctx); err != nil || n != 1 {
		t.Fatalf("RunOnce = %d, %v; want the due attempt checked and no error", n, err)
	}
	if r := readRow(t, ctx, pool, "t_fail", due.Key()); r.Status != "CONFIRMED" {
		t.Fatalf("due attempt %s, want CONFIRMED", r.Status)
	}
	r := readRow(t, ctx, pool, "t_fail", stuck.Key())
	f := readCheckFailure(t, ctx, pool, id)
	if r.Status != "IN_PROGRESS" || f.Failures != 1 || !strings.Contains(f.Error, "poisoned transition") ||
		r.NextCheck == nil || !r.NextCheck.Equal(clk.Now().Add(2*time.Second)) {
		t.Fatalf("stuck attempt: %+v %+v; want IN_PROGRESS, 1 failure, retry at +2s", r, f)
	}
	if got := metricWith(t, reg, "bookrecon_item_failures_total", map[string]string{"stage": "stale_sweep"}); got != 1 {
		t.Fatalf("stale_sweep failures = %v, want 1", got)
	}
	if n, err := rec.RunOnce(ctx); err != nil || n != 0 {
		t.Fatalf("before its retry: RunOnce = %d, %v; want 0", n, err)
	}
	if f := readCheckFailure(t, ctx, pool, id); f.Failures != 1 {
		t.Fatalf("swept again before its retry: %+v", f)
	}
	drop()
	clk.Set(*r.NextCheck)
	if _, err := rec.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if r := readRow(t, ctx, pool, "t_fail", stuck.Key()); r.Status == "IN_PROGRESS" || r.TimeoutClass != "stale" {
		t.Fatalf("after the fix: %s (class %q), want swept UNKNOWN (stale) and checked", r.Status, r.TimeoutClass)
	}
}

// TestCheckOutageIsNotTheAttemptsFailure: the reconciler's connections are terminated after the
// provider answered and before the verdict write: the round reports the outage and records no
// failure on any attempt; the attempt is checked again once its lease expires.
func TestCheckOutageIsNotTheAttemptsFailure(t *testing.T) {
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
	m := mapPath(t)
	scfg := storeConfig(m)
	now := time.Now().UTC()
	s := attemptSpec{Tenant: "t_fail", Intent: "bi_out", Provider: "sim-hotels", ClientRef: "cr_out", Traveller: "tr", Stay: hotelStay(80)}
	applyEvent(t, ctx, admin, scfg, s.Started(now))
	applyEvent(t, ctx, admin, scfg, s.Unknown(now, "read_timeout", ""))
	truth := simulator.Truth{"sim-hotels": {record("HTL-OUT", "cr_out", providers.StatusConfirmed, now.Add(-time.Hour), "")}}
	clk := newStepClock(time.Now().UTC().Truncate(time.Millisecond).Add(2 * time.Second))
	rec, reg := newReconciler(t, demoConfig(m), pool, startSim(t, newSim(truth, m, clk, 1, simulator.Faults{}), clk), clk)
	var kills atomic.Int64
	reconcile.SetBeforeWrite(rec, func(context.Context, *attempt.Row) {
		if kills.Add(1) != 1 {
			return
		}
		if _, err := admin.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> pg_backend_pid()`); err != nil {
			t.Errorf("terminate: %v", err)
		}
	})
	if _, err := rec.RunOnce(ctx); err == nil {
		t.Fatal("RunOnce during the outage reported no error")
	}
	if got := count(t, ctx, admin, `SELECT count(*) FROM booking_attempt WHERE check_failures > 0 OR check_error IS NOT NULL`); got != 0 {
		t.Fatalf("%d attempts recorded as failed by an outage, want 0", got)
	}
	if got := metricWith(t, reg, "bookrecon_item_failures_total", nil); got != 0 {
		t.Fatalf("item failures counted during an outage: %v", got)
	}
	clk.Add(time.Minute) // past the lease
	if n, err := rec.RunOnce(ctx); err != nil || n != 1 {
		t.Fatalf("after the outage: RunOnce = %d, %v; want 1", n, err)
	}
	if r := readRow(t, ctx, admin, s.Tenant, s.Key()); r.Status != "CONFIRMED" {
		t.Fatalf("after the outage: %s, want CONFIRMED", r.Status)
	}
}

// TestKeptDecisionFailingInTheSweep: a decision kept for an attempt stuck IN_PROGRESS fails to
// apply (its audit row refused) when the stale sweep turns the attempt UNKNOWN: the sweep
// commits, the decision is marked failed, counted (stage decision) and logged at error level.
func TestKeptDecisionFailingInTheSweep(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	m := mapPath(t)
	scfg := storeConfig(m)
	s := attemptSpec{Tenant: "t_fail", Intent: "bi_kept", Provider: "sim-hotels", ClientRef: "cr_kept", Traveller: "tr", Stay: hotelStay(90)}
	applyEvent(t, ctx, pool, scfg, s.Started(time.Now().UTC()))
	d, err := events.DecodeDecision(mustJSON(map[string]any{"specVersion": 1, "eventId": "dec_kept", "eventType": "decision.recorded",
		"occurredAt": time.Now().UTC().Format(time.RFC3339Nano), "tenantId": s.Tenant, "bookingIntentId": s.Intent,
		"idempotencyKey": s.Key(), "decision": "FAILED", "actor": "ops.1", "reason": "checked"}), events.DecodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := postgres.WithTx(ctx, pool, func(tx pgx.Tx) error {
		_, err := attempt.NewTx(tx, scfg).ApplyDecision(ctx, d)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	id := readRow(t, ctx, pool, s.Tenant, s.Key()).ID
	poisonTransitions(t, pool, id, "manual")
	clk := newStepClock(time.Now().UTC().Truncate(time.Millisecond).Add(2 * time.Minute))
	cfg := demoConfig(m)
	cfg.InProgressTimeout = time.Minute
	var logs bytes.Buffer
	reg := prometheus.NewRegistry()
	rec, err := reconcile.New(cfg, pool, startSim(t, newSim(simulator.Truth{}, m, clk, 1, simulator.Faults{}), clk),
		slog.New(slog.NewJSONHandler(&logs, nil)), reg, clk.Now)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rec.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	var failed int
	var reason string
	if err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE failed_at IS NOT NULL AND applied_at IS NULL), coalesce(max(failure_reason), '')
		FROM pending_decision`).Scan(&failed, &reason); err != nil {
		t.Fatal(err)
	}
	// The sweep's own transition committed (the same round then checked the attempt: not found).
	r := readRow(t, ctx, pool, s.Tenant, s.Key())
	tr := transitions(t, ctx, pool, id)
	if len(tr) < 2 || tr[1].From != "IN_PROGRESS" || tr[1].To != "UNKNOWN" || tr[1].Note != "stale_in_progress" || r.Source == "manual" ||
		failed != 1 || !strings.Contains(reason, "poisoned transition (SQLSTATE 23514)") {
		t.Fatalf("after the sweep: %s by %q, transitions %+v, %d failed decisions (%q); want the stale transition, not the decision, and the decision failed with the trigger's error",
			r.Status, r.Source, tr, failed, reason)
	}
	if got := metricWith(t, reg, "bookrecon_item_failures_total", map[string]string{"stage": "decision", "error_class": "integrity_constraint_violation"}); got != 1 {
		t.Fatalf("decision failures = %v, want 1", got)
	}
	if lines := errorLogs(t, &logs); len(lines) != 1 || lines[0]["decision_event_id"] != "dec_kept" || lines[0]["attempt_id"] != id.String() {
		t.Fatalf("error lines %v; want one naming the decision and its attempt", lines)
	}
}
