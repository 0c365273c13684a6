package migrations_test

import (
	"context"
	"io/fs"
	"strconv"
	"strings"
	"testing"

	"github.com/bookrecon/bookrecon/internal/harness/pgtest"
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
	if want := newest(t); v != want {
		t.Fatalf("version = %d, want %d (the newest file)", v, want)
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

// newest is the version of the newest migration file (sql/NNNNN_name.sql).
func newest(t *testing.T) int64 {
	t.Helper()
	names, err := fs.Glob(migrations.FS(), "*.sql")
	if err != nil || len(names) == 0 {
		t.Fatalf("migration files: %v %v", names, err)
	}
	var top int64
	for _, n := range names {
		v, err := strconv.ParseInt(strings.SplitN(n, "_", 2)[0], 10, 64)
		if err != nil {
			t.Fatalf("%s: %v", n, err)
		}
		top = max(top, v)
	}
	return top
}
