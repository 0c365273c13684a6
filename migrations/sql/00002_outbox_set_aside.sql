-- +goose Up
-- The relay isolates what it cannot publish (issue "One bad record never stops a stage"):
-- a row the broker refuses for its own sake (MESSAGE_TOO_LARGE, RECORD_LIST_TOO_LARGE,
-- INVALID_RECORD) is set aside with its error until an operator retries or discards it; a row
-- that fails transiently is retried with backoff (retry_at). While a row is unpublished and set
-- aside or waiting to retry, its (topic, record_key) is parked: the key's later rows wait.

-- A dead letter of a Kafka tombstone keeps its null value (docs/design.md#dead-letters: the
-- original bytes).
ALTER TABLE outbox ALTER COLUMN value DROP NOT NULL;

ALTER TABLE outbox
    ADD COLUMN publish_failures integer     NOT NULL DEFAULT 0, -- failed publish tries
    ADD COLUMN last_error       text,                           -- the last failure, as the client reported it
    ADD COLUMN error_class      text        CHECK (error_class IN ('record_too_large','record_list_too_large','invalid_record','transient')),
    ADD COLUMN retry_at         timestamptz,                    -- a transient failure: not before then
    ADD COLUMN set_aside_at     timestamptz,                    -- a record error: kept until retried or discarded
    ADD COLUMN discarded_at     timestamptz,
    ADD COLUMN discard_reason   text,
    ADD CONSTRAINT outbox_discard_reason CHECK ((discarded_at IS NULL) = (discard_reason IS NULL));

-- Pending rows: neither published nor discarded.
DROP INDEX outbox_unpublished;
CREATE INDEX outbox_pending ON outbox (id) WHERE published_at IS NULL AND discarded_at IS NULL;
-- The rows that park their key: few, so the relay's NOT EXISTS probe stays cheap. The key is
-- indexed by its md5: a dead letter keeps its record's key, of any size, and a btree entry has
-- a limit (~2.7 kB) that would make recording the row's failure fail (54000).
CREATE INDEX outbox_parked ON outbox (topic, md5(record_key), id)
    WHERE published_at IS NULL AND discarded_at IS NULL AND (set_aside_at IS NOT NULL OR retry_at IS NOT NULL);

-- +goose Down
DROP INDEX outbox_parked;
DROP INDEX outbox_pending;
CREATE INDEX outbox_unpublished ON outbox (id) WHERE published_at IS NULL;
ALTER TABLE outbox DROP CONSTRAINT outbox_discard_reason,
    DROP COLUMN discard_reason, DROP COLUMN discarded_at, DROP COLUMN set_aside_at, DROP COLUMN retry_at,
    DROP COLUMN error_class, DROP COLUMN last_error, DROP COLUMN publish_failures;
ALTER TABLE outbox ALTER COLUMN value SET NOT NULL;
