package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/bookrecon/bookrecon/internal/harness/pgtest"
	"github.com/bookrecon/bookrecon/internal/outbox"
	"github.com/bookrecon/bookrecon/internal/postgres"
)

// TestWriterAndSetAsideTooling runs the writer without a broker: Insert and InsertMany write a
// (topic, eventId) once however often it is written, InsertMany in slice order; Backlog and
// CountSetAside count the pending and set-aside rows; SetAside lists a set-aside row with its
// error; Retry releases it once, Discard needs a reason and gives a row up for good, and both
// refuse a row that is not set aside (ErrNotSetAside).
func TestWriterAndSetAsideTooling(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	m := func(topic, id string) outbox.Message {
		return outbox.Message{Topic: topic, Key: []byte("k"), Value: []byte(id), EventID: id, Headers: []outbox.Header{{Key: "ce_id", Value: id}}}
	}
	err := postgres.WithTx(ctx, pool, func(tx pgx.Tx) error {
		for _, x := range []outbox.Message{m("a", "e1"), m("a", "e1"), m("b", "e1")} {
			if err := outbox.Insert(ctx, tx, x); err != nil {
				return err
			}
		}
		return outbox.InsertMany(ctx, tx, []outbox.Message{m("a", "e3"), m("a", "e2"), m("a", "e1"), m("a", "e3")})
	})
	if err != nil {
		t.Fatal(err)
	}
	rows, err := pool.Query(ctx, `SELECT topic || '/' || event_id FROM outbox ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"a/e1", "b/e1", "a/e3", "a/e2"}; !slices.Equal(got, want) {
		t.Fatalf("outbox rows in id order = %v, want %v", got, want)
	}
	if n, age, err := outbox.Backlog(ctx, pool); err != nil || n != 4 || age < 0 {
		t.Fatalf("Backlog = %d, %v, %v; want 4 rows and an age ≥ 0", n, age, err)
	}
	if n, err := outbox.CountSetAside(ctx, pool); err != nil || n != 0 {
		t.Fatalf("CountSetAside = %d, %v; want 0", n, err)
	}

	// The relay sets rows aside (internal/relay); here by hand: a/e3 and a/e2.
	if _, err := pool.Exec(ctx, `UPDATE outbox SET set_aside_at = now(), publish_failures = 1, error_class = 'record_too_large',
		last_error = 'MESSAGE_TOO_LARGE' WHERE topic = 'a' AND event_id IN ('e3', 'e2')`); err != nil {
		t.Fatal(err)
	}
	aside, err := outbox.SetAside(ctx, pool, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(aside) != 2 || aside[0].EventID != "e3" || aside[1].EventID != "e2" {
		t.Fatalf("SetAside = %+v, want e3 then e2", aside)
	}
	if a := aside[0]; a.Topic != "a" || a.Failures != 1 || a.ErrorClass != outbox.ClassRecordTooLarge || a.LastError != "MESSAGE_TOO_LARGE" ||
		a.Bytes != len("k")+len("e3")+len("ce_id")+len("e3") || a.SetAsideAt.IsZero() {
		t.Errorf("SetAside[0] = %+v, want topic a, 1 failure, record_too_large, MESSAGE_TOO_LARGE, 10 bytes (the record's key, value and header), a time", a)
	}
	if n, err := outbox.CountSetAside(ctx, pool); err != nil || n != 2 {
		t.Fatalf("CountSetAside = %d, %v; want 2", n, err)
	}

	if err := outbox.Retry(ctx, pool, aside[0].ID); err != nil {
		t.Fatalf("Retry = %v", err)
	}
	if err := outbox.Retry(ctx, pool, aside[0].ID); !errors.Is(err, outbox.ErrNotSetAside) {
		t.Errorf("second Retry = %v, want ErrNotSetAside", err)
	}
	if err := outbox.Discard(ctx, pool, aside[1].ID, ""); err == nil || errors.Is(err, outbox.ErrNotSetAside) {
		t.Errorf("Discard without a reason = %v, want the reason required", err)
	}
	if err := outbox.Discard(ctx, pool, aside[1].ID, "replaced (ops ticket 7)"); err != nil {
		t.Fatalf("Discard = %v", err)
	}
	if err := outbox.Discard(ctx, pool, aside[1].ID, "again"); !errors.Is(err, outbox.ErrNotSetAside) {
		t.Errorf("second Discard = %v, want ErrNotSetAside", err)
	}
	if n, err := outbox.CountSetAside(ctx, pool); err != nil || n != 0 {
		t.Errorf("CountSetAside after Retry and Discard = %d, %v; want 0", n, err)
	}
	if n, _, err := outbox.Backlog(ctx, pool); err != nil || n != 3 {
		t.Errorf("Backlog after the discard = %d, %v; want 3", n, err)
	}
}

// TestInsertManyKeepsFirstOfEachFact: InsertMany writes, in slice order, the first row of each
// (topic, eventId) — its key, value and headers, not a later repeat's — both when every fact is
// new (all copied) and when some were recorded before (only the new ones copied); a nil key or
// value is stored as NULL and an empty value as empty.
func TestInsertManyKeepsFirstOfEachFact(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	m := func(topic, id, value string) outbox.Message {
		return outbox.Message{Topic: topic, Key: []byte("k-" + value), Value: []byte(value), EventID: id,
			Headers: []outbox.Header{{Key: "ce_id", Value: id}, {Key: "x", Value: value}}}
	}
	write := func(msgs ...outbox.Message) {
		t.Helper()
		if err := postgres.WithTx(ctx, pool, func(tx pgx.Tx) error { return outbox.InsertMany(ctx, tx, msgs) }); err != nil {
			t.Fatal(err)
		}
	}
	write(m("a", "e2", "first e2"), m("a", "e1", "first e1"), m("a", "e2", "second e2"), m("b", "e2", "b e2"))
	write(m("a", "e1", "again e1"), m("a", "e4", "first e4"), m("b", "e2", "again b e2"), m("a", "e3", "first e3"), m("a", "e4", "second e4"),
		outbox.Message{Topic: "c", EventID: "nil"}, outbox.Message{Topic: "c", EventID: "empty", Value: []byte{}})
	rows, err := pool.Query(ctx, `SELECT topic, event_id, record_key, value, headers FROM outbox ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for rows.Next() {
		var topic, id string
		var key, value, headers []byte
		if err := rows.Scan(&topic, &id, &key, &value, &headers); err != nil {
			t.Fatal(err)
		}
		hs, err := outbox.DecodeHeaders(headers, id, key)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%s/%s key %q (nil %t) value %q (nil %t) %v", topic, id, key, key == nil, value, value == nil, hs))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	want := []string{
		`a/e2 key "k-first e2" (nil false) value "first e2" (nil false) [{ce_id e2} {x first e2}]`,
		`a/e1 key "k-first e1" (nil false) value "first e1" (nil false) [{ce_id e1} {x first e1}]`,
		`b/e2 key "k-b e2" (nil false) value "b e2" (nil false) [{ce_id e2} {x b e2}]`,
		`a/e4 key "k-first e4" (nil false) value "first e4" (nil false) [{ce_id e4} {x first e4}]`,
		`a/e3 key "k-first e3" (nil false) value "first e3" (nil false) [{ce_id e3} {x first e3}]`,
		`c/nil key "" (nil true) value "" (nil true) []`,
		`c/empty key "" (nil true) value "" (nil false) []`,
	}
	if !slices.Equal(got, want) {
		t.Fatalf("outbox rows in id order:\n got %q\nwant %q", got, want)
	}
	var facts int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM outbox_fact`).Scan(&facts); err != nil || facts != 7 {
		t.Fatalf("outbox_fact rows = %d, %v; want 7", facts, err)
	}
}
