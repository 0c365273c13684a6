package relay

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ErrLeaseLost: the relay's lease lapsed or another relay took it over; the relay stops
// publishing until it holds the lease again.
var ErrLeaseLost = errors.New("outbox: relay lease lost")

// TokenHeader is the record header that carries the publishing relay's fencing token (decimal):
// tokens grow with every acquisition of the lease, so within a partition a consumer sees them
// never decrease.
const TokenHeader = "bookrecon.relay.token"

// lease is one relay's hold on the outbox_lease row (river's leader election is the model: a row
// with an expiry, re-asserted on a timer, never a session lock). The database's clock decides
// expiry; the holder's own deadline is measured on its monotonic clock from before the statement
// that set the expiry was sent, minus a margin, so the holder always stops before the row
// expires for anyone else.
type lease struct {
	pool   *pgxpool.Pool
	holder string
	ttl    time.Duration
	margin time.Duration
	// delay, when set, runs before every assertion (tests delay a renewal with it).
	delay func()

	mu       sync.Mutex
	token    int64
	deadline time.Time // local; zero when not held
	renewed  time.Time // local time of the last successful assertion
}

// assert acquires the lease when it is free or expired, or renews it when this holder has it. It
// returns the token and whether this relay holds the lease now.
func (l *lease) assert(ctx context.Context) (int64, bool, error) {
	if l.delay != nil {
		l.delay()
	}
	sent := time.Now()
	ttl := fmt.Sprintf("%d milliseconds", l.ttl.Milliseconds())
	l.mu.Lock()
	token, held := l.token, !l.deadline.IsZero()
	l.mu.Unlock()
	var got int64
	var err error
	if held {
		// Renew, keeping the token, only while our hold has not expired on the database clock.
		err = l.pool.QueryRow(ctx, stmts.SQL("outbox_lease_renew"), l.holder, token, ttl).Scan(&got)
	}
	if !held || errors.Is(err, pgx.ErrNoRows) {
		// Acquire: a free row, or an expired one whoever held it; the token is bumped.
		err = l.pool.QueryRow(ctx, stmts.SQL("outbox_lease_acquire"), l.holder, ttl).Scan(&got)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case errors.Is(err, pgx.ErrNoRows): // another relay holds it
		l.token, l.deadline = 0, time.Time{}
		return 0, false, nil
	case err != nil:
		// Unknown whether the renewal happened: keep the old deadline, which runs out by itself.
		return l.token, !l.deadline.IsZero() && time.Now().Before(l.deadline), fmt.Errorf("outbox: relay lease: %w", err)
	}
	l.token, l.deadline, l.renewed = got, sent.Add(l.ttl-l.margin), time.Now()
	return got, true, nil
}

// due reports whether the lease should be re-asserted now: not held, or a third of its time
// since the last assertion has passed.
func (l *lease) due() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.deadline.IsZero() || time.Since(l.renewed) >= l.ttl/3 || !time.Now().Before(l.deadline)
}

// valid returns the token and the time left on this holder's own deadline, or ErrLeaseLost.
func (l *lease) valid() (int64, time.Duration, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	left := time.Until(l.deadline)
	if l.deadline.IsZero() || left <= 0 {
		return 0, 0, ErrLeaseLost
	}
	return l.token, left, nil
}

// lost forgets the hold (a fenced mark found the token stale).
func (l *lease) lost() {
	l.mu.Lock()
	l.token, l.deadline = 0, time.Time{}
	l.mu.Unlock()
}

// release gives the lease up at shutdown so another relay takes over at once.
func (l *lease) release(ctx context.Context) {
	l.mu.Lock()
	token, held := l.token, !l.deadline.IsZero()
	l.token, l.deadline = 0, time.Time{}
	l.mu.Unlock()
	if held {
		_, _ = l.pool.Exec(ctx, stmts.SQL("outbox_lease_release"), l.holder, token)
	}
}
