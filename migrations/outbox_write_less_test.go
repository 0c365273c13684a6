package migrations_test

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"

	"github.com/bookrecon/bookrecon/internal/harness/pgtest"
	"github.com/bookrecon/bookrecon/internal/outbox"
	"github.com/bookrecon/bookrecon/internal/postgres"
	"github.com/bookrecon/bookrecon/migrations"
)

// TestOutboxWriteLessUpAndDown runs migration 00008 over rows of the old shape and back: up, a
// published row leaves the outbox while its fact stays in outbox_fact with the pending and
// discarded rows' facts, and a pending row's jsonb headers read back through
// outbox.DecodeHeaders as they were; down, the headers of a row written in the compact
// encoding (codes, event_id and key references, literals) come back as jsonb, and a fact
// without a row comes back as a published row, so the old unique index still dedups it.
func TestOutboxWriteLessUpAndDown(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	p, err := goose.NewProvider(goose.DialectPostgres, db, migrations.FS())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.DownTo(ctx, 7); err != nil {
		t.Fatalf("down to 7: %v", err)
	}
	at := time.Date(2026, 12, 1, 15, 46, 46, 123456789, time.UTC)
	pending := outbox.CloudEvent("e1", "/bookrecon", "attempt.resolved", "t/book:bi_1:v1", "bi_1", at)
	pendingJSON, err := json.Marshal(pending)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO outbox (topic, record_key, value, headers, event_id, published_at, discarded_at, discard_reason) VALUES
		('res', 'bi_1', 'v1', $1, 'e1', NULL, NULL, NULL),
		('res', 'bi_2', 'v2', '[{"k": "ce_id", "v": "e2"}]', 'e2', now(), NULL, NULL),
		('dlq', NULL, NULL, '[]', 'a/0/3', NULL, now(), 'test')`, pendingJSON); err != nil {
		t.Fatal(err)
	}

	if _, err := p.UpTo(ctx, 8); err != nil {
		t.Fatalf("up to 8: %v", err)
	}
	if got := rowsOf(t, pool, `SELECT topic || '/' || event_id FROM outbox ORDER BY id`); !slices.Equal(got, []string{"res/e1", "dlq/a/0/3"}) {
		t.Errorf("outbox rows after up = %v, want the pending and the discarded one", got)
	}
	if got := rowsOf(t, pool, `SELECT topic || '/' || event_id FROM outbox_fact ORDER BY 1`); !slices.Equal(got, []string{"dlq/a/0/3", "res/e1", "res/e2"}) {
		t.Errorf("facts after up = %v, want all three", got)
	}
	var headers []byte
	if err := pool.QueryRow(ctx, `SELECT headers FROM outbox WHERE event_id = 'e1'`).Scan(&headers); err != nil {
		t.Fatal(err)
	}
	if hs, err := outbox.DecodeHeaders(headers, "e1", []byte("bi_1")); err != nil || !slices.Equal(hs, pending) {
		t.Errorf("converted headers = %q, %v; want %q", hs, err, pending)
	}

	written := outbox.CloudEvent("e4", "/elsewhere", "escalation.opened", "t/refund:p_9:v2", "bi_4", at)
	written = append(written, outbox.Header{Key: "x-note", Value: "é"})
	if err := postgres.WithTx(ctx, pool, func(tx pgx.Tx) error {
		return outbox.Insert(ctx, tx, outbox.Message{Topic: "esc", Key: []byte("bi_4"), Value: []byte("v4"), EventID: "e4", Headers: written})
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `DELETE FROM outbox WHERE event_id = 'e1'`); err != nil { // published by the relay
		t.Fatal(err)
	}
	if _, err := p.DownTo(ctx, 7); err != nil {
		t.Fatalf("down to 7 again: %v", err)
	}
	var back []outbox.Header
	var raw []byte
	if err := pool.QueryRow(ctx, `SELECT headers FROM outbox WHERE event_id = 'e4'`).Scan(&raw); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &back); err != nil || !slices.Equal(back, written) {
		t.Errorf("headers after down = %s (%v), want %q", raw, err, written)
	}
	if got := rowsOf(t, pool, `SELECT topic || '/' || event_id || ' ' || (published_at IS NOT NULL)::text FROM outbox ORDER BY 1`); !slices.Equal(got,
		[]string{"dlq/a/0/3 false", "esc/e4 false", "res/e1 true", "res/e2 true"}) {
		t.Errorf("outbox rows after down = %v", got)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO outbox (topic, value, event_id) VALUES ('res', 'v', 'e2') ON CONFLICT (topic, event_id) DO NOTHING`); err != nil {
		t.Errorf("the old unique index after down: %v", err)
	}
	if _, err := p.UpTo(ctx, 8); err != nil {
		t.Fatalf("up to 8 again: %v", err)
	}
}

func rowsOf(t *testing.T, pool interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, q string) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(), q)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return out
}
