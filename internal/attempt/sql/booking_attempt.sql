-- booking_attempt: written by internal/attempt only. Whole attempts are read through the
-- booking_attempt_row view (migrations 00006), whose columns scanRow reads in order. Every
-- state a statement stores was decided in Go (transition.go); no statement decides one.

-- name: booking_attempt_by_key
SELECT * FROM booking_attempt_row WHERE tenant_id = $1 AND idempotency_key = $2 FOR UPDATE;

-- name: booking_attempt_by_id
SELECT * FROM booking_attempt_row WHERE id = $1 FOR UPDATE;

-- name: booking_attempt_read
-- Without a lock: another intent's attempt (a provider reference's owner), or a plain read.
SELECT * FROM booking_attempt_row WHERE id = $1;

-- name: booking_attempt_of_intents_or_keys
-- $1 tenants, $2 intents: every attempt of a batch's intents; $3 tenants, $4 keys: and every
-- attempt with one of its keys (another intent's, as booking_attempt_by_key finds it); locked in
-- id order.
-- The ids are probed intent by intent and key by key (LATERAL, OFFSET 0 / LIMIT 1 keep each a
-- parameterised index scan) and read back by primary key (= ANY of the array computed once):
-- joined plainly, the planner scanned booking_attempt whole three times for every batch, and the
-- read grew with the table (TestBatchReadsProbeIndexes).
SELECT * FROM booking_attempt_row
WHERE id = ANY (ARRAY(
    SELECT a.id FROM unnest($1::text[], $2::text[]) AS u(t, i)
    CROSS JOIN LATERAL (SELECT id FROM booking_attempt WHERE tenant_id = u.t AND booking_intent_id = u.i OFFSET 0) a
    UNION
    SELECT a.id FROM unnest($3::text[], $4::text[]) AS u(t, k)
    CROSS JOIN LATERAL (SELECT id FROM booking_attempt WHERE tenant_id = u.t AND idempotency_key = u.k LIMIT 1) a))
ORDER BY id FOR UPDATE;

-- name: booking_attempt_insert
-- A one-step batch's new attempt, as its step leaves it (a batch of several copies them in);
-- ON CONFLICT: created meanwhile under another lock.
INSERT INTO booking_attempt (id, tenant_id, booking_intent_id, operation, subject, operation_version,
    idempotency_key, provider, status, resolution_source, request, request_hash, fingerprint, client_reference,
    provider_session_id, correlation_id, payment_reference, subject_provider_reference, provider_idempotency_key,
    provider_reference, failure_code, retryable, timeout_class, request_sent, started_at, first_event_at, window_start,
    failed_fact_at, unknown_since, terminal_at, next_check_at, created_at, updated_at, gate_judged, blind_retry)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, nullif($10, ''), $11, nullif($12, ''), nullif($13, ''), nullif($14, ''),
    nullif($15, ''), nullif($16, ''), nullif($17, ''), nullif($18, ''), nullif($19, ''), nullif($20, ''), nullif($21, ''),
    $22, nullif($23, ''), $24, $25, $26, $27, $28, $29, $30, $31, $32, $32, $33, $34)
ON CONFLICT DO NOTHING;

-- name: booking_attempt_record_check
-- A check that did not settle the attempt, fenced by the lease token and $5 = UNKNOWN
-- (docs/design.md#reconciliation: every reconciler write carries the fence).
UPDATE booking_attempt SET check_count = $3, check_failures = 0, next_check_at = $4,
    last_lookup_result = nullif($6, ''), lease_owner = NULL, lease_expires_at = NULL, updated_at = now()
WHERE id = $1 AND lease_token = $2 AND status = $5;

-- name: booking_attempt_record_reference_many
-- The batch's references recorded by a repeated outcome_unknown (booking_attempt_record_reference,
-- one row per array element).
UPDATE booking_attempt a SET provider_reference = u.ref, updated_at = now()
FROM unnest($1::uuid[], $2::text[]) AS u(id, ref)
WHERE a.id = u.id;

-- name: booking_attempt_mark_blind_retry
UPDATE booking_attempt SET blind_retry = true WHERE id = $1;

