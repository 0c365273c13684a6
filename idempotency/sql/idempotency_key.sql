-- Statements of the idempotency package on idempotency_key (migrations/sql/00007_idempotency_key.sql).
-- Every time is passed in ($now), never now(), so a test controls the clock.

-- name: idempotency_key_claim
-- Insert-first claim of (tenant, principal, key): a new row, or the atomic replacement of one
-- whose retention ended (expires_at <= now). A live row of another transaction not yet committed
-- makes this wait on the primary key (bounded by lock_timeout); a live committed row returns no
-- row, and the caller reads it (idempotency_key_get). $6/$7 (token, lease) are NULL in the
-- transactional mode.
INSERT INTO idempotency_key AS k
    (tenant_id, principal, idem_key, route, fingerprint, state, token, lease_expires_at, created_at, expires_at)
VALUES ($1, $2, $3, $4, $5, 'in_flight', $6::uuid, $7::timestamptz, $8, $9)
ON CONFLICT (tenant_id, principal, idem_key) DO UPDATE
SET route = EXCLUDED.route, fingerprint = EXCLUDED.fingerprint, state = 'in_flight',
    token = EXCLUDED.token, lease_expires_at = EXCLUDED.lease_expires_at,
    status = NULL, location = NULL, content_type = NULL, body = NULL,
    created_at = EXCLUDED.created_at, completed_at = NULL, expires_at = EXCLUDED.expires_at
WHERE k.expires_at <= EXCLUDED.created_at
RETURNING true AS claimed;

-- name: idempotency_key_get
SELECT route, fingerprint, state, lease_expires_at, status, location, content_type, body, expires_at
FROM idempotency_key
WHERE tenant_id = $1 AND principal = $2 AND idem_key = $3;

-- name: idempotency_key_complete
-- Stores the answer of the request that holds the claim: fenced by its token in the two-phase
-- mode ($4), by the transaction holding the row (token NULL) in the transactional mode. A
-- completion after the lease expired is still stored while the token matches.
UPDATE idempotency_key
SET state = 'completed', status = $5, location = $6, content_type = $7, body = $8, completed_at = $9
WHERE tenant_id = $1 AND principal = $2 AND idem_key = $3
  AND state = 'in_flight' AND token IS NOT DISTINCT FROM $4::uuid;

-- name: idempotency_key_release
-- Rolls a two-phase claim back (an answer that is not stored): deletes the in-flight row the
-- token still owns, so a retry is processed afresh.
DELETE FROM idempotency_key
WHERE tenant_id = $1 AND principal = $2 AND idem_key = $3 AND state = 'in_flight' AND token = $4::uuid;

-- name: idempotency_key_delete_expired
-- One bounded batch of expiry: at most $2 rows whose retention ended by $1, oldest first; rows
-- another transaction holds are left to the next batch.
DELETE FROM idempotency_key
WHERE ctid = ANY (ARRAY(
    SELECT ctid FROM idempotency_key
    WHERE expires_at <= $1
    ORDER BY expires_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED));
