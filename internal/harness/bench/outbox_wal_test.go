package bench

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bookrecon/bookrecon/internal/harness/kafkatest"
	"github.com/bookrecon/bookrecon/internal/harness/pgtest"
	"github.com/bookrecon/bookrecon/internal/outbox"
	"github.com/bookrecon/bookrecon/internal/postgres"
	"github.com/bookrecon/bookrecon/internal/relay"
)

// TestOutboxWAL measures, with the bench's pg_walinspect meter, the WAL that the outbox's own
// relations (the outbox, its indexes, outbox_fact; not the lease) take per row for 1,000
// resolution-shaped rows (a 449-byte value, CloudEvents headers): written in one InsertMany,
// then published by one relay round against an in-process broker. The relay's mark writes a
// small record per row, under 100 bytes without full-page images (it was a never-HOT UPDATE:
// ~1,370, a second copy of the row and new index entries); the insert stays under 1,300 bytes a
// row (it was ~1,430 with jsonb headers). docs/performance.md "Where the WAL goes".
func TestOutboxWAL(t *testing.T) {
	pgtest.SkipShort(t)
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewURL(t)
	const rows = 1000
	value := []byte(`{"specVersion":"1.0","eventType":"attempt.resolved",` + strings.Repeat("x", 449-64) + `"status":"CONFIRMED"}`)
	at := time.Date(2026, 12, 1, 15, 46, 46, 123456789, time.UTC)
	msgs := make([]outbox.Message, rows)
	for i := range msgs {
		id := fmt.Sprintf("0b8e0f5c-8f0e-5d55-a2a4-%012d", i)
		key := fmt.Sprintf("bi_%06d", i)
		msgs[i] = outbox.Message{Topic: "res", Key: []byte(key), Value: value, EventID: id,
			Headers: outbox.CloudEvent(id, "/bookrecon", "attempt.resolved", "tenant-a/book:"+key+":v1", key, at)}
	}
	cl := kafkatest.FakeClient(t, kafkatest.Fake(t, 1, "res"))

	// phase runs f on a pool of its own, closed before the meter stops (it waits for the
	// database's sessions to end), and returns the outbox relations' WAL per row without FPI.
	phase := func(what string, f func(pool *pgxpool.Pool) error) float64 {
		t.Helper()
		w := startWAL(t, ctx, url)
		pool, err := pgxpool.New(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		err = f(pool)
		pool.Close()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		res := w.stop(t, ctx)
		if res.byRecord == nil {
			t.Fatalf("%s: WAL not measured: %s", what, res.inspect)
		}
		var bytes int64
		var lines []string
		for _, r := range res.byRecord {
			if r.relation == "outbox" || r.relation == "outbox (TOAST)" || strings.HasPrefix(r.relation, "outbox_") && !strings.HasPrefix(r.relation, "outbox_lease") {
				bytes += r.bytes - r.fpi
				lines = append(lines, fmt.Sprintf("%s %s ×%d %.0f B/row", r.relation, r.record, r.count, float64(r.bytes-r.fpi)/rows))
			}
		}
		perRow := float64(bytes) / rows
		t.Logf("%s: %.0f B/row of WAL on the outbox's relations without FPI: %s", what, perRow, strings.Join(lines, "; "))
		return perRow
	}
	insert := phase("insert", func(pool *pgxpool.Pool) error {
		return postgres.WithTx(ctx, pool, func(tx pgx.Tx) error { return outbox.InsertMany(ctx, tx, msgs) })
	})
	mark := phase("publish", func(pool *pgxpool.Pool) error {
		rl := &relay.Relay{Pool: pool, Client: cl, Logger: slog.New(slog.DiscardHandler), Config: relay.Config{Batch: rows}}
		n, err := rl.RunOnce(ctx, rows)
		if err == nil && n != rows {
			err = fmt.Errorf("published %d rows, want %d", n, rows)
		}
		return err
	})
	if mark >= 100 {
		t.Errorf("the relay's mark wrote %.0f B/row of WAL on the outbox's relations, want < 100", mark)
	}
	if insert >= 1300 {
		t.Errorf("the insert wrote %.0f B/row of WAL on the outbox's relations, want < 1,300", insert)
	}
}
