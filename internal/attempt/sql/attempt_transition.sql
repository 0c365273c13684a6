-- attempt_transition: the audit trail, one row per state change and per fact recorded without
-- one (docs/design.md#storage-rules). The bulk path copies rows in (COPY, no statement).

-- name: attempt_transition_insert
INSERT INTO attempt_transition (attempt_id, from_status, to_status, cause, event_id, lookup, actor, reason, note)
VALUES ($1, nullif($2, ''), $3, $4, nullif($5, ''), $6, nullif($7, ''), nullif($8, ''), $9);
