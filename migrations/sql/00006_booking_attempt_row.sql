-- +goose Up
-- booking_attempt_row: an attempt as internal/attempt's Row reads it — text columns with NULL as
-- '', and `escalated` (an escalation other than no_lookup_capability exists: its checks go on at
-- the maximum interval, docs/design.md#reconciliation), and `outcome_open` (an outcome escalation
-- is open: turning terminal closes it). One column list for every statement that
-- reads whole attempts (internal/attempt/sql/booking_attempt.sql); SELECT … FOR UPDATE on the
-- view locks the booking_attempt rows.
CREATE VIEW booking_attempt_row AS
SELECT id, tenant_id, booking_intent_id, operation, subject, operation_version, idempotency_key, provider, status,
    coalesce(resolution_source, '') AS resolution_source, coalesce(request_hash, '') AS request_hash,
    coalesce(fingerprint, '') AS fingerprint, coalesce(client_reference, '') AS client_reference,
    coalesce(provider_session_id, '') AS provider_session_id, coalesce(correlation_id, '') AS correlation_id,
    coalesce(payment_reference, '') AS payment_reference, coalesce(subject_provider_reference, '') AS subject_provider_reference,
    coalesce(provider_idempotency_key, '') AS provider_idempotency_key,
    coalesce(provider_reference, '') AS provider_reference, coalesce(failure_code, '') AS failure_code,
    coalesce(retryable, false) AS retryable, coalesce(timeout_class, '') AS timeout_class, request_sent,
    started_at, first_event_at, window_start, failed_fact_at, created_at, unknown_since, terminal_at, next_check_at,
    check_count, coalesce(last_lookup_result, '') AS last_lookup_result, blind_retry, gate_judged, lease_token,
    EXISTS (SELECT 1 FROM escalation e WHERE e.attempt_id = booking_attempt.id AND e.reason <> 'no_lookup_capability') AS escalated,
    EXISTS (SELECT 1 FROM escalation e WHERE e.attempt_id = booking_attempt.id AND e.state = 'open'
        AND e.reason IN ('deadline_exceeded', 'ambiguous_match', 'no_lookup_capability')) AS outcome_open
FROM booking_attempt;

-- +goose Down
DROP VIEW booking_attempt_row;
