-- The relay's statements on the outbox table: its round's read, its deletes of the rows it
-- published and its failure records. The writer's (insert, set-aside tooling, counts) are
-- internal/outbox/sql/outbox.sql.
-- Every write is fenced: it holds only while the relay's token is the outbox_lease row's,
-- unexpired (outbox_lease.sql).

-- name: outbox_round_plan
-- Run just before outbox_select_round, in the same transaction (one pipelined batch): it pins
-- the round's plan to the ordered scan of outbox_pending that stops after $1 rows. Left to the
-- planner, a custom plan on the small or missing statistics of a table that is nearly empty
-- between rounds is a bitmap heap scan of every outbox_pending entry and a sort: it visits every
-- heap page of every row deleted since the table's last vacuum (LP_DEAD hints are set by ordered
-- index scans only), and its cost grows with the rows published until autovacuum comes
-- (docs/performance.md, "The relay's round read, sometimes runaway"). The settings are local
-- to the transaction, so the read keeps no session state.
SELECT set_config('enable_sort', 'off', true), set_config('enable_bitmapscan', 'off', true);

-- name: outbox_select_round
-- $1 batch, $2 paused topics. Rows in id order that are pending (not discarded), not set aside,
-- not waiting to retry, not of a paused topic and not behind such a row of their (topic, record
-- key) — compared by md5 as the parking index does, since a key may exceed a btree entry.
SELECT id, topic, record_key, value, headers, publish_failures, event_id FROM outbox o
WHERE discarded_at IS NULL AND set_aside_at IS NULL
    AND (retry_at IS NULL OR retry_at <= now())
    AND NOT (topic = ANY($2::text[]))
    AND NOT EXISTS (SELECT 1 FROM outbox p
        WHERE p.topic = o.topic AND md5(p.record_key) = md5(o.record_key) AND p.id < o.id
            AND p.discarded_at IS NULL
            AND (p.set_aside_at IS NOT NULL OR p.retry_at IS NOT NULL) AND (p.set_aside_at IS NOT NULL OR p.retry_at > now()))
ORDER BY id LIMIT $1;

-- name: outbox_delete_published
-- $1 ids, $2 token: the rows published leave the outbox, fenced (their facts stay in
-- outbox_fact, so a re-derived fact is still a no-op). A delete writes a ~54 B WAL record, where
-- setting published_at rewrote the whole row and every index (docs/performance.md).
DELETE FROM outbox
WHERE id = ANY($1)
    AND EXISTS (SELECT 1 FROM outbox_lease WHERE name = 'outbox' AND token = $2 AND expires_at > now());

-- name: outbox_record_failures
-- $1 ids, $2 error classes, $3 error texts, $4 set aside (the class is a record class),
-- $5 retry waits in milliseconds (used when not set aside), $6 token: counts the failure, keeps
-- the error, and sets the row aside or schedules its retry, fenced.
UPDATE outbox o SET publish_failures = o.publish_failures + 1, error_class = f.class, last_error = f.err,
    set_aside_at = CASE WHEN f.aside THEN now() END,
    retry_at = CASE WHEN NOT f.aside THEN now() + f.ms * interval '1 millisecond' END
FROM unnest($1::bigint[], $2::text[], $3::text[], $4::boolean[], $5::bigint[]) AS f(id, class, err, aside, ms)
WHERE o.id = f.id
    AND EXISTS (SELECT 1 FROM outbox_lease WHERE name = 'outbox' AND token = $6 AND expires_at > now());
