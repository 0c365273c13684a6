package attempt

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// The writes of booking_attempt that the reconciler and the escalator make outside a
// transition: the claim, and recording a stage's failure for an attempt's own data (STYLE.md
// habit 26). internal/attempt is the only package that writes booking_attempt.

// Querier runs a statement: a pool, a connection or a transaction.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Claim is one claim of due UNKNOWN attempts (the reconciler's, docs/design.md#reconciliation).
type Claim struct {
	Now         time.Time // the reconciler's clock: due means next_check_at <= Now
	Limit       int
	Owner       string
	LeaseExpiry time.Time
	// Full providers get none; Names[i] gets at most Caps[i] (the earliest due).
	Full, Names []string
	Caps        []int32
}

// ClaimDue leases up to c.Limit due UNKNOWN attempts in one statement
// (booking_attempt_claim_due) and returns them whole, Token set to the claim's fencing token,
// NextCheckAt to the lease expiry. db is a pool: the claim commits on its own.
func ClaimDue(ctx context.Context, db Querier, c Claim) ([]*Row, error) {
	rows, err := db.Query(ctx, q("booking_attempt_claim_due"), c.Now, c.Limit, c.Owner, c.LeaseExpiry, nonNil(c.Full),
		nonNil(c.Names), nonNil(c.Caps), string(StatusUnknown))
	if err != nil {
		return nil, fmt.Errorf("attempt: claim: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*Row, error) {
		var tok int64
		a, err := scanRow(prefixed{r, &tok})
		if err != nil {
			return nil, err
		}
		a.Token, a.NextCheckAt = tok, &c.LeaseExpiry
		return a, nil
	})
	if err != nil {
		return nil, fmt.Errorf("attempt: claim: %w", err)
	}
	return out, nil
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// prefixed scans one leading column into first, then the rest as scanRow's.
type prefixed struct {
	pgx.Row
	first any
}

func (p prefixed) Scan(dest ...any) error { return p.Row.Scan(append([]any{p.first}, dest...)...) }

// RecordCheckFailure records, in t's transaction (after the failed one rolled back), that a
// reconciler stage failed for attempt id's own data — fenced by token and the status the stage
// saw: check_failures + 1, the error text, the lease released, and next_check_at = next(failures)
// (the backoff). recorded is false when the attempt moved on meanwhile (re-claimed or settled:
// its new owner decides).
func (t *Tx) RecordCheckFailure(ctx context.Context, id uuid.UUID, token int64, status Status, cause error,
	next func(failures int) time.Time) (failures int, at time.Time, recorded bool, err error) {
	err = t.tx.QueryRow(ctx, q("booking_attempt_check_failures"), id, token, string(status)).Scan(&failures)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, time.Time{}, false, nil
	}
	if err != nil {
		return 0, time.Time{}, false, err
	}
	failures++
	at = next(failures)
	if _, err := t.tx.Exec(ctx, q("booking_attempt_record_check_failure"), id, token, string(status), FailureText(cause), at); err != nil {
		return 0, time.Time{}, false, err
	}
	return failures, at, true, nil
}

// RecordDeadlineFailure records, in t's transaction, that the escalator's deadline judgement of
// attempt id failed for its own data: one more failure, the error text, and the retry-at after
// wait (on the database clock), which it returns.
func (t *Tx) RecordDeadlineFailure(ctx context.Context, id uuid.UUID, cause error, wait time.Duration) (time.Time, error) {
	var retryAt time.Time
	err := t.tx.QueryRow(ctx, q("booking_attempt_record_deadline_failure"), id, FailureText(cause),
		fmt.Sprintf("%d microseconds", wait.Microseconds())).Scan(&retryAt)
	return retryAt, err
}
