-- The bench's WAL meter (wal_bench_test.go). Every statement runs on a connection of its own
-- to the database under test.

-- name: wal_reserve
-- A temporary physical slot that reserves WAL from now on, so pg_walinspect can still read the
-- run's WAL after checkpoints; dropped with the session (superuser or REPLICATION).
SELECT pg_create_physical_replication_slot($1, true, true);

-- name: wal_extension_create
CREATE EXTENSION IF NOT EXISTS pg_walinspect;

-- name: wal_checkpoint
-- Before each line (startWAL): the dirty buffers of the lines before it are written now, not
-- by a checkpoint that starts during it.
CHECKPOINT;

-- name: wal_position
-- pg_stat_wal's wal_bytes is cluster-wide: every database's writes are in it. The position is
-- the flushed one: pg_walinspect reads no further.
SELECT w.wal_bytes::bigint, pg_current_wal_flush_lsn()::text, d.oid::bigint
FROM pg_stat_wal w, pg_database d WHERE d.datname = current_database();

-- name: wal_backends_count
-- Sessions of this database other than the meter's: their WAL statistics reach pg_stat_wal
-- when they end (or go idle), so the meter reads wal_bytes once they are gone.
SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid();

-- name: wal_records_by_relation
-- The WAL between $1 and $2 written for this database ($3, its oid): every record whose first
-- block is one of its relations, plus the records without blocks (commits) of the transactions
-- that wrote those. Grouped by relation (TOAST under its table, processed_event's daily
-- partitions under their parent's names) and record type; bytes include full-page images.
WITH r AS MATERIALIZED (
    SELECT xid, resource_manager AS rm, record_type AS rt, record_length AS len, fpi_length AS fpi,
           regexp_match(block_ref, 'rel \d+/(\d+)/(\d+)') AS m
    FROM pg_get_wal_records_info($1::pg_lsn, $2::pg_lsn)
), mine AS (
    SELECT DISTINCT xid FROM r WHERE m[1]::oid = $3::oid AND xid <> '0'::xid
), rel AS (
    SELECT pg_relation_filenode(c.oid) AS fn,
           regexp_replace(CASE WHEN n.nspname = 'pg_toast' THEN coalesce(o.relname, oi.relname) || ' (TOAST)' ELSE c.relname END,
                          '^processed_event_\d{8}', 'processed_event') AS name
    FROM pg_class c
    JOIN pg_namespace n ON n.oid = c.relnamespace
    LEFT JOIN pg_class o ON o.reltoastrelid = c.oid
    LEFT JOIN pg_index i ON i.indexrelid = c.oid
    LEFT JOIN pg_class oi ON oi.reltoastrelid = i.indrelid
)
SELECT coalesce(rel.name, CASE WHEN r.m IS NULL THEN '(no relation)' ELSE '(relfilenode ' || r.m[2] || ')' END) AS relation,
       r.rm || ' ' || r.rt AS record, count(*)::bigint, sum(r.len)::bigint, sum(r.fpi)::bigint
FROM r LEFT JOIN rel ON rel.fn = r.m[2]::oid
WHERE r.m[1]::oid = $3::oid OR (r.m IS NULL AND r.xid IN (SELECT xid FROM mine))
GROUP BY 1, 2;
