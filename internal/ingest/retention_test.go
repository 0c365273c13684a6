package ingest

import (
	"context"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/bookrecon/bookrecon/internal/harness/pgtest"
	"github.com/bookrecon/bookrecon/processedevent"
)

// TestPartitionsRunOnce runs the partition maintenance loop's runOnce on its own: with a
// retention of 3 days it keeps [today − 3, today + 2] — 6 daily partitions — drops the older
// ones whole, and moves the stale_event bound to today − 3; a second run the same day changes
// nothing; the next day it drops one partition, adds one, and the bound moves a day on. A batch
// then creates only the partitions it lacks.
func TestPartitionsRunOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	day := time.Date(2031, 3, 10, 0, 0, 0, 0, time.UTC)
	if err := processedevent.EnsurePartitions(ctx, pool, day.AddDate(0, 0, -10), day.AddDate(0, 0, -4), day); err != nil {
		t.Fatal(err)
	}
	p := newPartitions(pool, slog.New(slog.DiscardHandler), 3)
	p.now = func() time.Time { return day.Add(15 * time.Hour) }
	span := func(from, to int) []time.Time {
		var days []time.Time
		for d := from; d <= to; d++ {
			days = append(days, day.AddDate(0, 0, d))
		}
		return days
	}
	check := func(step string, want maintained, days []time.Time) {
		t.Helper()
		got, err := p.runOnce(ctx)
		if err != nil {
			t.Fatalf("%s: runOnce: %v", step, err)
		}
		if got != want {
			t.Errorf("%s: runOnce = %+v, want %+v", step, got, want)
		}
		kept, err := processedevent.Days(ctx, pool)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(kept, days) {
			t.Errorf("%s: partitions %v, want %v", step, kept, days)
		}
		if b := p.minOccurred(); !b.Equal(days[0]) {
			t.Errorf("%s: stale_event bound %s, want %s", step, b, days[0])
		}
		for _, d := range days {
			if !p.known[d] {
				t.Errorf("%s: day %s not known after runOnce", step, d.Format(time.DateOnly))
			}
		}
	}
	check("first run", maintained{kept: 6, dropped: 2, oldest: day.AddDate(0, 0, -3)}, span(-3, 2))
	check("same day", maintained{kept: 6, dropped: 0, oldest: day.AddDate(0, 0, -3)}, span(-3, 2))
	day = day.AddDate(0, 0, 1)
	check("next day", maintained{kept: 6, dropped: 1, oldest: day.AddDate(0, 0, -3)}, span(-3, 2))

	// A batch with an event 5 days ahead creates that day's partition alone.
	ahead := day.AddDate(0, 0, 5)
	if err := p.ensure(ctx, map[time.Time]bool{day: true, ahead: true}); err != nil {
		t.Fatal(err)
	}
	kept, err := processedevent.Days(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	if want := append(span(-3, 2), ahead); !slices.Equal(kept, want) {
		t.Errorf("after ensure: partitions %v, want %v", kept, want)
	}
}
