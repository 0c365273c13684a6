package pgtest_test

import (
	"context"
	"testing"

	"github.com/bookrecon/bookrecon/internal/harness/pgtest"
	"github.com/bookrecon/bookrecon/internal/postgres"
)

// TestOwnCluster: a cluster of the test's own takes the role bookrecon on 127.0.0.1 and a
// migrated database; a committed row survives an immediate stop (a crash) and the start's
// recovery; while it is down, connections are refused.
func TestOwnCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("creates a PostgreSQL cluster")
	}
	t.Parallel()
	c := pgtest.OwnCluster(t)
	ctx := context.Background()
	u := c.NewDatabase(t)
	pool, err := postgres.Open(ctx, u, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, `INSERT INTO booking_intent VALUES ('t', 'bi_1')`); err != nil {
		t.Fatal(err)
	}
	if err := c.Stop(true); err != nil {
		t.Fatal(err)
	}
	if err := pool.Ping(ctx); err == nil {
		t.Fatal("ping after an immediate stop succeeded")
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM booking_intent`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("after the restart: %d rows, %v; want the committed row", n, err)
	}
}
