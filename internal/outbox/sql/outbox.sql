-- The outbox writer's statements on the outbox and outbox_fact tables (the rows themselves are
-- written by a COPY in outbox.insert)
-- (migrations/sql/00001_schema.sql, 00002_outbox_set_aside.sql, 00008_outbox_write_less.sql).
-- The relay's own statements on the outbox (its round's read, its deletes and failure records)
-- are internal/relay/sql/outbox.sql.
--
-- An outbox row is pending until it is published (the relay deletes it) or discarded
-- (discarded_at, kept with its reason); set aside while pending with set_aside_at set.
-- outbox_fact keeps every (topic, event_id) ever written.

-- name: outbox_fact_insert_many
-- $1 topics, $2 eventIds, as parallel arrays without repeats (InsertMany drops them): records
-- each fact not recorded yet and returns those it recorded. InsertMany then copies the rows of
-- the facts returned into the outbox (COPY), so a fact re-derived writes nothing.
INSERT INTO outbox_fact (topic, event_id)
SELECT * FROM unnest($1::text[], $2::text[])
ON CONFLICT DO NOTHING
RETURNING topic, event_id;

-- name: outbox_list_set_aside
-- $1 limit; oldest first, with what the record's size is computed from.
SELECT id, topic, event_id, record_key, coalesce(length(value), 0), headers,
       publish_failures, error_class, coalesce(last_error, ''), set_aside_at
FROM outbox
WHERE set_aside_at IS NOT NULL AND discarded_at IS NULL
ORDER BY id LIMIT $1;

-- name: outbox_retry_set_aside
-- $1 id: the relay publishes it on its next round.
UPDATE outbox SET set_aside_at = NULL, retry_at = NULL
WHERE id = $1 AND set_aside_at IS NOT NULL AND discarded_at IS NULL;

-- name: outbox_discard_set_aside
-- $1 id, $2 the operator's reason: never published.
UPDATE outbox SET discarded_at = now(), discard_reason = $2
WHERE id = $1 AND set_aside_at IS NOT NULL AND discarded_at IS NULL;

-- name: outbox_count_set_aside
SELECT count(*) FROM outbox WHERE set_aside_at IS NOT NULL AND discarded_at IS NULL;

-- name: outbox_count_backlog
-- The pending rows and the age of the oldest in seconds (NULL when there is none).
SELECT count(*), extract(epoch FROM now() - min(created_at))::float8
FROM outbox WHERE discarded_at IS NULL;
