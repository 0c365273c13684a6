-- pending_decision: manual decisions kept for an attempt that did not exist yet or was
-- IN_PROGRESS, applied by the transaction that next makes it UNKNOWN or terminal.

-- name: pending_decision_insert_many
-- The batch's decisions to keep, in array order (seq follows it).
INSERT INTO pending_decision (tenant_id, idempotency_key, event_id, decision)
SELECT t, k, e, d FROM unnest($1::text[], $2::text[], $3::text[], $4::jsonb[]) WITH ORDINALITY AS u(t, k, e, d, n) ORDER BY n
ON CONFLICT DO NOTHING;

-- name: pending_decision_mark_failed
UPDATE pending_decision SET failed_at = now(), failure_reason = $4 WHERE tenant_id = $1 AND idempotency_key = $2 AND event_id = $3;

-- name: pending_decision_mark_applied
UPDATE pending_decision SET applied_at = now() WHERE tenant_id = $1 AND idempotency_key = $2 AND event_id = $3;

-- name: pending_decision_of_keys
-- $1 tenants, $2 keys: the decisions waiting for them, in the order they were kept (the batch's
-- read of what waits; FOR UPDATE: the batch applies or marks them).
SELECT tenant_id, idempotency_key, event_id, decision FROM pending_decision
WHERE applied_at IS NULL AND failed_at IS NULL AND (tenant_id, idempotency_key) IN (SELECT * FROM unnest($1::text[], $2::text[]))
ORDER BY seq FOR UPDATE;
