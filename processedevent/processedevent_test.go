package processedevent_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
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

// TestInsertManyEqualsInsert: InsertMany gives every event of a batch the outcome Insert gives
// it called once per event in slice order, and stores the same rows — first occurrences in the
// batch and again after it, redeliveries and collisions of stored events and of the batch's own,
// the same id on another day and for another tenant, an empty hash.
func TestInsertManyEqualsInsert(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	next := day.AddDate(0, 0, 1)
	ev := func(tenant, id string, at time.Time, hash string) processedevent.Event {
		return processedevent.Event{TenantID: tenant, EventID: id, OccurredAt: at, Hash: hash}
	}
	stored := []processedevent.Event{ev("t1", "s1", day, "h1"), ev("t1", "s2", day, "h2"), ev("t1", "s3", day, "")}
	batch := []processedevent.Event{
		ev("t1", "e1", day, "h1"), ev("t1", "e1", day.Add(time.Hour), "h1"), ev("t1", "e1", day, "hX"), // first, redelivery, collision
		ev("t1", "s1", day, "h1"), ev("t1", "s2", day, "hX"), ev("t1", "s3", day, ""), ev("t1", "s3", day, "h3"), // of stored events
		ev("t1", "e1", next, "h1"), ev("t2", "e1", day, "h1"), ev("t1", "e2", day, ""), ev("t1", "e2", day, ""), // other day, tenant; empty hash
		ev("t1", "e3", day, "h3"), ev("t1", "e3", day, "h4"), ev("t1", "e3", day, "h3"),
	}
	run := func(many bool) ([]processedevent.Outcome, []string) {
		pool := pgtest.NewPool(t)
		if err := processedevent.EnsurePartitions(ctx, pool, day, next); err != nil {
			t.Fatal(err)
		}
		s := processedevent.Store{Consumer: "g/t"}
		var got []processedevent.Outcome
		err := postgres.WithTx(ctx, pool, func(tx pgx.Tx) error {
			for _, e := range stored {
				if _, err := s.Insert(ctx, tx, e); err != nil {
					return err
				}
			}
			if many {
				var err error
				got, err = s.InsertMany(ctx, tx, batch)
				return err
			}
			for _, e := range batch {
				o, err := s.Insert(ctx, tx, e)
				if err != nil {
					return err
				}
				got = append(got, o)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		rows, err := pool.Query(ctx, `SELECT tenant_id || '/' || event_id || '/' || occurred_day || '/' || event_hash FROM processed_event ORDER BY 1`)
		if err != nil {
			t.Fatal(err)
		}
		rs, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return got, rs
	}
	want := []processedevent.Outcome{processedevent.Applied, processedevent.Duplicate, processedevent.Collision,
		processedevent.Duplicate, processedevent.Collision, processedevent.Duplicate, processedevent.Collision,
		processedevent.Applied, processedevent.Applied, processedevent.Applied, processedevent.Duplicate,
		processedevent.Applied, processedevent.Collision, processedevent.Duplicate}
	oneByOne, rowsOne := run(false)
	many, rowsMany := run(true)
	if !slices.Equal(oneByOne, want) {
		t.Fatalf("Insert one by one = %v, want %v", oneByOne, want)
	}
	if !slices.Equal(many, want) {
		t.Errorf("InsertMany = %v, want %v", many, want)
	}
	if len(rowsOne) != 8 || !slices.Equal(rowsMany, rowsOne) {
		t.Errorf("InsertMany stored %q, Insert %q (want 8 rows)", rowsMany, rowsOne)
	}
}

// BenchmarkInsertMany: one InsertMany of 2,000 new events (a batch's size), rolled back each
// time; the client's share shows in allocs/op.
func BenchmarkInsertMany(b *testing.B) {
	if testing.Short() {
		b.Skip("needs PostgreSQL")
	}
	pool := pgtest.NewPool(b)
	ctx := context.Background()
	if err := processedevent.EnsurePartitions(ctx, pool, day, day); err != nil {
		b.Fatal(err)
	}
	s := processedevent.Store{Consumer: "g/t"}
	evs := make([]processedevent.Event, 2000)
	for i := range evs {
		evs[i] = processedevent.Event{TenantID: "t1", EventID: fmt.Sprintf("ev_%06d", i), OccurredAt: day.Add(time.Duration(i) * time.Second), Hash: fmt.Sprintf("%064d", i)}
	}
	b.ReportAllocs()
	for b.Loop() {
		tx, err := pool.Begin(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := s.InsertMany(ctx, tx, evs); err != nil {
			b.Fatal(err)
		}
		if err := tx.Rollback(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
