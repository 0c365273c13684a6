-- +goose Up
-- The three foreign keys on the hot path go (issue 12; docs/decisions.md "No foreign keys on the
-- hot path"; figures in docs/performance.md "Foreign keys"): attempt_transition → booking_attempt,
-- provider_reference_claim → booking_attempt and booking_attempt → booking_intent. Each was a
-- trigger query per row written (SELECT … FOR KEY SHARE of the parent, ~12 µs, and a LOCK record
-- in the WAL), about two per event. Their parents are written by the same transaction as the
-- rows that point at them (attempt.Bulk: the intent locked first, the attempt before its audit
-- and claims), and nothing deletes an intent or an attempt. What they held is checked instead by
-- migrations.Orphans: after every test's database (pgtest) and by the run checker
-- (internal/harness/check, `bookrecon load`, the demo). The rare rows keep theirs (escalation,
-- anomaly).
--
-- Dropping a constraint takes each table's ACCESS EXCLUSIVE lock for a moment; lock_timeout
-- makes the migration fail at once, changing nothing, behind a long transaction of a running
-- service, instead of queueing every writer behind it.
SET LOCAL lock_timeout = '10s';
ALTER TABLE attempt_transition DROP CONSTRAINT attempt_transition_attempt_id_fkey;
ALTER TABLE provider_reference_claim DROP CONSTRAINT provider_reference_claim_attempt_id_fkey;
ALTER TABLE booking_attempt DROP CONSTRAINT booking_attempt_tenant_id_booking_intent_id_fkey;

-- +goose Down
-- Validated as they are added: an orphan row makes the down migration fail, naming it.
ALTER TABLE booking_attempt ADD CONSTRAINT booking_attempt_tenant_id_booking_intent_id_fkey
    FOREIGN KEY (tenant_id, booking_intent_id) REFERENCES booking_intent (tenant_id, booking_intent_id);
ALTER TABLE provider_reference_claim ADD CONSTRAINT provider_reference_claim_attempt_id_fkey
    FOREIGN KEY (attempt_id) REFERENCES booking_attempt (id);
ALTER TABLE attempt_transition ADD CONSTRAINT attempt_transition_attempt_id_fkey
    FOREIGN KEY (attempt_id) REFERENCES booking_attempt (id);
