package processedevent_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"github.com/bookrecon/bookrecon/internal/harness/pgtest"
	"github.com/bookrecon/bookrecon/internal/postgres"
	"github.com/bookrecon/bookrecon/migrations"
	"github.com/bookrecon/bookrecon/processedevent"
)

// TestMain skips Example under -short: it needs PostgreSQL, and an example cannot skip itself
// (pgtest.SkipShort needs a testing.TB), so it is added to -test.skip, saying so.
func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		fmt.Fprintln(os.Stderr, "processedevent: Example skipped under -short: it needs PostgreSQL (BOOKRECON_DATABASE_URL)")
		skip := "^Example$"
		if s := flag.Lookup("test.skip").Value.String(); s != "" {
			skip = s + "|" + skip
		}
		if err := flag.Set("test.skip", skip); err != nil {
			panic(err)
		}
	}
	goleak.VerifyTestMain(m)
}

// Insert-first dedup inside the caller's transaction: the first delivery applies, the
// redelivery of the identical record is a duplicate, a different record reusing the id is a
// collision.
func Example() {
	ctx := context.Background()
	dbURL, drop, err := pgtest.ExampleDB(ctx) // a database of its own; yours: BOOKRECON_DATABASE_URL
	if err != nil {
		fmt.Println(err)
		return
	}
	defer drop()
	pool, err := postgres.Open(ctx, dbURL, 2)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()
	if _, err := migrations.UpPool(ctx, pool); err != nil {
		fmt.Println(err)
		return
	}
	at := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	if err := processedevent.EnsurePartitions(ctx, pool, at); err != nil {
		fmt.Println(err)
		return
	}

	store := processedevent.Store{Consumer: "bookrecon-ingester/booking.attempts.v1"}
	for _, hash := range []string{"h1", "h1", "h2"} {
		err := postgres.WithTx(ctx, pool, func(tx pgx.Tx) error {
			o, err := store.Insert(ctx, tx, processedevent.Event{TenantID: "t_globetrek", EventID: "evt_0001", OccurredAt: at, Hash: hash})
			if err != nil {
				return err
			}
			fmt.Println(o) // apply the event's effects here when o == processedevent.Applied
			return nil
		})
		if err != nil {
			fmt.Println(err)
		}
	}
	// Output:
	// applied
	// duplicate
	// collision
}
