-- booking_intent: created insert-first by an intent's first event and locked (ON CONFLICT DO
-- UPDATE takes the row lock) by every transaction that creates or changes an attempt of it
-- (docs/design.md#storage-rules: lock order intent → attempts → claims and escalations).

-- name: booking_intent_lock
INSERT INTO booking_intent (tenant_id, booking_intent_id) VALUES ($1, $2)
ON CONFLICT (tenant_id, booking_intent_id) DO UPDATE SET tenant_id = excluded.tenant_id;

-- name: booking_intent_lock_many
-- $1 tenants, $2 intents: locked in (tenant, intent) order, so two batches cannot deadlock.
INSERT INTO booking_intent (tenant_id, booking_intent_id)
SELECT t, i FROM unnest($1::text[], $2::text[]) AS u(t, i) ORDER BY t, i
ON CONFLICT (tenant_id, booking_intent_id) DO UPDATE SET tenant_id = excluded.tenant_id;

-- name: clock_now
-- The transaction's database clock: now() is the transaction's start time, so one read serves
-- every transition of the transaction.
SELECT now();
