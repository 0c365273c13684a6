// Package outbox is the writer side of the transactional outbox: Insert and InsertMany write a
// record to publish in the caller's transaction, beside the state change that caused it, and
// SetAside, Retry, Discard, CountSetAside and Backlog are the queries of the CLI and the metrics.
// It links no Kafka client: internal/relay publishes the rows, in the services that write them
// (docs/decisions.md, "Where relays run"). Delivery is at-least-once: a republished record
// carries the same deterministic eventId, so consumers deduplicate it. A row leaves the outbox
// when the relay has published it; outbox_fact keeps every (topic, eventId) ever written, so
// re-deriving a fact stays a no-op, and a row's headers are stored in a compact encoding
// (headers.go). Its SQL is sql/outbox.sql.
package outbox

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bookrecon/bookrecon/internal/postgres"
)

//go:embed sql/*.sql
var sqlFiles embed.FS

// stmts are the package's named statements (sql/outbox.sql).
var stmts = postgres.MustLoadStatements(sqlFiles, "sql/*.sql")

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
// no-op, so re-deriving a fact never publishes it twice (outbox_fact keeps every fact, published
// or not).
func Insert(ctx context.Context, tx pgx.Tx, m Message) error {
	if err := insert(ctx, tx, []Message{m}); err != nil {
		return fmt.Errorf("outbox: insert %s %s: %w", m.Topic, m.EventID, err)
	}
	return nil
}

// InsertMany writes msgs into the outbox inside tx, in order (ids ascend in slice order);
// (topic, eventId) repeats, in msgs or of a fact written before, are no-ops as in Insert.
// Headers are stored in the compact encoding of EncodeHeaders. Two statements: the facts
// (outbox_fact_insert_many), then a COPY of the new facts' rows (plus pgx's describe of the COPY
// columns: once per connection, or every call under the exec and simple_protocol modes of a
// transaction pooler), which costs PostgreSQL about two thirds of the one INSERT … SELECT it
// replaced (docs/performance.md "The outbox insert").
func InsertMany(ctx context.Context, tx pgx.Tx, msgs []Message) error {
	if len(msgs) == 0 {
		return nil
	}
	if err := insert(ctx, tx, msgs); err != nil {
		return fmt.Errorf("outbox: insert %d rows: %w", len(msgs), err)
	}
	return nil
}

// fact is one (topic, eventId) of outbox_fact.
type fact struct{ topic, eventID string }

// outboxColumns are the columns insert copies; the rest take their defaults.
var outboxColumns = []string{"topic", "record_key", "value", "headers", "event_id"}

