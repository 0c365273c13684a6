-- booking_attempt, as the escalator reads it (internal/attempt writes it).

-- name: booking_attempt_deadline_candidates
-- Attempts in status $3 UNKNOWN for longer than $1 whose deadline is not judged yet, at most $2,
-- oldest first. The retry-at condition filters the partial index's rows
-- (booking_attempt_deadline): a candidate set aside never takes a place in the batch before it
-- is due again. Status $3 must be UNKNOWN for the partial index to serve the scan.
SELECT id, tenant_id, booking_intent_id, idempotency_key, escalation_failures FROM booking_attempt
WHERE status = $3 AND NOT deadline_done AND unknown_since <= now() - $1::interval
    AND (escalation_retry_at IS NULL OR escalation_retry_at <= now())
ORDER BY unknown_since LIMIT $2;
