-- +goose Up
-- idempotency_key is the Idempotency-Key record of the idempotency package (docs/design.md Part 2
-- "Idempotency-Key semantics"; seed 004): one row per (tenant, principal, key), inserted first
-- (INSERT … ON CONFLICT), never read-then-written.
--
-- Not partitioned, on purpose: a unique index of a partitioned table must include the partition
-- column, so a table partitioned by day or month could hold the same key twice, one row in each
-- partition, and a retry that crosses midnight or a month boundary would run twice. Here the
-- primary key alone guards a key for its whole retention window; expiry is a bounded batch
-- delete (idempotency_key_delete_expired) over idempotency_key_expires_at, and a key reused after
-- its expires_at replaces the old row atomically (ON CONFLICT DO UPDATE … WHERE expires_at <= now).
--
-- state in_flight: claimed, no answer stored yet. In the transactional mode the row is inserted
-- and completed in the effect's own transaction, so no other transaction ever sees it in_flight
-- (token and lease_expires_at stay NULL). In the two-phase mode the claim commits first with a
-- random token and a lease; the answer is stored by an update fenced by the token.
CREATE TABLE idempotency_key (
    tenant_id        text        NOT NULL CHECK (tenant_id <> ''),
    principal        text        NOT NULL CHECK (principal <> ''),
    idem_key         text        NOT NULL CHECK (idem_key ~ '^[\x21-\x7e]{1,255}$'),
    route            text        NOT NULL,
    fingerprint      bytea       NOT NULL CHECK (length(fingerprint) = 32),
    state            text        NOT NULL CHECK (state IN ('in_flight', 'completed')),
    token            uuid,
    lease_expires_at timestamptz,
    status           integer     CHECK (status BETWEEN 100 AND 599),
    location         text,
    content_type     text,
    body             bytea,
    created_at       timestamptz NOT NULL,
    completed_at     timestamptz,
    expires_at       timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, principal, idem_key),
    CHECK ((state = 'completed') = (status IS NOT NULL AND body IS NOT NULL AND completed_at IS NOT NULL)),
    CHECK ((token IS NULL) = (lease_expires_at IS NULL))
);

CREATE INDEX idempotency_key_expires_at ON idempotency_key (expires_at);

-- +goose Down
DROP TABLE idempotency_key;
