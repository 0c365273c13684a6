-- What the sessions of a line's database are doing (e2e_bench_test.go, e2eProfile), sampled
-- every 10 ms on a connection of its own.

-- name: activity_sample
-- The sessions of this database opened by role $1 (the ingester's) other than application $2's
-- (the bench's own), flagged true, and PostgreSQL's shared processes (cluster-wide), flagged
-- false: pid, backend type, state, wait event, the statement running or last run.
SELECT pid, coalesce(backend_type, ''), coalesce(state, ''), coalesce(wait_event_type, ''),
       coalesce(wait_event, ''), coalesce(query, ''), backend_type = 'client backend'
FROM pg_stat_activity
WHERE pid <> pg_backend_pid()
  AND ((datname = current_database() AND usename = $1 AND application_name <> $2 AND backend_type = 'client backend')
       OR backend_type IN ('walwriter', 'checkpointer', 'background writer', 'autovacuum worker', 'autovacuum launcher'));
