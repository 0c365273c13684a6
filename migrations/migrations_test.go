package migrations_test

import (
	"context"
	"testing"

	"github.com/bookrecon/bookrecon/internal/pgtest"
	"github.com/bookrecon/bookrecon/migrations"
)

func TestUpIsIdempotentAndCreatesTables(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t) // already migrated once through the template
	ctx := context.Background()
	v, err := migrations.UpPool(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	if v != 1 {
		t.Fatalf("version = %d, want 1", v)
	}
	var n int
	err = pool.QueryRow(ctx, `SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'
		AND table_name IN ('processed_event','booking_intent','booking_attempt','attempt_transition',
		'anomaly','escalation','provider_reference_claim','pending_decision','outbox')`).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	if n != 9 {
		t.Fatalf("tables = %d, want 9", n)
	}
}
