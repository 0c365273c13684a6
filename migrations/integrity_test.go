package migrations_test

import (
	"context"
	"slices"
	"strconv"
	"testing"

	"github.com/bookrecon/bookrecon/internal/harness/pgtest"
	"github.com/bookrecon/bookrecon/migrations"
)

func TestIntegrityStatementsPrepare(t *testing.T) {
	t.Parallel()
	pgtest.PrepareStatements(t, migrations.IntegrityStatements)
}

// TestOrphans: each kind of row the dropped foreign keys refused is named, in the statement's
// order, and the limit holds; a healthy database has none. The rows are removed again so the
// database passes pgtest's own check at cleanup.
func TestOrphans(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	got, err := migrations.Orphans(ctx, pool, 10)
	if err != nil || len(got) != 0 {
		t.Fatalf("fresh database: orphans %q, %v; want none", got, err)
	}
	for _, q := range []string{
		`INSERT INTO booking_intent (tenant_id, booking_intent_id) VALUES ('t1', 'i1')`,
		`INSERT INTO booking_attempt (id, tenant_id, booking_intent_id, operation, subject, operation_version,
			idempotency_key, provider, status, first_event_at, window_start)
		 VALUES ('00000000-0000-7000-8000-000000000001', 't1', 'i1', 'BOOK', 's', 1, 'k1', 'p', 'IN_PROGRESS', now(), now()),
		        ('00000000-0000-7000-8000-000000000002', 't1', 'gone', 'BOOK', 's', 1, 'k2', 'p', 'IN_PROGRESS', now(), now())`,
		`INSERT INTO attempt_transition (attempt_id, to_status, cause) VALUES
			('00000000-0000-7000-8000-000000000001', 'IN_PROGRESS', 'event'),
			('00000000-0000-7000-8000-0000000000ff', 'IN_PROGRESS', 'event')`,
		`INSERT INTO provider_reference_claim (provider, operation, reference, attempt_id, tenant_id) VALUES
			('p', 'BOOK', 'ok', '00000000-0000-7000-8000-000000000001', 't1'),
			('p', 'BOOK', 'r9', '00000000-0000-7000-8000-0000000000ee', 't1')`,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	var audit int64
	if err := pool.QueryRow(ctx, `SELECT id FROM attempt_transition WHERE attempt_id = '00000000-0000-7000-8000-0000000000ff'`).Scan(&audit); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"attempt_transition " + itoa(audit) + " names attempt 00000000-0000-7000-8000-0000000000ff, which does not exist",
		"provider_reference_claim p/BOOK/r9 names attempt 00000000-0000-7000-8000-0000000000ee, which does not exist",
		"booking_attempt 00000000-0000-7000-8000-000000000002 names intent t1/gone, which does not exist",
	}
	got, err = migrations.Orphans(ctx, pool, 10)
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("orphans = %q, %v\nwant %q", got, err, want)
	}
	if got, err = migrations.Orphans(ctx, pool, 2); err != nil || !slices.Equal(got, want[:2]) {
		t.Fatalf("orphans, limit 2 = %q, %v; want %q", got, err, want[:2])
	}
	for _, q := range []string{
		`DELETE FROM attempt_transition WHERE attempt_id = '00000000-0000-7000-8000-0000000000ff'`,
		`DELETE FROM provider_reference_claim WHERE reference = 'r9'`,
		`INSERT INTO booking_intent (tenant_id, booking_intent_id) VALUES ('t1', 'gone')`,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if got, err = migrations.Orphans(ctx, pool, 10); err != nil || len(got) != 0 {
		t.Fatalf("repaired: orphans %q, %v; want none", got, err)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
