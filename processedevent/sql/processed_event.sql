-- processed_event: the insert-first dedup rows (processedevent.Store) and their daily partitions.

-- name: processed_event_insert
-- Claims one event for a consumer; a conflict means it was processed before.
INSERT INTO processed_event (consumer, tenant_id, event_id, occurred_day, event_hash)
VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING

-- name: processed_event_read_hash
SELECT event_hash FROM processed_event
WHERE consumer = $1 AND tenant_id = $2 AND event_id = $3 AND occurred_day = $4

-- name: processed_event_insert_many
-- Claims a batch of events (first occurrences only) for a consumer; returns those it inserted.
INSERT INTO processed_event (consumer, tenant_id, event_id, occurred_day, event_hash)
SELECT $1, t, e, d, h FROM unnest($2::text[], $3::text[], $4::date[], $5::text[]) AS u(t, e, d, h)
ON CONFLICT DO NOTHING RETURNING tenant_id, event_id, occurred_day

-- name: processed_event_read_hashes
SELECT p.tenant_id, p.event_id, p.occurred_day, p.event_hash FROM processed_event p
JOIN unnest($2::text[], $3::text[], $4::date[]) AS u(t, e, d) ON p.tenant_id = u.t AND p.event_id = u.e AND p.occurred_day = u.d
WHERE p.consumer = $1

-- name: processed_event_list_partitions
SELECT c.relname FROM pg_inherits i
JOIN pg_class c ON c.oid = i.inhrelid JOIN pg_class p ON p.oid = i.inhparent
WHERE p.relname = 'processed_event' ORDER BY c.relname

-- name: processed_event_create_partition_ddl
-- The DDL that creates each day's partition, processed_event_YYYYMMDD for [day, day + 1): a DDL
-- statement takes no parameters, so this builds it (format's %I and %L quote the name and the
-- bounds) and the caller runs each.
SELECT format('CREATE TABLE IF NOT EXISTS %I PARTITION OF processed_event FOR VALUES FROM (%L) TO (%L)',
    'processed_event_' || to_char(d, 'YYYYMMDD'), d, d + 1)
FROM unnest($1::date[]) AS u(d)

-- name: processed_event_drop_partition_ddl
-- The DDL that drops each named partition whole (never row by row), built as above.
SELECT format('DROP TABLE IF EXISTS %I', n) FROM unnest($1::text[]) AS u(n)
