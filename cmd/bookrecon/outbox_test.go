package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/alecthomas/kong"

	"github.com/bookrecon/bookrecon/internal/harness/pgtest"
	"github.com/bookrecon/bookrecon/internal/outbox"
)

// TestOutboxCommands: list shows exactly the set-aside rows (not the pending or discarded ones,
// nor a published fact, whose row has left the outbox), retry releases one and refuses a row that is not set aside with what to do,
// discard keeps its reason; a blank reason or a limit below 1 is a usage error.
func TestOutboxCommands(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	_, err := pool.Exec(ctx, `INSERT INTO outbox (id, topic, record_key, value, event_id, set_aside_at, publish_failures, error_class, last_error, discarded_at, discard_reason) VALUES
		(1, 'dlq', 'k', 'vvvv', 'a/0/1', $1::timestamptz, 1, 'record_too_large', 'MESSAGE_TOO_LARGE: big', NULL, NULL),
		(2, 'dlq', 'k', 'v', 'a/0/2', NULL, 0, NULL, NULL, NULL, NULL),
		(4, 'res', 'k4', 'v', 'e4', $1::timestamptz, 2, 'invalid_record', 'INVALID_RECORD: x', NULL, NULL),
		(5, 'res', 'k5', 'v', 'e5', $1::timestamptz, 1, 'invalid_record', 'INVALID_RECORD: y', $1::timestamptz, 'old')`, opsNow.Add(-90e9))
	if err != nil {
		t.Fatal(err)
	}
	// e3 was published: its fact is kept, its row is gone.
	if _, err := pool.Exec(ctx, `INSERT INTO outbox_fact (topic, event_id) VALUES ('dlq', 'a/0/1'), ('dlq', 'a/0/2'), ('res', 'e3'), ('res', 'e4'), ('res', 'e5')`); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := (&outboxListCmd{Limit: 100}).run(ctx, pool, &out, opsNow); err != nil {
		t.Fatal(err)
	}
	want := "ID  TOPIC  EVENT ID  BYTES  FAILURES  ERROR CLASS       SET ASIDE  LAST ERROR\n" +
		"1   dlq    a/0/1     5      1         record_too_large  1m30s ago  MESSAGE_TOO_LARGE: big\n" +
		"4   res    e4        3      2         invalid_record    1m30s ago  INVALID_RECORD: x\n" +
		"2 rows set aside\n"
	if out.String() != want {
		t.Errorf("list:\n%s\nwant:\n%s", out.String(), want)
	}
	out.Reset()
	if err := (&outboxListCmd{Limit: 1, outputFlags: outputFlags{JSON: true}}).run(ctx, pool, &out, opsNow); err != nil {
		t.Fatal(err)
	}
	var rows []outbox.SetAsideRow
	if err := json.Unmarshal(out.Bytes(), &rows); err != nil || len(rows) != 1 || rows[0].ID != 1 || rows[0].ErrorClass != outbox.ClassRecordTooLarge {
		t.Errorf("list --json --limit 1 = %s (%v), want row 1", out.String(), err)
	}

	out.Reset()
	err = (&outboxRetryCmd{IDs: []int64{1, 2}}).run(ctx, pool, &out)
	if err == nil || err.Error() != "outbox: no such set-aside row: 2 (bookrecon outbox list shows the rows set aside)" {
		t.Errorf("retry 1 2 = %v, want row 2 refused with the hint", err)
	}
	if out.String() != "row 1 released: the relay publishes it on its next round\n" {
		t.Errorf("retry output %q", out.String())
	}
	out.Reset()
	if err := (&outboxDiscardCmd{ID: 4, Reason: " replaced by e6 (OPS-42) "}).run(ctx, pool, &out); err != nil {
		t.Fatal(err)
	}
	var aside, discarded int
	_ = pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE set_aside_at IS NOT NULL AND discarded_at IS NULL),
		count(*) FILTER (WHERE id = 4 AND discard_reason = 'replaced by e6 (OPS-42)') FROM outbox`).Scan(&aside, &discarded)
	if aside != 0 || discarded != 1 {
		t.Errorf("after retry and discard: %d set aside, row 4 discarded with its reason %d; want 0, 1", aside, discarded)
	}

	for _, args := range [][]string{{"outbox", "discard", "4", "--reason", "  "}, {"outbox", "list", "--limit", "0"}, {"outbox", "discard", "4"}} {
		var c cli
		p, err := kong.New(&c, kong.Name("bookrecon"), kong.Exit(func(int) {}))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.Parse(args); err == nil || !strings.Contains(err.Error(), "reason") && !strings.Contains(err.Error(), "limit") {
			t.Errorf("%v: parse error %v, want a usage error naming the flag", args, err)
		}
	}
}