-- name: booking_attempt_mark_gate_many
-- The batch's gate judgements (gate_judged, and blind_retry where $2[i]), one row per array
-- element; once raised a blind retry stays raised.
UPDATE booking_attempt a SET gate_judged = true, blind_retry = a.blind_retry OR u.blind
FROM unnest($1::uuid[], $2::bool[]) AS u(id, blind)
WHERE a.id = u.id;

-- name: booking_attempt_mark_deadline_done
UPDATE booking_attempt SET deadline_done = true WHERE id = $1;

-- name: booking_attempt_update_many
-- The bulk path's changed attempts, state decided in Go, one row per array element; the lease
-- is released.
UPDATE booking_attempt a SET status = u.status, resolution_source = nullif(u.source, ''),
    provider_reference = nullif(u.ref, ''), failure_code = nullif(u.code, ''), retryable = u.retryable,
    timeout_class = nullif(u.tc, ''), window_start = u.win, failed_fact_at = u.failed_at,
    unknown_since = u.unknown_since, terminal_at = u.terminal_at, next_check_at = u.next_check,
    lease_owner = NULL, lease_expires_at = NULL, updated_at = now()
FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bool[], $7::timestamptz[],
        $8::timestamptz[], $9::text[], $10::timestamptz[], $11::timestamptz[], $12::timestamptz[])
    AS u(id, status, source, ref, code, retryable, win, failed_at, tc, unknown_since, terminal_at, next_check)
WHERE a.id = u.id;

