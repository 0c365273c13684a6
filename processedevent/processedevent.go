// Package processedevent is the insert-first deduplication store every bookrecon consumer uses
// (docs/design.md#insert-first-dedup). A consumed record is applied only by the transaction whose
// INSERT ... ON CONFLICT DO NOTHING created its row, keyed (consumer, tenant_id, event_id,
// occurred_day); the row commits with the record's effects or not at all. It never reads before
// writing, and knows nothing about Kafka.
//
// The table is partitioned by occurred_day, the UTC day of the event's occurredAt: producers
// republish identical records, so a redelivery lands on the same partition. EnsurePartitions
// creates the partitions a batch needs and DropBefore removes whole partitions once they are
// older than the retention (docs/retention.md). Its SQL is in sql/processed_event.sql.
package processedevent

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/bookrecon/bookrecon/internal/postgres"
)

//go:embed sql/*.sql
var sqlFiles embed.FS

// stmts are the package's named statements (sql/processed_event.sql).
var stmts = postgres.MustLoadStatements(sqlFiles, "sql/*.sql")

// Execer runs a statement: a *pgxpool.Pool, a *pgx.Conn or a pgx.Tx.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Querier runs a query: a *pgxpool.Pool, a *pgx.Conn or a pgx.Tx.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Outcome is what Insert decided for one event.
type Outcome int

const (
	// Applied: this transaction inserted the row; the caller applies the event's effects.
	Applied Outcome = iota + 1
	// Duplicate: the event id was processed before with the same canonical hash: a redelivery,
	// nothing to apply (counted as bookrecon_duplicate_deliveries_total).
	Duplicate
	// Collision: the event id was processed before with a different canonical hash: not
	// applied, counted and logged as an eventId collision (docs/design.md#insert-first-dedup).
	Collision
)

func (o Outcome) String() string {
	switch o {
	case Applied:
		return "applied"
	case Duplicate:
		return "duplicate"
	case Collision:
		return "collision"
	}
	return "invalid"
}

// Event identifies one consumed record.
type Event struct {
	TenantID   string
	EventID    string
	OccurredAt time.Time // producer time; its UTC day is the partition key
	Hash       string    // SHA-256 of the record's canonical JSON (events.CanonicalHash)
}

// Day returns the partition key of e: the UTC calendar day of OccurredAt.
func (e Event) Day() time.Time { return Day(e.OccurredAt) }

// Day truncates t to its UTC calendar day.
func Day(t time.Time) time.Time {
	y, m, d := t.UTC().Date()
	return time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
}

// Store deduplicates events for one consumer: the consumer group and topic, e.g.
// "bookrecon-ingester/booking.attempts.v1". Renaming a consumer re-applies everything.
type Store struct {
	Consumer string
}

// Insert claims e for s.Consumer inside the caller's transaction. Applied means the caller owns
// the event and must apply its effects in the same transaction; Duplicate and Collision mean it
// must not. A missing partition for e's day is an error (call EnsurePartitions first).
func (s Store) Insert(ctx context.Context, tx pgx.Tx, e Event) (Outcome, error) {
	tag, err := tx.Exec(ctx, stmts.SQL("processed_event_insert"), s.Consumer, e.TenantID, e.EventID, e.Day(), e.Hash)
	if err != nil {
		return 0, fmt.Errorf("processedevent: insert %s/%s: %w", e.TenantID, e.EventID, err)
	}
	if tag.RowsAffected() == 1 {
		return Applied, nil
	}
	var stored string
	err = tx.QueryRow(ctx, stmts.SQL("processed_event_read_hash"), s.Consumer, e.TenantID, e.EventID, e.Day()).Scan(&stored)
	if err != nil {
		return 0, fmt.Errorf("processedevent: read hash %s/%s: %w", e.TenantID, e.EventID, err)
	}
	if stored == e.Hash {
		return Duplicate, nil
	}
	return Collision, nil
}

// partitionName is processed_event_YYYYMMDD.
func partitionName(day time.Time) string { return "processed_event_" + day.Format("20060102") }

// DB runs statements and queries: a *pgxpool.Pool or a *pgx.Conn.
type DB interface {
	Execer
	Querier
}

// EnsurePartitions creates the daily partitions for every day in days (idempotent). It runs DDL,
// so call it in its own short transaction, outside the batch transaction.
func EnsurePartitions(ctx context.Context, db DB, days ...time.Time) error {
	if len(days) == 0 {
		return nil
	}
	ds := make([]time.Time, len(days))
	for i, d := range days {
		ds[i] = Day(d)
	}
	ddl, err := built(ctx, db, "processed_event_create_partition_ddl", ds)
	if err != nil {
		return fmt.Errorf("processedevent: create partitions: %w", err)
	}
	for i, q := range ddl {
		if _, err := db.Exec(ctx, q); err != nil {
			if postgres.IsCreateRace(err) {
				continue // created concurrently by another consumer
			}
			return fmt.Errorf("processedevent: create partition %s: %w", partitionName(ds[i]), err)
		}
	}
	return nil
}

