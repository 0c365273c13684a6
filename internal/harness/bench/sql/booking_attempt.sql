-- booking_attempt statements of the bare reference lines (ingest_bench_test.go): the state
-- upsert, nothing else.

-- name: booking_attempt_upsert_bare_batch
INSERT INTO booking_attempt (id, tenant_id, booking_intent_id, operation, subject, operation_version,
    idempotency_key, provider, status, first_event_at, window_start)
    SELECT gen_random_uuid(), t, i, 'BOOK', i, 1, k, 'sim-hotels', s, now(), now() FROM unnest($1::text[], $2::text[], $3::text[], $4::text[]) AS u(t, i, k, s)
    ON CONFLICT (tenant_id, idempotency_key) DO UPDATE SET status = excluded.status, updated_at = now();

-- name: booking_attempt_upsert_bare_one
INSERT INTO booking_attempt (id, tenant_id, booking_intent_id, operation, subject, operation_version,
    idempotency_key, provider, status, first_event_at, window_start)
    VALUES (gen_random_uuid(), $1, $2, 'BOOK', $2, 1, $3, 'sim-hotels', $4, now(), now())
    ON CONFLICT (tenant_id, idempotency_key) DO UPDATE SET status = excluded.status, updated_at = now();
