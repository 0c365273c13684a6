package pgtest_test

import (
	"context"
	"net/url"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/bookrecon/bookrecon/internal/harness/pgtest"
)

// TestExampleDB: an Example's database is its own (never the server's default one, which a
// developer's runs use) and is gone after drop.
func TestExampleDB(t *testing.T) {
	t.Parallel()
	pgtest.SkipShort(t)
	ctx := context.Background()
	u, drop, err := pgtest.ExampleDB(ctx)
	if err != nil {
		t.Fatal(err)
	}
	parsed, _ := url.Parse(u)
	def, _ := url.Parse(pgtest.URL())
	name := strings.TrimPrefix(parsed.Path, "/")
	if !strings.HasPrefix(name, "bookrecon_example_") || parsed.Path == def.Path {
		t.Fatalf("example database %q, want bookrecon_example_… and not the default %q", name, def.Path)
	}
	c, err := pgx.Connect(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	c.Close(ctx)
	drop()
	admin, err := pgx.Connect(ctx, pgtest.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	var n int
	if err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_database WHERE datname = $1`, name).Scan(&n); err != nil || n != 0 {
		t.Fatalf("after drop: %d databases named %s (%v), want 0", n, name, err)
	}
}
