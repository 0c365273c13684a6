-- escalation: one row per (attempt, reason), inserted insert-first with its outbox row
-- (docs/design.md#escalations). States are parameters from attempt.EscalationStates().

-- name: escalation_insert
INSERT INTO escalation (escalation_id, attempt_id, tenant_id, reason, state) VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (attempt_id, reason) DO NOTHING;

-- name: escalation_state
SELECT state FROM escalation WHERE attempt_id = $1 AND reason = $2;

-- name: escalation_states_of_attempts
-- The bulk path's read of its escalated attempts' escalations ($1 their ids).
SELECT attempt_id, reason, state FROM escalation WHERE attempt_id = ANY($1::uuid[]);

-- name: escalation_close_many
-- The batch's closes: $1 the escalation ids, $2 closed_by and $3 actor ('' none)
-- of each, $4 closed, $5 open.
UPDATE escalation e SET state = $4, closed_at = now(), closed_by = u.closed_by, actor = nullif(u.actor, '')
FROM unnest($1::uuid[], $2::text[], $3::text[]) AS u(id, closed_by, actor)
WHERE e.escalation_id = u.id AND e.state = $5;
