// Package outbox is the transactional outbox: Insert writes a record to publish in the caller's
// transaction, beside the state change that caused it; Relay publishes unpublished rows in id
// order to Kafka and marks them published. One relay is active per service, elected with a
// PostgreSQL advisory lock (DESIGN.md "Shape"). Delivery is at-least-once: a crash between the
// produce and the mark republishes the same record, which carries the same deterministic
// eventId, so consumers deduplicate it.
package outbox

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"
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

// RelayConfig configures a Relay.
type RelayConfig struct {
	// LockKey is the advisory lock that elects one active relay per service.
	LockKey int64
	// Batch is the most rows published per round (default 500).
	Batch int
	// Interval is the pause when the outbox is empty (default 100ms).
	Interval time.Duration
}

// Relay publishes outbox rows.
type Relay struct {
	Pool   *pgxpool.Pool
	Client *kgo.Client
	Config RelayConfig
	Logger *slog.Logger
	// Published, when set, is called with the number of records of each round.
	Published func(n int)
}

// Run publishes until ctx ends. It holds the advisory lock on a dedicated connection while
// active; a relay that cannot take the lock retries every second.
func (r *Relay) Run(ctx context.Context) error {
	batch := r.Config.Batch
	if batch <= 0 {
		batch = 500
	}
	interval := r.Config.Interval
	if interval <= 0 {
		interval = 100 * time.Millisecond
	}
	for ctx.Err() == nil {
		err := r.runLocked(ctx, batch, interval)
		if err != nil && ctx.Err() == nil {
			r.Logger.Warn("outbox relay paused", "err", err)
		}
		sleep(ctx, time.Second)
	}
	return nil
}

func (r *Relay) runLocked(ctx context.Context, batch int, interval time.Duration) error {
	conn, err := r.Pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	var got bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, r.Config.LockKey).Scan(&got); err != nil {
		return err
	}
	if !got {
		return nil
	}
	defer func() {
		_, _ = conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, r.Config.LockKey)
	}()
	for ctx.Err() == nil {
		n, err := r.RunOnce(ctx, batch)
		if err != nil {
			return err
		}
		if n == 0 {
			sleep(ctx, interval)
		}
	}
	return nil
}

// RunOnce publishes up to batch unpublished rows in id order, waits for every ack (acks=all,
// idempotent producer), marks them published, and returns how many it published.
func (r *Relay) RunOnce(ctx context.Context, batch int) (int, error) {
	rows, err := r.Pool.Query(ctx, `SELECT id, topic, record_key, value, headers FROM outbox
		WHERE published_at IS NULL ORDER BY id LIMIT $1`, batch)
	if err != nil {
		return 0, fmt.Errorf("outbox: read: %w", err)
	}
	var ids []int64
	var recs []*kgo.Record
	for rows.Next() {
		var id int64
		var topic string
		var key, value, headers []byte
		if err := rows.Scan(&id, &topic, &key, &value, &headers); err != nil {
			rows.Close()
			return 0, fmt.Errorf("outbox: scan: %w", err)
		}
		var hs []Header
		if err := json.Unmarshal(headers, &hs); err != nil {
			rows.Close()
			return 0, fmt.Errorf("outbox: row %d headers: %w", id, err)
		}
		rec := &kgo.Record{Topic: topic, Key: key, Value: value}
		for _, h := range hs {
			rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: h.Key, Value: []byte(h.Value)})
		}
		ids = append(ids, id)
		recs = append(recs, rec)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("outbox: read: %w", err)
	}
	if len(recs) == 0 {
		return 0, nil
	}
	if err := r.Client.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return 0, fmt.Errorf("outbox: produce: %w", err)
	}
	if _, err := r.Pool.Exec(ctx, `UPDATE outbox SET published_at = now() WHERE id = ANY($1)`, ids); err != nil {
		return 0, fmt.Errorf("outbox: mark published: %w", err)
	}
	if r.Published != nil {
		r.Published(len(recs))
	}
	return len(recs), nil
}

// Backlog returns the number of unpublished rows and the age of the oldest, for the
// bookrecon_outbox_backlog metrics.
func Backlog(ctx context.Context, pool *pgxpool.Pool) (int64, time.Duration, error) {
	var n int64
	var age *float64
	err := pool.QueryRow(ctx, `SELECT count(*), extract(epoch FROM now() - min(created_at))::float8
		FROM outbox WHERE published_at IS NULL`).Scan(&n, &age)
	if err != nil {
		return 0, 0, fmt.Errorf("outbox: backlog: %w", err)
	}
	if age == nil {
		return n, 0, nil
	}
	return n, time.Duration(*age * float64(time.Second)), nil
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// LockKey is the advisory lock of the outbox relay. Every service runs a relay, but all share
// this key, so exactly one relay publishes at a time and rows keep their id order.
const LockKey int64 = 0x626b7201
