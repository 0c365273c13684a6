-- +goose Up
-- One bad record never stops a stage: a candidate whose own data the database refuses (SQLSTATE
-- classes 22, 23, 54) is recorded as failed on its row, retried on a backoff persisted in the
-- row, and the loop goes on with the others. An outage is never recorded here.

-- The escalator's deadline judgement of the attempt: failures so far, the last error, and when
-- the next try is due (the escalator's scan skips the attempt until then; the scan still reads
-- booking_attempt_deadline, this is a filter on it).
ALTER TABLE booking_attempt
    ADD COLUMN escalation_failures  integer NOT NULL DEFAULT 0,
    ADD COLUMN escalation_error     text,
    ADD COLUMN escalation_retry_at  timestamptz,
-- The reconciler's writes for the attempt (a check's verdict, the stale sweep): consecutive
-- failures and the last error. The retry is next_check_at, moved on by the backoff; for an
-- IN_PROGRESS attempt it is the stale sweep's retry.
    ADD COLUMN check_failures       integer NOT NULL DEFAULT 0,
    ADD COLUMN check_error          text;

-- A kept manual decision that failed to apply in the transaction that settled its attempt: that
-- transaction rolled back to a savepoint, committed the attempt's own transition and marked the
-- decision failed. It is never applied later (ops re-send the decision once the cause is fixed).
ALTER TABLE pending_decision
    ADD COLUMN failed_at       timestamptz,
    ADD COLUMN failure_reason  text;

-- +goose Down
ALTER TABLE pending_decision DROP COLUMN failure_reason, DROP COLUMN failed_at;
ALTER TABLE booking_attempt DROP COLUMN check_error, DROP COLUMN check_failures, DROP COLUMN escalation_retry_at,
    DROP COLUMN escalation_error, DROP COLUMN escalation_failures;
