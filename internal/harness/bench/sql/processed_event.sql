-- processed_event statements of the ingest benchmarks (ingest_bench_test.go). The bare
-- reference lines' statements are the bare minimum an ingester writes: kept exactly as they were.

-- name: processed_event_count
SELECT count(*) FROM processed_event;

-- name: processed_event_insert_bare_batch
INSERT INTO processed_event (consumer, tenant_id, event_id, occurred_day, event_hash)
    SELECT 'ceiling', * FROM unnest($1::text[], $2::text[], $3::date[], $4::text[]) ON CONFLICT DO NOTHING RETURNING event_id;

-- name: processed_event_insert_bare_one
INSERT INTO processed_event (consumer, tenant_id, event_id, occurred_day, event_hash)
    VALUES ('baseline', $1, $2, $3, $4) ON CONFLICT DO NOTHING;