// built runs the named statement that builds DDL statements from arg, one per element in order.
func built(ctx context.Context, db Querier, name string, arg any) ([]string, error) {
	rows, err := db.Query(ctx, stmts.SQL(name), arg)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// ErrNoPartition is returned by OldestDay when processed_event has no partition.
var ErrNoPartition = errors.New("processedevent: no partition")

// Days lists the days that have a partition, oldest first.
func Days(ctx context.Context, db Querier) ([]time.Time, error) {
	rows, err := db.Query(ctx, stmts.SQL("processed_event_list_partitions"))
	if err != nil {
		return nil, fmt.Errorf("processedevent: list partitions: %w", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("processedevent: list partitions: %w", err)
	}
	days := make([]time.Time, 0, len(names))
	for _, n := range names {
		d, err := time.Parse("20060102", n[len("processed_event_"):])
		if err != nil {
			continue // not one of ours
		}
		days = append(days, d)
	}
	return days, nil
}

// OldestDay is the lower bound of the oldest kept partition: events that occurred before it are
// dead-lettered as stale_event (docs/design.md#contract-v1, step 9). ErrNoPartition when none.
func OldestDay(ctx context.Context, db Querier) (time.Time, error) {
	days, err := Days(ctx, db)
	if err != nil {
		return time.Time{}, err
	}
	if len(days) == 0 {
		return time.Time{}, ErrNoPartition
	}
	return days[0], nil
}

// DropBefore drops every partition whose day is before cutoff's day, whole (never row by row),
// and returns the days dropped.
func DropBefore(ctx context.Context, db DB, cutoff time.Time) ([]time.Time, error) {
	days, err := Days(ctx, db)
	if err != nil {
		return nil, err
	}
	var old []time.Time
	var names []string
	for _, d := range days {
		if !d.Before(Day(cutoff)) {
			break
		}
		old, names = append(old, d), append(names, partitionName(d))
	}
	if len(names) == 0 {
		return nil, nil
	}
	ddl, err := built(ctx, db, "processed_event_drop_partition_ddl", names)
	if err != nil {
		return nil, fmt.Errorf("processedevent: drop partitions: %w", err)
	}
	var dropped []time.Time
	for i, q := range ddl {
		if _, err := db.Exec(ctx, q); err != nil {
			return dropped, fmt.Errorf("processedevent: drop %s: %w", names[i], err)
		}
		dropped = append(dropped, old[i])
	}
	return dropped, nil
}

// InsertMany is Insert for a batch, in two statements: one INSERT ... ON CONFLICT DO NOTHING
// RETURNING for all of evs, one read of the stored hashes of those not inserted. The outcome of
// each event is as if Insert had been called for each in slice order: the first occurrence of
// an id in evs may apply, later occurrences are duplicates or collisions of it.
func (s Store) InsertMany(ctx context.Context, tx pgx.Tx, evs []Event) ([]Outcome, error) {
	out := make([]Outcome, len(evs))
	if len(evs) == 0 {
		return out, nil
	}
	// An event's key: tenant, id and day (the day's Unix seconds: Day's times are all UTC).
	type key struct {
		tenant, id string
		day        int64
	}
	// first: key → its first occurrence's index in the unique events u; of: event → its u.
	first := make(map[key]int, len(evs))
	of := make([]int, len(evs))
	tenants, ids, hashes := make([]string, 0, len(evs)), make([]string, 0, len(evs)), make([]string, 0, len(evs))
	days := make([]time.Time, 0, len(evs))
	for i, e := range evs {
		d := e.Day()
		k := key{e.TenantID, e.EventID, d.Unix()}
		u, ok := first[k]
		if !ok {
			u = len(ids)
			first[k] = u
			tenants, ids, hashes, days = append(tenants, e.TenantID), append(ids, e.EventID), append(hashes, e.Hash), append(days, d)
		}
		of[i] = u
	}
	rows, err := tx.Query(ctx, stmts.SQL("processed_event_insert_many"), s.Consumer, tenants, ids, days, hashes)
	if err != nil {
		return nil, fmt.Errorf("processedevent: insert %d: %w", len(ids), err)
	}
	// applied: the unique events inserted; stored: each unique event's hash as stored (applied:
	// its own; else read back; "" when neither).
	applied := make([]bool, len(ids))
	stored := make([]string, len(ids))
	var k key
	var day time.Time
	if _, err := pgx.ForEachRow(rows, []any{&k.tenant, &k.id, &day}, func() error {
		k.day = Day(day).Unix()
		if u, ok := first[k]; ok {
			applied[u] = true
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("processedevent: insert %d: %w", len(ids), err)
	}
	var qt, qi []string
	var qd []time.Time
	for u := range ids {
		if !applied[u] {
			qt, qi, qd = append(qt, tenants[u]), append(qi, ids[u]), append(qd, days[u])
		}
	}
	if len(qt) > 0 {
		rows, err := tx.Query(ctx, stmts.SQL("processed_event_read_hashes"), s.Consumer, qt, qi, qd)
		if err != nil {
			return nil, fmt.Errorf("processedevent: read hashes: %w", err)
		}
		var h string
		if _, err := pgx.ForEachRow(rows, []any{&k.tenant, &k.id, &day, &h}, func() error {
			k.day = Day(day).Unix()
			if u, ok := first[k]; ok {
				stored[u] = h
			}
			return nil
		}); err != nil {
			return nil, err
		}
	}
	seen := make([]bool, len(ids)) // the unique event's first occurrence is behind
	for i, e := range evs {
		u := of[i]
		switch {
		case !seen[u] && applied[u]:
			out[i] = Applied
			stored[u] = e.Hash
		case stored[u] == e.Hash:
			out[i] = Duplicate
		default:
			out[i] = Collision
		}
		seen[u] = true
	}
	return out, nil
}
