// Package postgres builds the pgx pool from configuration, runs short explicit transactions
// (WithTx) and classifies SQLSTATEs: 40001 (serialization_failure) and 40P01 (deadlock_detected)
// retry the whole transaction with a bound and jitter (docs/design.md#sqlstate-classes).
package postgres

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgxpool"
)

// DefaultURL is the database of the local stack that scripts/stack.sh starts.
const DefaultURL = "postgres://bookrecon:bookrecon@127.0.0.1:5432/bookrecon?sslmode=disable"

// ErrConfig wraps an Open error that no retry can mend: the URL does not parse, the password is
// wrong (28P01), the role may not connect or does not exist (28000), the database does not exist
// (3D000). Outages are not ErrConfig: they are waited out.
var ErrConfig = errors.New("postgres: configuration")

// Pooler is what stands between the services and PostgreSQL (BOOKRECON_DATABASE_POOLER).
type Pooler string

const (
	// PoolerNone: a direct connection, one server session per pool connection (the default).
	PoolerNone Pooler = "none"
	// PoolerSession: a pooler in session mode (PgBouncer pool_mode = session), which keeps one
	// server session per client connection: the same as PoolerNone.
	PoolerSession Pooler = "session"
	// PoolerTransaction: a pooler in transaction mode (PgBouncer pool_mode = transaction, a common
	// production setup), which lends a server session for one transaction — or one statement
	// outside a transaction — and gives the next one to whichever client asks. Nothing that
	// lives in a session survives from one transaction to the next: no named prepared
	// statements, SET, session advisory locks or LISTEN.
	PoolerTransaction Pooler = "transaction"
)

// Poolers returns every Pooler.
func Poolers() []Pooler { return []Pooler{PoolerNone, PoolerSession, PoolerTransaction} }

// Options configure Open beyond the URL.
type Options struct {
	// MaxConns bounds the pool (0: the URL's pool_max_conns or pgx's default).
	MaxConns int32
	// Pooler is what the URL reaches ("" is PoolerNone).
	Pooler Pooler
}

// Open returns a pool for url (a libpq URL or DSN) after one successful ping, with at most
// maxConns connections, on a direct connection (Options: OpenWith). A URL that does not parse is
// an ErrConfig; any other error is the server's or the network's.
func Open(ctx context.Context, url string, maxConns int32) (*pgxpool.Pool, error) {
	return OpenWith(ctx, url, Options{MaxConns: maxConns})
}

// OpenWith is Open with options (ParseConfig).
func OpenWith(ctx context.Context, url string, o Options) (*pgxpool.Pool, error) {
	cfg, err := ParseConfig(url, o)
	if err != nil {
		return nil, err
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: open: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		if hint, ok := refusals[SQLState(err)]; ok {
			return nil, fmt.Errorf("%w: %s: %w", ErrConfig, hint, err)
		}
		return nil, fmt.Errorf("postgres: ping: %w", err)
	}
	return pool, nil
}

// ParseConfig returns the pool configuration Open uses for url and o; an error is an ErrConfig.
//
// Behind PoolerTransaction no statement is prepared by name: pgx's default exec mode (a named
// prepared statement per query, cached per connection) fails there with 42P05 (prepared
// statement … already exists) on a server session another client prepared it on, and 26000
// (… does not exist) on one it was not prepared on. The pool runs pgx's
// QueryExecModeCacheDescribe instead, with the statement cache off: each query is parsed as the
// unnamed statement and executed in the same round trip, with the same binary formats and
// parameter types as the default mode (only their description is cached, on the client), so
// arrays, unnest, CopyFrom and CollectRows behave as on a direct connection. A
// default_query_exec_mode of exec or simple_protocol in the URL is kept; describe_exec (two
// round trips, between which a pooler may switch sessions) and cache_statement are refused.
//
// Every connection encodes and scans google/uuid's uuid.UUID in the binary uuid form
// (registerUUID), not through its text methods.
func ParseConfig(url string, o Options) (*pgxpool.Config, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("%w: parse url: %w", ErrConfig, err)
	}
	if o.MaxConns > 0 {
		cfg.MaxConns = o.MaxConns
	}
	switch o.Pooler {
	case "", PoolerNone, PoolerSession:
	case PoolerTransaction:
		cc := cfg.ConnConfig
		switch {
		case cc.DefaultQueryExecMode == pgx.QueryExecModeCacheStatement && !explicitExecMode(url):
			cc.DefaultQueryExecMode = pgx.QueryExecModeCacheDescribe
		case cc.DefaultQueryExecMode == pgx.QueryExecModeCacheDescribe || cc.DefaultQueryExecMode == pgx.QueryExecModeExec ||
			cc.DefaultQueryExecMode == pgx.QueryExecModeSimpleProtocol:
		default:
			return nil, fmt.Errorf("%w: default_query_exec_mode %q does not work behind a transaction pooler "+
				"(use cache_describe, the default there, exec or simple_protocol)", ErrConfig, execModeName(cc.DefaultQueryExecMode))
		}
		cc.StatementCacheCapacity = 0
	default:
		return nil, fmt.Errorf("%w: pooler %q is none of %v", ErrConfig, o.Pooler, Poolers())
	}
	// A cancelled or timed-out context cancels the statement on the server too (a cancel request,
	// as libpq does), not only the client's socket: otherwise a statement given up on keeps
	// running — or keeps waiting on locks — and holds a connection slot. The socket is closed
	// 2 s later if the server does not answer the cancel (a hung server).
	cfg.ConnConfig.BuildContextWatcherHandler = func(c *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.CancelRequestContextWatcherHandler{Conn: c, DeadlineDelay: 2 * time.Second}
	}
	cfg.AfterConnect = func(_ context.Context, c *pgx.Conn) error {
		registerUUID(c.TypeMap())
		return nil
	}
	return cfg, nil
}