-- name: booking_attempt_claim_due
-- The reconciler's claim (STYLE.md habit 13): up to $2 attempts in status $8 due at $1, none of
-- the full providers $5, at most $7[i] of provider $6[i] (the earliest due), locked SKIP LOCKED;
-- each gets owner $3, the next fencing token and lease expiry $4 (also its next_check_at, so a
-- reconciler that dies leaves it due again then). It returns the claimed attempts whole: the
-- token, then the row as the statement found it (its lease_token and next_check_at are the
-- claim's: the token returned and $4).
WITH cand AS MATERIALIZED (
        SELECT id, provider, next_check_at FROM booking_attempt
        WHERE status = $8 AND next_check_at <= $1 AND provider <> ALL($5::text[])
        ORDER BY next_check_at
        LIMIT $2
        FOR UPDATE SKIP LOCKED),
    due AS (
        SELECT c.id FROM (SELECT id, provider, row_number() OVER (PARTITION BY provider ORDER BY next_check_at, id) AS nth
            FROM cand) c
        LEFT JOIN unnest($6::text[], $7::int[]) AS cap(provider, free) ON cap.provider = c.provider
        WHERE cap.free IS NULL OR c.nth <= cap.free),
    claimed AS (
        UPDATE booking_attempt a SET lease_owner = $3, lease_token = a.lease_token + 1,
            lease_expires_at = $4, next_check_at = $4
        FROM due WHERE a.id = due.id
        RETURNING a.id, a.lease_token)
SELECT claimed.lease_token, r.* FROM claimed JOIN booking_attempt_row r ON r.id = claimed.id
ORDER BY r.next_check_at, r.id;

-- name: booking_attempt_record_check_failure
-- A reconciler write (a check's verdict, the stale sweep) the database refused for the
-- attempt's own data, fenced by the token and the status the stage saw ($3): the failures so
-- far, the error, the lease released, next_check_at moved on by the backoff.
UPDATE booking_attempt SET check_failures = check_failures + 1, check_error = $4, next_check_at = $5,
    lease_owner = NULL, lease_expires_at = NULL, updated_at = now()
WHERE id = $1 AND lease_token = $2 AND status = $3;

-- name: booking_attempt_check_failures
SELECT check_failures FROM booking_attempt WHERE id = $1 AND lease_token = $2 AND status = $3 FOR UPDATE;

-- name: booking_attempt_record_deadline_failure
-- The escalator's deadline judgement the database refused for the attempt's own data: one more
-- failure, the error, and the retry-at after $3 (the backoff).
UPDATE booking_attempt SET escalation_failures = escalation_failures + 1,
    escalation_error = $2, escalation_retry_at = now() + $3::interval WHERE id = $1 RETURNING escalation_retry_at;

-- name: booking_attempt_fill_many
-- The batch's late starts: the request, hash and recovery identities a start that arrived after
-- the outcome fills in, one row per array element.
UPDATE booking_attempt a SET request = u.request, request_hash = u.hash, fingerprint = nullif(u.fp, ''),
    client_reference = nullif(u.cr, ''), provider_session_id = nullif(u.ps, ''), correlation_id = nullif(u.corr, ''),
    payment_reference = nullif(u.pay, ''), subject_provider_reference = nullif(u.subj, ''),
    provider_idempotency_key = nullif(u.pik, ''), started_at = u.started, window_start = u.win, updated_at = now()
FROM unnest($1::uuid[], $2::jsonb[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[], $9::text[],
        $10::text[], $11::timestamptz[], $12::timestamptz[])
    AS u(id, request, hash, fp, cr, ps, corr, pay, subj, pik, started, win)
WHERE a.id = u.id;

-- name: booking_attempt_links
-- Unlocked, before a poll is split into lanes (ReadLinks, links.go: what each row means).
-- $1 tenants, $2 keys, $3 providers, $4 operations, $11 intents: every key of the poll, once per
-- provider and operation of its events ('' for a key only decisions name), with the intent of
-- its first record; $5 providers, $6 operations, $7 references: its events' outcome references;
-- $8 tenants, $9 keys, $10 references: its decisions'. Rows (kind, tenant, a, b): 'intent' key a
-- → stored intent b; 'kept' key a → kept reference b; 'holder' reference a → holder's intent b.
-- Every lookup is a LATERAL … LIMIT 1 on a unique key (a hash join took a sequential scan of
-- booking_attempt and of the claims every poll: 11 → 47 ms a poll, 60,000 records).
WITH k AS (SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $11::text[]) AS k(tenant_id, idempotency_key, provider, operation, intent)),
    stored AS (
        SELECT k.tenant_id, k.idempotency_key, k.intent, a.booking_intent_id, coalesce(a.provider, nullif(k.provider, '')) AS provider,
            coalesce(a.operation, nullif(k.operation, '')) AS operation
        FROM k LEFT JOIN LATERAL (
            SELECT a.booking_intent_id, a.provider, a.operation FROM booking_attempt a
            WHERE a.tenant_id = k.tenant_id AND a.idempotency_key = k.idempotency_key LIMIT 1) a ON true),
    kept AS (
        SELECT DISTINCT p.tenant_id, p.idempotency_key, p.decision->>'providerReference' AS reference FROM pending_decision p
        WHERE p.applied_at IS NULL AND p.failed_at IS NULL AND p.decision->>'providerReference' <> ''
            AND (p.tenant_id, p.idempotency_key) IN (SELECT tenant_id, idempotency_key FROM k)),
    keyrefs AS (
        SELECT * FROM unnest($8::text[], $9::text[], $10::text[]) AS d(tenant_id, idempotency_key, reference)
        UNION SELECT * FROM kept),
    refs AS (
        SELECT * FROM unnest($5::text[], $6::text[], $7::text[]) AS r(provider, operation, reference)
        UNION SELECT s.provider, s.operation, kr.reference FROM keyrefs kr JOIN stored s USING (tenant_id, idempotency_key)
        WHERE s.provider IS NOT NULL)
SELECT 'intent', tenant_id, idempotency_key, booking_intent_id FROM stored
WHERE booking_intent_id IS NOT NULL AND booking_intent_id IS DISTINCT FROM nullif(intent, '')
UNION ALL SELECT 'kept', tenant_id, idempotency_key, reference FROM kept
UNION ALL SELECT 'holder', a.tenant_id, c.reference, a.booking_intent_id
FROM refs r
CROSS JOIN LATERAL (SELECT c.reference, c.attempt_id FROM provider_reference_claim c
    WHERE c.provider = r.provider AND c.operation = r.operation AND c.reference = r.reference LIMIT 1) c
CROSS JOIN LATERAL (SELECT a.tenant_id, a.booking_intent_id FROM booking_attempt a WHERE a.id = c.attempt_id LIMIT 1) a;
