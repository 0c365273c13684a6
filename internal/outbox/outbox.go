// Package outbox is the transactional outbox: Insert writes a record to publish in the caller's
// transaction, beside the state change that caused it; Relay publishes unpublished rows in id
// order to Kafka and marks them published. Every service that writes outbox rows runs a relay;
// one is active at a time for the whole outbox, elected by the outbox_lease row with a fencing
// token (DESIGN.md "Shape"). Delivery is at-least-once: a crash or a lost lease between the
// produce and the mark republishes the same record, which carries the same deterministic
// eventId, so consumers deduplicate it. SetAside, Retry and Discard are the tooling of the rows
// the relay set aside.
package outbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Header is one Kafka record header.
type Header struct {
	Key   string `json:"k"`
	Value string `json:"v"`
}

// Message is one record to publish.
type Message struct {
	Topic   string
	Key     []byte
	Value   []byte
	Headers []Header
	EventID string // the record's eventId (or the dead letter's source position)
}

// Insert writes m into the outbox inside tx; a second row for the same (topic, eventId) is a
// no-op, so re-deriving a fact never publishes it twice.
func Insert(ctx context.Context, tx pgx.Tx, m Message) error {
	h, err := json.Marshal(m.Headers)
	if err != nil {
		return fmt.Errorf("outbox: headers: %w", err)
	}
	_, err = tx.Exec(ctx, `INSERT INTO outbox (topic, record_key, value, headers, event_id) VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (topic, event_id) DO NOTHING`,
		m.Topic, m.Key, m.Value, h, m.EventID)
	if err != nil {
		return fmt.Errorf("outbox: insert %s %s: %w", m.Topic, m.EventID, err)
	}
	return nil
}

// InsertMany writes msgs into the outbox inside tx in one statement, in order (ids ascend in
// slice order); (topic, eventId) repeats are no-ops as in Insert.
func InsertMany(ctx context.Context, tx pgx.Tx, msgs []Message) error {
	if len(msgs) == 0 {
		return nil
	}
	topics := make([]string, len(msgs))
	keys := make([][]byte, len(msgs))
	values := make([][]byte, len(msgs))
	headers := make([]string, len(msgs))
	ids := make([]string, len(msgs))
	for i, m := range msgs {
		h, err := json.Marshal(m.Headers)
		if err != nil {
			return fmt.Errorf("outbox: headers: %w", err)
		}
		topics[i], keys[i], values[i], headers[i], ids[i] = m.Topic, m.Key, m.Value, string(h), m.EventID
	}
	_, err := tx.Exec(ctx, `INSERT INTO outbox (topic, record_key, value, headers, event_id)
		SELECT t, k, v, h::jsonb, e FROM unnest($1::text[], $2::bytea[], $3::bytea[], $4::text[], $5::text[])
			WITH ORDINALITY AS u(t, k, v, h, e, n) ORDER BY n
		ON CONFLICT (topic, event_id) DO NOTHING`, topics, keys, values, headers, ids)
	if err != nil {
		return fmt.Errorf("outbox: insert %d rows: %w", len(msgs), err)
	}
	return nil
}

// CloudEvent builds the CloudEvents 1.0 binary-mode headers (Kafka protocol binding) of a JSON
// record: ce_specversion, ce_id, ce_source, ce_type, ce_time, ce_subject, ce_partitionkey and
// content-type.
func CloudEvent(id, source, typ, subject, partitionKey string, at time.Time) []Header {
	return []Header{
		{"ce_specversion", "1.0"},
		{"ce_id", id},
		{"ce_source", source},
		{"ce_type", typ},
		{"ce_time", at.UTC().Format(time.RFC3339Nano)},
		{"ce_subject", subject},
		{"ce_partitionkey", partitionKey},
		{"content-type", "application/json"},
	}
}

// SetAsideRow is an outbox row the relay set aside (see Relay), as SetAside lists it.
type SetAsideRow struct {
	ID         int64
	Topic      string
	EventID    string
	Bytes      int // size of key, value and headers
	Failures   int
	ErrorClass ErrorClass
	LastError  string
	SetAsideAt time.Time
}