// insert records msgs' facts and copies the rows of those it recorded: the first row of each
// fact in msgs, unless outbox_fact holds it already.
func insert(ctx context.Context, tx pgx.Tx, msgs []Message) error {
	seen := make(map[fact]bool, len(msgs))
	firsts := make([]int, 0, len(msgs)) // indexes in msgs of each fact's first row, ascending
	topics := make([]string, 0, len(msgs))
	ids := make([]string, 0, len(msgs))
	for i, m := range msgs {
		f := fact{m.Topic, m.EventID}
		if seen[f] {
			continue
		}
		seen[f] = true
		firsts, topics, ids = append(firsts, i), append(topics, m.Topic), append(ids, m.EventID)
	}
	rows, err := tx.Query(ctx, stmts.SQL("outbox_fact_insert_many"), topics, ids)
	if err != nil {
		return err
	}
	recorded := map[fact]bool{}
	for rows.Next() {
		v := rows.RawValues()
		recorded[fact{string(v[0]), string(v[1])}] = true
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	write := firsts
	if len(recorded) < len(firsts) { // some were recorded before: copy only the new ones
		write = slices.DeleteFunc(slices.Clone(firsts), func(i int) bool { return !recorded[fact{msgs[i].Topic, msgs[i].EventID}] })
	}
	if len(write) == 0 {
		return nil
	}
	_, err = tx.CopyFrom(ctx, pgx.Identifier{"outbox"}, outboxColumns, pgx.CopyFromSlice(len(write), func(j int) ([]any, error) {
		m := msgs[write[j]]
		return []any{m.Topic, m.Key, m.Value, EncodeHeaders(m.Headers, m.EventID, m.Key), m.EventID}, nil
	}))
	return err
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

// ErrorClass classifies a failed publish of one row: the outbox's error_class column and the
// relay's error_class label (internal/relay's Classify maps a produce error to one).
type ErrorClass string

// Error classes. The record classes set the row aside; ClassTopic and ClassAuthorization pause
// the row's topic; ClassTransient retries the row with backoff.
const (
	ClassRecordTooLarge     ErrorClass = "record_too_large"      // MESSAGE_TOO_LARGE, or larger than the client's batch limit
	ClassRecordListTooLarge ErrorClass = "record_list_too_large" // RECORD_LIST_TOO_LARGE
	ClassInvalidRecord      ErrorClass = "invalid_record"        // INVALID_RECORD, INVALID_TIMESTAMP, CORRUPT_MESSAGE
	ClassTopic              ErrorClass = "topic"                 // the topic does not exist or its name is invalid
	ClassAuthorization      ErrorClass = "authorization"         // topic or cluster authorization failed
	ClassTransient          ErrorClass = "transient"             // anything else: retried
)

// ErrorClasses lists every ErrorClass (metric pre-creation).
func ErrorClasses() []ErrorClass {
	return []ErrorClass{ClassRecordTooLarge, ClassRecordListTooLarge, ClassInvalidRecord, ClassTopic, ClassAuthorization, ClassTransient}
}

// SetsAside reports whether a row that failed with c is set aside (a record error).
func (c ErrorClass) SetsAside() bool {
	return c == ClassRecordTooLarge || c == ClassRecordListTooLarge || c == ClassInvalidRecord
}

// SetAsideRow is an outbox row the relay set aside (internal/relay), as SetAside lists it.
type SetAsideRow struct {
	ID         int64
	Topic      string
	EventID    string
	Bytes      int // the record's size: key, value, and every header's key and value (headers that do not decode: as stored)
	Failures   int
	ErrorClass ErrorClass
	LastError  string
	SetAsideAt time.Time
}

// SetAside lists up to limit set-aside rows, oldest first.
func SetAside(ctx context.Context, db Querier, limit int) ([]SetAsideRow, error) {
	rows, err := db.Query(ctx, stmts.SQL("outbox_list_set_aside"), limit)
	if err != nil {
		return nil, fmt.Errorf("outbox: set aside: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (SetAsideRow, error) {
		var x SetAsideRow
		var key, headers []byte
		var value int
		if err := r.Scan(&x.ID, &x.Topic, &x.EventID, &key, &value, &headers, &x.Failures, &x.ErrorClass, &x.LastError, &x.SetAsideAt); err != nil {
			return x, err
		}
		x.Bytes = len(key) + value
		hs, err := DecodeHeaders(headers, x.EventID, key)
		if err != nil { // set aside for that (internal/relay): its headers as stored
			x.Bytes += len(headers)
		}
		for _, h := range hs {
			x.Bytes += len(h.Key) + len(h.Value)
		}
		return x, nil
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
	tag, err := db.Exec(ctx, stmts.SQL("outbox_retry_set_aside"), id)
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
	tag, err := db.Exec(ctx, stmts.SQL("outbox_discard_set_aside"), id, reason)
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
	err := pool.QueryRow(ctx, stmts.SQL("outbox_count_set_aside")).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("outbox: count set aside: %w", err)
	}
	return n, nil
}

// Backlog returns the number of pending rows (neither published nor discarded) and the age of the oldest, for the
// bookrecon_outbox_backlog metrics.
func Backlog(ctx context.Context, pool *pgxpool.Pool) (int64, time.Duration, error) {
	var n int64
	var age *float64
	err := pool.QueryRow(ctx, stmts.SQL("outbox_count_backlog")).Scan(&n, &age)
	if err != nil {
		return 0, 0, fmt.Errorf("outbox: backlog: %w", err)
	}
	if age == nil {
		return n, 0, nil
	}
	return n, time.Duration(*age * float64(time.Second)), nil
}
