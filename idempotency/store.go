package idempotency

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/bookrecon/bookrecon/internal/postgres"
)

//go:embed sql/*.sql
var sqlFiles embed.FS

// stmts are the package's named statements (sql/idempotency_key.sql, sql/settings.sql).
var stmts = postgres.MustLoadStatements(sqlFiles, "sql/*.sql")

// State is a record's state in idempotency_key.state.
type State string

const (
	// StateInFlight: claimed, no answer stored yet.
	StateInFlight State = "in_flight"
	// StateCompleted: the answer is stored and replayed.
	StateCompleted State = "completed"
)

// keyID is a record's scope and key: the primary key of idempotency_key.
type keyID struct {
	Scope
	Key string
}

func (k keyID) args() []any { return []any{k.Tenant, k.Principal, k.Key} }

// record is a row of idempotency_key as idempotency_key_get reads it.
type record struct {
	Route        string
	Fingerprint  []byte
	State        State
	LeaseExpires *time.Time // nil in the transactional mode
	Status       *int32
	Location     *string
	ContentType  *string
	Body         []byte
	ExpiresAt    time.Time
}

// claim is what claimRow inserts.
type claim struct {
	keyID
	Route       string
	Fingerprint Fingerprint
	Token       *uuid.UUID // nil in the transactional mode
	Lease       *time.Time
	Now         time.Time
	ExpiresAt   time.Time
}

// errLockTimeout is the claim's wait on another transaction's uncommitted record exceeding
// lock_timeout (SQLSTATE 55P03): 409 request_in_progress.
var errLockTimeout = errors.New("idempotency: waited lock_timeout on a concurrent request with the same key")

// claimRow runs the insert-first claim in tx under lockTimeout (restored afterwards, so the
// handler's own statements keep the session's lock_timeout). It returns claimed (the row is
// this request's, fresh or replacing an expired one) or the live record that holds the key;
// existing is nil and claimed false when the holder vanished between the two statements (the
// caller claims again).
func claimRow(ctx context.Context, tx pgx.Tx, c claim, lockTimeout time.Duration) (claimed bool, existing *record, err error) {
	var previous, set string
	if err := tx.QueryRow(ctx, stmts.SQL("lock_timeout_set"), fmt.Sprintf("%dms", lockTimeout.Milliseconds())).Scan(&previous, &set); err != nil {
		return false, nil, fmt.Errorf("idempotency: set lock_timeout: %w", err)
	}
	err = tx.QueryRow(ctx, stmts.SQL("idempotency_key_claim"), c.Tenant, c.Principal, c.Key, c.Route, c.Fingerprint[:],
		c.Token, c.Lease, c.Now, c.ExpiresAt).Scan(&claimed)
	switch {
	case err == nil:
	case errors.Is(err, pgx.ErrNoRows):
	case postgres.SQLState(err) == "55P03":
		return false, nil, errLockTimeout
	default:
		return false, nil, fmt.Errorf("idempotency: claim: %w", err)
	}
	if _, err := tx.Exec(ctx, stmts.SQL("lock_timeout_set"), previous); err != nil {
		return false, nil, fmt.Errorf("idempotency: restore lock_timeout: %w", err)
	}
	if claimed {
		return true, nil, nil
	}
	existing, err = getRow(ctx, tx, c.keyID)
	return false, existing, err
}

// getRow reads the record of id; nil when there is none.
func getRow(ctx context.Context, q pgx.Tx, id keyID) (*record, error) {
	var r record
	var state string
	err := q.QueryRow(ctx, stmts.SQL("idempotency_key_get"), id.args()...).Scan(&r.Route, &r.Fingerprint, &state,
		&r.LeaseExpires, &r.Status, &r.Location, &r.ContentType, &r.Body, &r.ExpiresAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("idempotency: read record: %w", err)
	}
	r.State = State(state)
	return &r, nil
}

// execer is a pool or a transaction.
type execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// answer is a response as stored and replayed.
type answer struct {
	Status      int
	Location    string
	ContentType string
	Body        []byte
}

// completeRow stores a under id, fenced by token (nil: the transactional mode, in the claim's own
// transaction). It reports whether the row was still this request's.
func completeRow(ctx context.Context, q execer, id keyID, token *uuid.UUID, a answer, now time.Time) (bool, error) {
	tag, err := q.Exec(ctx, stmts.SQL("idempotency_key_complete"), id.Tenant, id.Principal, id.Key, token,
		int32(a.Status), nullable(a.Location), nullable(a.ContentType), nonNil(a.Body), now)
	if err != nil {
		return false, fmt.Errorf("idempotency: store answer: %w", err)
	}
	return tag.RowsAffected() == 1, nil
}

func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}
