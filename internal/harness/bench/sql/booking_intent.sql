-- booking_intent statements of the bare reference lines (ingest_bench_test.go).

-- name: booking_intent_insert_bare_batch
INSERT INTO booking_intent SELECT DISTINCT * FROM unnest($1::text[], $2::text[]) ON CONFLICT DO NOTHING;

-- name: booking_intent_insert_bare_one
INSERT INTO booking_intent VALUES ($1, $2) ON CONFLICT DO NOTHING;
