-- anomaly: every detection of a rule breach, each time it happens.

-- name: anomaly_insert
INSERT INTO anomaly (tenant_id, attempt_id, kind, event_id, detail) VALUES ($1, $2, $3, nullif($4, ''), $5);
