-- escalation, as the escalator's gauges read it (internal/attempt writes it).

-- name: escalation_open_by_reason
-- Escalations in state $1 (open), by reason: how many, and the age in seconds of the oldest.
SELECT reason, count(*), extract(epoch FROM now() - min(opened_at))::float8
FROM escalation WHERE state = $1 GROUP BY reason;
