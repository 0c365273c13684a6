-- The outbox writer's statements on the outbox table (migrations/sql/00001_schema.sql,
-- 00002_outbox_set_aside.sql). The relay's own statements on it (its round's read, marks and
-- failure records) are internal/relay/sql/outbox.sql.
--
-- A row is set aside while set_aside_at is set and it is neither published nor discarded;
-- unpublished while neither published_at nor discarded_at is set.

-- name: outbox_insert
-- $1 topic, $2 record key, $3 value, $4 headers (JSON), $5 eventId; a repeat is a no-op.
INSERT INTO outbox (topic, record_key, value, headers, event_id) VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (topic, event_id) DO NOTHING;

-- name: outbox_insert_many
-- $1..$5 parallel arrays as in outbox_insert; ids ascend in array order.
INSERT INTO outbox (topic, record_key, value, headers, event_id)
SELECT t, k, v, h::jsonb, e FROM unnest($1::text[], $2::bytea[], $3::bytea[], $4::text[], $5::text[])
    WITH ORDINALITY AS u(t, k, v, h, e, n) ORDER BY n
ON CONFLICT (topic, event_id) DO NOTHING;

-- name: outbox_list_set_aside
-- $1 limit; oldest first. The size is that of key, value and headers.
SELECT id, topic, event_id, coalesce(length(record_key), 0) + coalesce(length(value), 0) + length(headers::text),
       publish_failures, error_class, coalesce(last_error, ''), set_aside_at
FROM outbox
WHERE set_aside_at IS NOT NULL AND published_at IS NULL AND discarded_at IS NULL
ORDER BY id LIMIT $1;

-- name: outbox_retry_set_aside
-- $1 id: the relay publishes it on its next round.
UPDATE outbox SET set_aside_at = NULL, retry_at = NULL
WHERE id = $1 AND set_aside_at IS NOT NULL AND published_at IS NULL AND discarded_at IS NULL;

-- name: outbox_discard_set_aside
-- $1 id, $2 the operator's reason: never published.
UPDATE outbox SET discarded_at = now(), discard_reason = $2
WHERE id = $1 AND set_aside_at IS NOT NULL AND published_at IS NULL AND discarded_at IS NULL;

-- name: outbox_count_set_aside
SELECT count(*) FROM outbox
WHERE set_aside_at IS NOT NULL AND published_at IS NULL AND discarded_at IS NULL;

-- name: outbox_count_backlog
-- The unpublished rows and the age of the oldest in seconds (NULL when there is none).
SELECT count(*), extract(epoch FROM now() - min(created_at))::float8
FROM outbox WHERE published_at IS NULL AND discarded_at IS NULL;
