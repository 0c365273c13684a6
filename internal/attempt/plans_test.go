package attempt_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/bookrecon/bookrecon/internal/attempt"
	"github.com/bookrecon/bookrecon/internal/harness/pgtest"
)

// TestBatchReadsProbeIndexes: the batch's reads by key — the lanes' stored links
// (booking_attempt_links), who holds the batch's references (provider_reference_claim_owners)
// and the batch's attempts (booking_attempt_of_intents_or_keys) — probe the unique indexes key by key, never scan booking_attempt or the claims whole: with
// 2,000 keys against 20,000 analysed rows a hash join over a sequential scan is what the planner
// picks for the plain join, and its cost grows with the table, poll after poll.
func TestBatchReadsProbeIndexes(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	for _, q := range []string{
		`INSERT INTO booking_intent SELECT 't', 'i' || g FROM generate_series(1, 20000) g`,
		`INSERT INTO booking_attempt (id, tenant_id, booking_intent_id, operation, subject, operation_version,
			idempotency_key, provider, status, first_event_at, window_start)
		 SELECT gen_random_uuid(), 't', 'i' || g, 'BOOK', 'i' || g, 1, 'book:i' || g || ':v1', 'sim-hotels', 'CONFIRMED', now(), now()
		 FROM generate_series(1, 20000) g`,
		`INSERT INTO provider_reference_claim (provider, operation, reference, attempt_id, tenant_id)
		 SELECT provider, operation, 'HTL-' || booking_intent_id, id, tenant_id FROM booking_attempt`,
		`ANALYZE booking_intent, booking_attempt, provider_reference_claim, pending_decision`,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	n := 2000
	col := func(f func(i int) string) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = f(i)
		}
		return out
	}
	tenants, provs, ops := col(func(int) string { return "t" }), col(func(int) string { return "sim-hotels" }), col(func(int) string { return "BOOK" })
	keys := col(func(i int) string { return fmt.Sprintf("book:i%d:v1", 5*i+1) })
	intents := col(func(i int) string { return fmt.Sprintf("i%d", 5*i+1) })
	refs := col(func(i int) string { return fmt.Sprintf("HTL-i%d", 5*i+2) })
	for _, tc := range []struct {
		name string
		args []any
	}{
		{"booking_attempt_links", []any{tenants, keys, provs, ops, provs, ops, refs, []string{}, []string{}, []string{}, intents}},
		{"provider_reference_claim_owners", []any{provs, ops, refs}},
		{"booking_attempt_of_intents_or_keys", []any{tenants, intents, tenants, keys}},
	} {
		for _, generic := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/generic=%v", tc.name, generic), func(t *testing.T) {
				conn, err := pool.Acquire(ctx)
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Release()
				mode := "force_custom_plan"
				if generic {
					mode = "force_generic_plan"
				}
				if _, err := conn.Exec(ctx, "SET plan_cache_mode = "+mode); err != nil {
					t.Fatal(err)
				}
				defer func() { _, _ = conn.Exec(ctx, "RESET plan_cache_mode") }()
				rows, err := conn.Query(ctx, "EXPLAIN "+attempt.Statements.SQL(tc.name), tc.args...)
				if err != nil {
					t.Fatal(err)
				}
				plan, err := pgx.CollectRows(rows, pgx.RowTo[string])
				if err != nil {
					t.Fatal(err)
				}
				p := strings.Join(plan, "\n")
				for _, table := range []string{"booking_attempt", "provider_reference_claim"} {
					if strings.Contains(p, "Seq Scan on "+table+" ") {
						t.Fatalf("plan scans %s whole:\n%s", table, p)
					}
				}
			})
		}
	}
}
