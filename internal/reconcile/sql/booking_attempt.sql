-- booking_attempt, as the reconciler reads it (internal/attempt writes it: the claim, the
-- verdicts, the stale sweep). Statuses are parameters from attempt.Status.

-- name: booking_attempt_oldest_unknown_age
-- Seconds from the oldest unknown_since of status $2 to $1 (NULL when none).
SELECT extract(epoch FROM $1 - min(unknown_since))::float8 FROM booking_attempt WHERE status = $2;

-- name: booking_attempt_stale_candidates
-- Attempts in status $4 recorded before $1, at most $2, oldest first; next_check_at of such an
-- attempt is the retry of a sweep that failed for its own data: skipped until $3.
SELECT id, tenant_id, booking_intent_id, idempotency_key, lease_token FROM booking_attempt
WHERE status = $4 AND created_at < $1 AND (next_check_at IS NULL OR next_check_at <= $3)
ORDER BY created_at LIMIT $2;
