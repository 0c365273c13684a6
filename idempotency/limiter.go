package idempotency

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// EnvRedisURL is the environment key a service reads for OpenLimiter's URL; unset or empty, the
// service runs on PostgreSQL alone.
const EnvRedisURL = "BOOKRECON_REDIS_URL"

// DefaultLimiterTimeout bounds each Redis command of a Limiter: slower is a failure, and the
// request goes on to PostgreSQL alone.
const DefaultLimiterTimeout = 100 * time.Millisecond

// releaseScript deletes the lock only while it still holds this request's token: a lock whose
// PX ran out may be another request's by now, and a bare DEL would remove that one.
var releaseScript = redis.NewScript(`if redis.call('get', KEYS[1]) == ARGV[1] then
  return redis.call('del', KEYS[1])
end
return 0`)

// Limiter is the optional Redis in-flight limiter (docs/design.md Part 2): before PostgreSQL, a
// request takes SET idem:lock:<tenant>:<principal>:<key> <random token> NX PX <ttl>; a request
// that does not get it answers 409 request_in_progress without a database round trip. It is
// released by a Lua compare-and-delete of the token, never a bare DEL. Redis never decides
// correctness: an error or a command slower than Timeout lets the request through to PostgreSQL
// (fail-open), counted as redis_error and logged once per change of state (down, then up
// again). Safe for concurrent use.
type Limiter struct {
	client  redis.UniversalClient
	timeout time.Duration
	metrics *Metrics
	logger  *slog.Logger
	down    atomic.Bool
}

// LimiterOptions configure NewLimiter.
type LimiterOptions struct {
	// Timeout bounds each command (default DefaultLimiterTimeout).
	Timeout time.Duration
	// Metrics counts every attempt (nil: not counted). Pass the Guard's.
	Metrics *Metrics
	// Logger gets the state changes (nil: slog.Default()).
	Logger *slog.Logger
}

// NewLimiter returns a Limiter on client. Build the client with RedisOptions (or as it does:
// no command retries — a SET NX resent after a lost reply would find its own lock and answer
// contended — and ContextTimeoutEnabled, so Timeout bounds the socket too).
func NewLimiter(client redis.UniversalClient, o LimiterOptions) *Limiter {
	return &Limiter{client: client, timeout: cmp.Or(o.Timeout, DefaultLimiterTimeout), metrics: o.Metrics,
		logger: cmp.Or(o.Logger, slog.Default())}
}

// RedisOptions parses url (redis://[user:password@]host:port/db or rediss://) into the options a
// Limiter's client needs: no retries, context deadlines applied to the socket, dial, read and
// write bounded by timeout (0: DefaultLimiterTimeout), a small pool. The error never quotes the
// URL (it may hold a password).
func RedisOptions(url string, timeout time.Duration) (*redis.Options, error) {
	o, err := redis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("idempotency: %s does not parse as redis://host:port/db (or rediss://)", EnvRedisURL)
	}
	timeout = cmp.Or(timeout, DefaultLimiterTimeout)
	o.MaxRetries = -1
	o.DialerRetries = 1 // no redial within a command: a Redis that refuses is fail-open at once
	o.ContextTimeoutEnabled = true
	o.DialTimeout, o.ReadTimeout, o.WriteTimeout = timeout, timeout, timeout
	return o, nil
}

// OpenLimiter is NewLimiter on a client of RedisOptions(url, o.Timeout); an empty url (an
// unset BOOKRECON_REDIS_URL) returns a nil Limiter, which Config takes as none. It does not contact
// Redis: a Redis that is down at start is fail-open like one that goes away later. Close the
// client (Limiter.Close) at shutdown. go-redis logs each failed dial through its own global
// logger (standard log, stderr); the Limiter logs a change of state once, so a service may
// silence go-redis with logging.Disable (github.com/redis/go-redis/v9/logging).
func OpenLimiter(url string, o LimiterOptions) (*Limiter, error) {
	if url == "" {
		return nil, nil // no Redis: a nil Limiter in Config is PostgreSQL alone
	}
	ro, err := RedisOptions(url, o.Timeout)
	if err != nil {
		return nil, err
	}
	return NewLimiter(redis.NewClient(ro), o), nil
}

// Close closes the Redis client.
func (l *Limiter) Close() error { return l.client.Close() }

// lockKey is the Redis key of id's lock.
func lockKey(id keyID) string {
	return "idem:lock:" + id.Tenant + ":" + id.Principal + ":" + id.Key
}

// Acquire tries to take id's lock for ttl. acquired false means another request holds it (409);
// an error of Redis is fail-open: acquired true with a release that does nothing. release
// must be called once the request's record is settled (stored or rolled back); it is bounded
// by Timeout and detached from ctx's cancellation.
func (l *Limiter) Acquire(ctx context.Context, id keyID, ttl time.Duration) (release func(), acquired bool) {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand never fails (Go 1.24+)
	token := hex.EncodeToString(b[:])
	key := lockKey(id)
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.timeout)
	ok, err := l.client.SetNX(cctx, key, token, ttl).Result()
	cancel()
	if err != nil {
		l.failed(err)
		return func() {}, true
	}
	l.recovered()
	if !ok {
		l.count(LimiterContended)
		return func() {}, false
	}
	l.count(LimiterAcquired)
	return func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.timeout)
		defer cancel()
		if err := releaseScript.Run(rctx, l.client, []string{key}, token).Err(); err != nil {
			// The lock runs out at its PX; nothing else to do. Counted as a Redis error, not a
			// second attempt.
			l.failed(err)
			return
		}
		l.recovered()
	}, true
}

func (l *Limiter) count(r LimiterResult) {
	if l.metrics != nil {
		l.metrics.Limiter.WithLabelValues(string(r)).Inc()
	}
}

// failed counts a Redis failure and logs the first of a run.
func (l *Limiter) failed(err error) {
	l.count(LimiterRedisError)
	if l.down.CompareAndSwap(false, true) {
		l.logger.Warn("redis in-flight limiter unreachable: idempotency runs on PostgreSQL alone until it answers again",
			"error", err.Error())
	}
}

// recovered logs the end of a run of failures.
func (l *Limiter) recovered() {
	if l.down.CompareAndSwap(true, false) {
		l.logger.Info("redis in-flight limiter reachable again")
	}
}
