package escalate_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bookrecon/bookrecon/internal/escalate"
	"github.com/bookrecon/bookrecon/internal/harness/pgtest"
	"github.com/bookrecon/bookrecon/providers"
)

const capMap = `providers:
  sim-hotels:
    lookups: [provider_reference, client_reference]
    deadline: 30s
    deadlineByOperation: {PAYMENT_CAPTURE: 2m}
`

func mapOf(t *testing.T) *providers.Map {
	m, err := providers.ParseMap([]byte(capMap))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// seed inserts n UNKNOWN BOOK attempts at sim-hotels, recorded UNKNOWN age ago on the database
// clock, and returns their ids.
func seed(t *testing.T, pool *pgxpool.Pool, prefix string, n int, age string, op string) []uuid.UUID {
	t.Helper()
	ctx := context.Background()
	_, err := pool.Exec(ctx, `INSERT INTO booking_intent (tenant_id, booking_intent_id)
		SELECT 't', $1 || g FROM generate_series(1, $2) g`, prefix, n)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := pool.Query(ctx, `INSERT INTO booking_attempt (id, tenant_id, booking_intent_id, operation, subject, operation_version,
			idempotency_key, provider, status, client_reference, first_event_at, window_start, unknown_since, next_check_at)
		SELECT gen_random_uuid(), 't', $1 || g, $4, $1 || g, 1, 'x:' || $1 || g || ':v1', 'sim-hotels', 'UNKNOWN', 'cr',
			now(), now(), now() - $3::interval, now() + interval '1 hour'
		FROM generate_series(1, $2) g RETURNING id`, prefix, n, age, op)
	if err != nil {
		t.Fatal(err)
	}
	var ids []uuid.UUID
	for rows.Next() {
		var id uuid.UUID
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	return ids
}

func count(t *testing.T, pool *pgxpool.Pool, q string, args ...any) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), q, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestDeadlineExactlyAtDeadline: an attempt UNKNOWN for 29s (deadline 30s) is not escalated; at
// 31s it is, once; a capture, with its 2m per-operation deadline, is not.
func TestDeadlineExactlyAtDeadline(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	e, err := escalate.New(escalate.Config{Providers: mapOf(t)}, pool, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ids := seed(t, pool, "young", 1, "29 seconds", "BOOK")
	seed(t, pool, "capture", 1, "90 seconds", "PAYMENT_CAPTURE")
	if n, err := e.RunOnce(ctx); err != nil || n != 0 {
		t.Fatalf("RunOnce before the deadline = %d, %v; want 0", n, err)
	}
	if _, err := pool.Exec(ctx, `UPDATE booking_attempt SET unknown_since = now() - interval '31 seconds' WHERE id = $1`, ids[0]); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := e.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := count(t, pool, `SELECT count(*) FROM escalation WHERE reason = 'deadline_exceeded'`); n != 1 {
		t.Fatalf("deadline escalations = %d, want 1", n)
	}
	if n := count(t, pool, `SELECT count(*) FROM outbox WHERE convert_from(value, 'UTF8')::jsonb->>'eventType' = 'escalation.opened'`); n != 1 {
		t.Fatalf("escalation.opened rows = %d, want 1", n)
	}
}

// TestHeldBackByOpenOutcomeEscalation: an open ambiguous_match or no_lookup_capability holds
// deadline_exceeded back.
func TestHeldBackByOpenOutcomeEscalation(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	ids := seed(t, pool, "held", 2, "5 minutes", "BOOK")
	for i, r := range []string{"ambiguous_match", "no_lookup_capability"} {
		if _, err := pool.Exec(ctx, `INSERT INTO escalation (escalation_id, attempt_id, tenant_id, reason) VALUES (gen_random_uuid(), $1, 't', $2)`, ids[i], r); err != nil {
			t.Fatal(err)
		}
	}
	e, err := escalate.New(escalate.Config{Providers: mapOf(t)}, pool, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := e.RunOnce(ctx); err != nil || n != 0 {
		t.Fatalf("RunOnce = %d, %v; want 0", n, err)
	}
	if n := count(t, pool, `SELECT count(*) FROM booking_attempt WHERE deadline_done`); n != 2 {
		t.Fatalf("judged = %d, want 2 (out of the scan from now on)", n)
	}
}

// TestTwoEscalatorsOneKilled: two escalators over 2,000 aged attempts (and 200 that are not due), one
// of them killed mid-run (its context cancelled inside a transaction): every eligible attempt
// is escalated exactly once, published once, and none early.
func TestTwoEscalatorsOneKilled(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	seed(t, pool, "aged", 2000, "45 seconds", "BOOK")
	seed(t, pool, "young", 200, "-1 hour", "BOOK") // recorded in the future: never due during the test
	m := mapOf(t)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	victimCtx, kill := context.WithCancel(ctx)
	var victimCommits atomic.Int64
	victim, err := escalate.New(escalate.Config{Providers: m, Batch: 50}, pool, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	escalate.SetBeforeCommit(victim, func(context.Context, uuid.UUID) {
		if victimCommits.Add(1) == 300 {
			kill() // dies inside its 300th escalation's transaction
		}
	})
	survivor, err := escalate.New(escalate.Config{Providers: m, Batch: 50}, pool, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for victimCtx.Err() == nil {
			if _, err := victim.RunOnce(victimCtx); err != nil && !errors.Is(err, context.Canceled) && victimCtx.Err() == nil {
				t.Errorf("victim: %v", err)
			}
		}
	})
	wg.Go(func() {
		for {
			n, err := survivor.RunOnce(ctx)
			if err != nil {
				t.Errorf("survivor: %v", err)
				return
			}
			if n == 0 && count(t, pool, `SELECT count(*) FROM booking_attempt WHERE NOT deadline_done AND unknown_since < now() - interval '30 seconds'`) == 0 {
				return
			}
		}
	})
	wg.Wait()
	if victimCommits.Load() < 300 {
		t.Fatalf("the victim reached %d escalations; it must die mid-run", victimCommits.Load())
	}
	for _, c := range []struct {
		what string
		q    string
		want int
	}{
		{"deadline escalations", `SELECT count(*) FROM escalation WHERE reason = 'deadline_exceeded'`, 2000},
		{"distinct escalated attempts", `SELECT count(DISTINCT attempt_id) FROM escalation`, 2000},
		{"young escalated", `SELECT count(*) FROM escalation e JOIN booking_attempt a ON a.id = e.attempt_id WHERE a.booking_intent_id LIKE 'young%'`, 0},
		{"escalation.opened outbox rows", `SELECT count(*) FROM outbox WHERE convert_from(value, 'UTF8')::jsonb->>'eventType' = 'escalation.opened' AND convert_from(value, 'UTF8')::jsonb->>'reason' = 'deadline_exceeded'`, 2000},
		{"distinct escalation ids published", `SELECT count(DISTINCT convert_from(value, 'UTF8')::jsonb->>'escalationId') FROM outbox`, 2000},
	} {
		if got := count(t, pool, c.q); got != c.want {
			t.Errorf("%s = %d, want %d", c.what, got, c.want)
		}
	}
}