// SetAside lists up to limit set-aside rows, oldest first.
func SetAside(ctx context.Context, db Querier, limit int) ([]SetAsideRow, error) {
	rows, err := db.Query(ctx, `SELECT id, topic, event_id, coalesce(length(record_key), 0) + coalesce(length(value), 0) + length(headers::text),
			publish_failures, error_class, coalesce(last_error, ''), set_aside_at
		FROM outbox WHERE set_aside_at IS NOT NULL AND published_at IS NULL AND discarded_at IS NULL ORDER BY id LIMIT $1`, limit)
	if err != nil {
		return nil, fmt.Errorf("outbox: set aside: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (SetAsideRow, error) {
		var x SetAsideRow
		return x, r.Scan(&x.ID, &x.Topic, &x.EventID, &x.Bytes, &x.Failures, &x.ErrorClass, &x.LastError, &x.SetAsideAt)
	})
	if err != nil {
		return nil, fmt.Errorf("outbox: set aside: %w", err)
	}
	return out, nil
}

// ErrNotSetAside: Retry or Discard named a row that is not set aside (unknown, published or
// discarded already).
var ErrNotSetAside = errors.New("outbox: no such set-aside row")

// Retry releases a set-aside row after its cause was fixed (the topic's max.message.bytes raised,
// for instance): the relay publishes it on its next round, then the rows its key held back. It
// returns ErrNotSetAside when id is not set aside.
func Retry(ctx context.Context, db Querier, id int64) error {
	tag, err := db.Exec(ctx, `UPDATE outbox SET set_aside_at = NULL, retry_at = NULL
		WHERE id = $1 AND set_aside_at IS NOT NULL AND published_at IS NULL AND discarded_at IS NULL`, id)
	if err != nil {
		return fmt.Errorf("outbox: retry %d: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("%w: %d", ErrNotSetAside, id)
	}
	return nil
}

// Discard gives up a set-aside row for good, with the operator's reason (required, kept on the
// row): it is never published, and its key's later rows flow again. It returns ErrNotSetAside
// when id is not set aside.
func Discard(ctx context.Context, db Querier, id int64, reason string) error {
	if reason == "" {
		return errors.New("outbox: discard needs a reason")
	}
	tag, err := db.Exec(ctx, `UPDATE outbox SET discarded_at = now(), discard_reason = $2
		WHERE id = $1 AND set_aside_at IS NOT NULL AND published_at IS NULL AND discarded_at IS NULL`, id, reason)
	if err != nil {
		return fmt.Errorf("outbox: discard %d: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("%w: %d", ErrNotSetAside, id)
	}
	return nil
}

// Querier is what SetAside, Retry and Discard need: a pool, a connection or a transaction.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// CountSetAside returns the number of set-aside rows, for the bookrecon_outbox_set_aside_records
// gauge.
func CountSetAside(ctx context.Context, pool *pgxpool.Pool) (int64, error) {
	var n int64
	err := pool.QueryRow(ctx, `SELECT count(*) FROM outbox
		WHERE set_aside_at IS NOT NULL AND published_at IS NULL AND discarded_at IS NULL`).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("outbox: count set aside: %w", err)
	}
	return n, nil
}

// Backlog returns the number of unpublished rows and the age of the oldest, for the
// bookrecon_outbox_backlog metrics.
func Backlog(ctx context.Context, pool *pgxpool.Pool) (int64, time.Duration, error) {
	var n int64
	var age *float64
	err := pool.QueryRow(ctx, `SELECT count(*), extract(epoch FROM now() - min(created_at))::float8
		FROM outbox WHERE published_at IS NULL AND discarded_at IS NULL`).Scan(&n, &age)
	if err != nil {
		return 0, 0, fmt.Errorf("outbox: backlog: %w", err)
	}
	if age == nil {
		return n, 0, nil
	}
	return n, time.Duration(*age * float64(time.Second)), nil
}