// explicitExecMode reports whether url sets default_query_exec_mode (pgx's ParseConfig takes it
// out of the runtime parameters; pgconn's keeps it there).
func explicitExecMode(url string) bool {
	c, err := pgconn.ParseConfig(url)
	if err != nil {
		return false
	}
	_, ok := c.RuntimeParams["default_query_exec_mode"]
	return ok
}

// execModeName is m as default_query_exec_mode spells it.
func execModeName(m pgx.QueryExecMode) string {
	return strings.ReplaceAll(m.String(), " ", "_")
}

// IsRetryable reports whether err is a transaction conflict that a retry of the whole
// transaction resolves: SQLSTATE 40001 or 40P01.
func IsRetryable(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code == "40001" || pgErr.Code == "40P01"
	}
	return false
}

// refusals are the server's answers that waiting cannot change: Open reports them as ErrConfig,
// with what to do.
var refusals = map[string]string{
	"28P01": "password authentication failed: check the user and password in the database URL",
	"28000": "the server refuses this role or connection (pg_hba.conf, or the role does not exist): check the user in the database URL",
	"3D000": "the database does not exist: create it, or fix the database name in the URL",
}

// IsDataError reports whether err is PostgreSQL refusing the statement's own data — a data
// exception (SQLSTATE class 22: a NUL in text, an invalid escape, a value out of range), an
// integrity constraint violation (class 23) or a program limit exceeded (class 54: an index row
// too large) — so the same statement on the same data fails again on every retry. Such an error
// belongs to one record, row or candidate: isolate it and go on. Anything else — connection
// failures, timeouts, transaction conflicts (40), resources (53), operator intervention (57),
// schema or privilege errors (42) and every error that is not PostgreSQL's — is the condition of
// the database or of the code around it, shared by every item: pause and retry.
func IsDataError(err error) bool {
	switch c := SQLState(err); {
	case len(c) != 5:
		return false
	default:
		return c[:2] == "22" || c[:2] == "23" || c[:2] == "54"
	}
}

// SQLState returns err's SQLSTATE, or "" when err is not a PostgreSQL error.
func SQLState(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// Savepoint runs fn inside a savepoint of tx: when fn fails, the savepoint is rolled back, so tx
// stays usable and keeps everything done before it, and fn's error is returned.
func Savepoint(ctx context.Context, tx pgx.Tx, fn func(pgx.Tx) error) error {
	sp, err := tx.Begin(ctx)
	if err != nil {
		return fmt.Errorf("postgres: savepoint: %w", err)
	}
	if err := fn(sp); err != nil {
		_ = sp.Rollback(ctx)
		return err
	}
	return sp.Commit(ctx)
}

// MaxTxAttempts bounds WithTx's retries of 40001/40P01.
const MaxTxAttempts = 8

// Beginner is what WithTx needs: a pool or a connection.
type Beginner interface {
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
}

// WithTx runs fn in a READ COMMITTED transaction and commits it. A 40001/40P01 from fn or the
// commit rolls back and reruns fn, up to MaxTxAttempts times with a jittered pause; any other
// error rolls back and is returned unchanged (wrapped).
func WithTx(ctx context.Context, db Beginner, fn func(pgx.Tx) error) error {
	var err error
	for attempt := 1; ; attempt++ {
		err = once(ctx, db, fn)
		if err == nil || !IsRetryable(err) || attempt >= MaxTxAttempts {
			return err
		}
		pause := time.Duration(attempt) * time.Duration(5+rand.IntN(20)) * time.Millisecond
		select {
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-time.After(pause):
		}
	}
}

func once(ctx context.Context, db Beginner, fn func(pgx.Tx) error) error {
	tx, err := db.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return fmt.Errorf("postgres: begin: %w", err)
	}
	if err := fn(tx); err != nil {
		// Bounded: a hung server must not hold the caller here (pgx closes the connection when
		// the rollback cannot finish).
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		_ = tx.Rollback(rctx)
		cancel()
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("postgres: commit: %w", err)
	}
	return nil
}
