// Package idempotency applies the Idempotency-Key contract (docs/design.md Part 2 "Idempotency-Key
// semantics"; draft-ietf-httpapi-idempotency-key-header; seed 004) to net/http handlers, so that
// bookrecon's own endpoints and every booking service answer a client's retry with the first
// answer and never run a request twice. It is importable on purpose: a booking service guards
// its public API with the same rules.
//
// # What a guarded route answers
//
// A key is scoped by (tenant, principal, Idempotency-Key); Config.Scope supplies the tenant and
// principal from the authenticated request (the authentication middleware runs first, so
// authorization precedes validation and any idempotency look-up). The request's fingerprint is
// computed by the route's FingerprintFunc (DefaultFingerprint: method, route template, path, query and
// the whole body). Then, for the record of the key:
//
//	the key's record           the request        answer
//	none (or expired)          any                execute (an expired record is replaced atomically)
//	in flight, lease valid     same fingerprint   409 request_in_progress, Retry-After
//	in flight, lease expired   same fingerprint   409 request_outcome_unknown, never re-executed
//	completed                  same fingerprint   the stored status, Location, Content-Type and body,
//	                                              plus Idempotent-Replayed: true
//	any                        other fingerprint  422 idempotency_key_reused, nothing executed or changed
//	—                          no key             400 idempotency_key_missing
//
// Stored: 2xx answers, and any answer the handler marks with KeepAnswer (a domain answer that
// cannot change with time, like key_conflict). Rolled back with the claim: every other answer
// of the handler (gate_refused, 404, a 5xx in the transactional mode, where the effect rolls
// back with it) and a database failure before the commit, so a retry is processed afresh. A
// two-phase 5xx answer is neither: its external effect may have happened (a provider that timed
// out may have booked), so the claim stays in flight — retries get request_in_progress, then
// request_outcome_unknown, never a second call — unless the handler marks the answer as given
// before its effect began with ReleaseClaim. Never claimed: 400 (key missing or invalid, a body the fingerprint
// refuses), 401, 413, 422 and request_in_progress. Errors are RFC 9457 problem details with a
// stable code (the Code constants).
//
// # Two modes
//
// Guard.Transactional, for a handler whose effect is a write to the same database: the record is
// inserted first (INSERT … ON CONFLICT) in the transaction the handler writes in (it gets the
// pgx.Tx) and completed in it before the commit. A concurrent request with the same key waits on
// the primary key, bounded by Config.LockTimeout (then 409 request_in_progress); when the first
// commits it replays, when the first rolls back it executes. No lease, no token.
//
// Guard.TwoPhase, for a handler whose effect is an external call (a provider create): the claim
// commits first with a lease (Config.Lease) and a random token; the answer is stored later by an
// update fenced by that token — also when it arrives after the lease expired, as long as the
// token still owns the row. After the lease a duplicate is told the outcome is unknown; the
// record becomes claimable again only when its TTL ends.
//
// # Retention and uniqueness
//
// idempotency_key is not partitioned: its primary key (tenant_id, principal, idem_key) guards a
// key for its whole retention window, so a retry that crosses midnight or a month boundary
// replays (a unique index of a partitioned table would have to include the partition column,
// and two partitions could each hold the key). A record is replayed for Config.TTL (default 30
// days); a key used after it is a new request, replacing the old record atomically (ON CONFLICT
// DO UPDATE … WHERE expires_at <= now). Guard.DeleteExpired removes expired records in bounded
// batches.
//
// # Detached from the client
//
// Once the body is read, the claim, the handler and the recording of its answer run on a
// context detached from the client's connection (context.WithoutCancel) and bounded by
// Config.RequestTimeout: a client that hangs up — a TCP close, an HTTP/2 stream reset — does not
// roll a booking back half-way, and its retry replays the stored answer.
//
// # Leases
//
// A two-phase lease is at least RequestTimeout + LeaseMargin (New refuses shorter): a claim must
// outlive the longest run of its handler, or a live request would be reported unknown. Size
// RequestTimeout above the p99 of bookrecon_command_duration_seconds{route} (the handler's run)
// with room for the provider's own timeout, and LeaseMargin for the claim and the store around
// it (seed 004: p99 plus a margin; a provider timeout of 30 s needs a lease above 30 s).
//
// # The Redis in-flight limiter
//
// With a Limiter (OpenLimiter; services read BOOKRECON_REDIS_URL, EnvRedisURL), a request first
// takes SET idem:lock:<tenant>:<principal>:<key> <random token> NX PX <ttl> — ttl is
// RequestTimeout + LeaseMargin in the transactional mode and the Lease in the two-phase mode —
// and a request that does not get it answers 409 request_in_progress without a database round
// trip — whatever its body: Redis holds no fingerprint, so while the first request runs, a request
// with the key and another body gets 409 request_in_progress where PostgreSQL alone would answer
// 422 idempotency_key_reused (it gets the 422 once the first completes). The lock is released by
// a Lua compare-and-delete of the token, never a bare DEL. Redis never decides correctness:
// PostgreSQL does. Without a Limiter everything works on PostgreSQL
// alone.
//
// # When Redis or PostgreSQL goes away mid-request
//
//   - Redis down or slower than the Limiter's timeout: the request goes on to PostgreSQL alone
//     (fail-open), counted in bookrecon_idempotency_limiter_total{result="redis_error"} and logged
//     once per change of state. Still exactly one execution: the primary key decides.
//   - Redis gone between the lock and its release: the answer is unaffected; the lock runs out
//     at its PX.
//   - PostgreSQL gone before or during the claim (transactional and two-phase): 503
//     idempotency_unavailable with Retry-After; nothing ran, nothing is kept; the retry with the
//     same key is processed afresh.
//   - PostgreSQL gone during a transactional handler or its commit: the effect and the claim
//     roll back together: 503 idempotency_unavailable; the retry is processed afresh.
//   - PostgreSQL gone after a two-phase handler ran (its external effect happened): the client
//     gets the handler's answer, but it is not stored (logged): retries get 409
//     request_in_progress until the lease ends, then 409 request_outcome_unknown — never a
//     second external call. The booking service reconciles the attempt.
//
// # Metrics
//
// bookrecon_idempotency_requests_total{route, result} (executed, replayed, in_progress,
// outcome_unknown, key_reused); bookrecon_idempotency_limiter_total{result} (acquired,
// contended, redis_error); bookrecon_command_duration_seconds{route}. Routes are the templates
// registered in code, so labels stay bounded; every series is pre-created.
//
// What it leaves to others: authentication (Config.Scope plugs it in), the begin route's
// fingerprint (the Producer API's), and the maintenance loop that calls DeleteExpired.
package idempotency
