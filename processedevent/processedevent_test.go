package processedevent_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/bookrecon/bookrecon/internal/harness/pgtest"
	"github.com/bookrecon/bookrecon/internal/postgres"
	"github.com/bookrecon/bookrecon/processedevent"
)

var day = time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)

func TestInsertOutcomes(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	if err := processedevent.EnsurePartitions(ctx, pool, day, day); err != nil {
		t.Fatal(err)
	}
	s := processedevent.Store{Consumer: "g/t"}
	cases := []struct {
		name string
		ev   processedevent.Event
		want processedevent.Outcome
	}{
		{"first", processedevent.Event{TenantID: "t1", EventID: "e1", OccurredAt: day, Hash: "h1"}, processedevent.Applied},
		{"redelivery", processedevent.Event{TenantID: "t1", EventID: "e1", OccurredAt: day, Hash: "h1"}, processedevent.Duplicate},
		{"collision", processedevent.Event{TenantID: "t1", EventID: "e1", OccurredAt: day, Hash: "h2"}, processedevent.Collision},
		{"other tenant", processedevent.Event{TenantID: "t2", EventID: "e1", OccurredAt: day, Hash: "h1"}, processedevent.Applied},
		{"other consumer scope", processedevent.Event{TenantID: "t1", EventID: "e2", OccurredAt: day, Hash: "h1"}, processedevent.Applied},
	}
	for _, c := range cases {
		var got processedevent.Outcome
		err := postgres.WithTx(ctx, pool, func(tx pgx.Tx) error {
			var err error
			got, err = s.Insert(ctx, tx, c.ev)
			return err
		})
		if err != nil || got != c.want {
			t.Fatalf("%s: got %v, %v; want %v", c.name, got, err, c.want)
		}
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM processed_event`).Scan(&n); err != nil || n != 3 {
		t.Fatalf("rows = %d, %v; want 3", n, err)
	}
}

// TestConcurrentInsertExactlyOneApplies: the same eventId applied by two concurrent
// transactions — exactly one sees Applied; the other blocks on the unique key and then sees
// Duplicate once the first commits.
func TestConcurrentInsertExactlyOneApplies(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	if err := processedevent.EnsurePartitions(ctx, pool, day); err != nil {
		t.Fatal(err)
	}
	s := processedevent.Store{Consumer: "g/t"}
	for round := range 20 {
		ev := processedevent.Event{TenantID: "t", EventID: "e" + string(rune('a'+round)), OccurredAt: day, Hash: "h"}
		var wg sync.WaitGroup
		results := make([]processedevent.Outcome, 2)
		start := make(chan struct{})
		for i := range 2 {
			wg.Go(func() {
				<-start
				_ = postgres.WithTx(ctx, pool, func(tx pgx.Tx) error {
					o, err := s.Insert(ctx, tx, ev)
					results[i] = o
					return err
				})
			})
		}
		close(start)
		wg.Wait()
		applied := 0
		for _, r := range results {
			if r == processedevent.Applied {
				applied++
			} else if r != processedevent.Duplicate {
				t.Fatalf("round %d: outcome %v", round, r)
			}
		}
		if applied != 1 {
			t.Fatalf("round %d: %d transactions applied, want exactly 1", round, applied)
		}
	}
}

func TestPartitionsRetention(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	if _, err := processedevent.OldestDay(ctx, pool); !errors.Is(err, processedevent.ErrNoPartition) {
		t.Fatalf("OldestDay on empty = %v, want ErrNoPartition", err)
	}
	var days []time.Time
	for i := range 5 {
		days = append(days, day.AddDate(0, 0, i))
	}
	if err := processedevent.EnsurePartitions(ctx, pool, days...); err != nil {
		t.Fatal(err)
	}
	dropped, err := processedevent.DropBefore(ctx, pool, day.AddDate(0, 0, 2))
	if err != nil || len(dropped) != 2 {
		t.Fatalf("dropped %v, %v; want 2 days", dropped, err)
	}
	oldest, err := processedevent.OldestDay(ctx, pool)
	if err != nil || !oldest.Equal(processedevent.Day(day.AddDate(0, 0, 2))) {
		t.Fatalf("oldest = %v, %v", oldest, err)
	}
}

// TestStatementsPrepare prepares every statement of sql/processed_event.sql.
func TestStatementsPrepare(t *testing.T) {
	t.Parallel()
	pgtest.PrepareStatements(t, processedevent.Statements)
}
