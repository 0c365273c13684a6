package outbox_test

import (
	"context"
	"errors"
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
