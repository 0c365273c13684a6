-- +goose Up
-- bookrecon schema v1. Rules: docs/design.md#storage-rules, docs/design.md#attempt-states,
-- docs/design.md#escalations.

-- processed_event: insert-first dedup of every consumed record, partitioned by the UTC day of
-- the event's occurredAt (a deterministic property of the event, so a redelivery lands on the
-- same partition). Partitions are created and dropped by processedevent.Store (docs/retention.md).
CREATE TABLE processed_event (
    consumer      text        NOT NULL, -- consumer group + "/" + topic
    tenant_id     text        NOT NULL,
    event_id      text        NOT NULL,
    occurred_day  date        NOT NULL,
    event_hash    text        NOT NULL, -- SHA-256 of the record's RFC 8785 canonical JSON
    processed_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, tenant_id, event_id, occurred_day)
) PARTITION BY RANGE (occurred_day);

-- booking_intent: one row per (tenant, intent), created insert-first by the intent's first
-- event; every transaction that creates or changes an attempt locks it first (FOR UPDATE).
CREATE TABLE booking_intent (
    tenant_id          text        NOT NULL,
    booking_intent_id  text        NOT NULL,
    created_at         timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, booking_intent_id)
);

CREATE TABLE booking_attempt (
    id                         uuid        PRIMARY KEY, -- UUIDv7
    tenant_id                  text        NOT NULL,
    booking_intent_id          text        NOT NULL,
    operation                  text        NOT NULL CHECK (operation IN ('BOOK','PAYMENT_AUTHORIZE','PAYMENT_CAPTURE','MODIFY','CANCEL','REFUND')),
    subject                    text        NOT NULL,
    operation_version          integer     NOT NULL CHECK (operation_version >= 1),
    idempotency_key            text        NOT NULL,
    provider                   text        NOT NULL,
    status                     text        NOT NULL CHECK (status IN ('IN_PROGRESS','UNKNOWN','CONFIRMED','FAILED')),
    resolution_source          text        CHECK (resolution_source IN ('event','not_sent','provider_reference','client_reference','fingerprint','authoritative_not_found','manual')),
    request                    jsonb,
    request_hash               text,
    fingerprint                text,
    client_reference           text,
    provider_session_id        text,
    correlation_id             text,
    payment_reference          text,
    subject_provider_reference text,       -- recovery.providerReference: the subject acted on
    provider_idempotency_key   text,       -- the provider's own key, where it deduplicates natively
    provider_reference         text,       -- outcome.providerReference: this attempt's result
    failure_code               text,
    retryable                  boolean,
    timeout_class              text,
    request_sent               boolean,
    started_at                 timestamptz, -- occurredAt of attempt.started, once applied
    first_event_at             timestamptz NOT NULL, -- occurredAt of the first applied event
    window_start               timestamptz NOT NULL, -- docs/design.md#window-start: later of occurredAt and recorded time
    failed_fact_at             timestamptz, -- when the failure became a fact (event occurredAt or verdict time)
    created_at                 timestamptz NOT NULL DEFAULT now(),
    updated_at                 timestamptz NOT NULL DEFAULT now(),
    unknown_since              timestamptz, -- database clock when the pipeline recorded it UNKNOWN
    terminal_at                timestamptz,
    check_count                integer     NOT NULL DEFAULT 0,
    next_check_at              timestamptz,
    last_lookup_result         text,
    lease_owner                text,
    lease_token                bigint      NOT NULL DEFAULT 0, -- fencing token, bumped by every claim
    lease_expires_at           timestamptz,
    gate_judged                boolean     NOT NULL DEFAULT false,
    blind_retry                boolean     NOT NULL DEFAULT false,
    deadline_done              boolean     NOT NULL DEFAULT false, -- the escalator has judged its deadline
    FOREIGN KEY (tenant_id, booking_intent_id) REFERENCES booking_intent (tenant_id, booking_intent_id),
    UNIQUE (tenant_id, idempotency_key),
    UNIQUE (tenant_id, booking_intent_id, operation, subject, operation_version)
);
-- Claims scan only due UNKNOWN rows: cost grows with the due set, not the table.
CREATE INDEX booking_attempt_due ON booking_attempt (next_check_at) WHERE status = 'UNKNOWN';
CREATE INDEX booking_attempt_in_progress ON booking_attempt (created_at) WHERE status = 'IN_PROGRESS';
-- The escalator's scan: UNKNOWN attempts whose deadline has not been judged yet.
CREATE INDEX booking_attempt_deadline ON booking_attempt (unknown_since) WHERE status = 'UNKNOWN' AND NOT deadline_done;

-- attempt_transition: the audit trail. Every state change, and every fact recorded without one
-- (repeats, stale reports, late verdicts), with its cause: an event, a lookup, or actor + reason.
CREATE TABLE attempt_transition (
    id           bigserial   PRIMARY KEY,
    attempt_id   uuid        NOT NULL REFERENCES booking_attempt (id),
    from_status  text,
    to_status    text        NOT NULL,
    cause        text        NOT NULL CHECK (cause IN ('event','lookup','manual','timeout')),
    event_id     text,
    lookup       jsonb,
    actor        text,
    reason       text,
    note         text        NOT NULL DEFAULT '',
    created_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX attempt_transition_attempt ON attempt_transition (attempt_id, id);

-- anomaly: every detection of a rule breach, each time it happens (counted and logged); the
-- escalation table keeps one row per (attempt, reason).
CREATE TABLE anomaly (
    id          bigserial   PRIMARY KEY,
    tenant_id   text        NOT NULL,
    attempt_id  uuid        REFERENCES booking_attempt (id),
    kind        text        NOT NULL,
    event_id    text,
    detail      jsonb       NOT NULL DEFAULT '{}',
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX anomaly_kind ON anomaly (kind, created_at);

CREATE TABLE escalation (
    escalation_id  uuid        PRIMARY KEY,
    attempt_id     uuid        NOT NULL REFERENCES booking_attempt (id),
    tenant_id      text        NOT NULL,
    reason         text        NOT NULL CHECK (reason IN ('deadline_exceeded','ambiguous_match','no_lookup_capability','key_conflict','blind_retry','duplicate_booking','duplicate_provider_reference','contradiction')),
    state          text        NOT NULL DEFAULT 'open' CHECK (state IN ('open','closed')),
    opened_at      timestamptz NOT NULL DEFAULT now(),
    closed_at      timestamptz,
    closed_by      text        CHECK (closed_by IN ('event','lookup','manual')),
    actor          text,
    UNIQUE (attempt_id, reason)
);
CREATE INDEX escalation_open ON escalation (opened_at) WHERE state = 'open';

-- provider_reference_claim: insert-first owner of an outcome provider reference, across tenants.
CREATE TABLE provider_reference_claim (
    provider    text        NOT NULL,
    operation   text        NOT NULL,
    reference   text        NOT NULL,
    attempt_id  uuid        NOT NULL REFERENCES booking_attempt (id),
    tenant_id   text        NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (provider, operation, reference)
);

-- pending_decision: a manual decision for an attempt that does not exist yet or is IN_PROGRESS,
-- applied by the transaction that next makes the attempt UNKNOWN or terminal.
CREATE TABLE pending_decision (
    seq              bigserial   NOT NULL, -- arrival order: decisions kept in one transaction share created_at
    tenant_id        text        NOT NULL,
    idempotency_key  text        NOT NULL,
    event_id         text        NOT NULL,
    decision         jsonb       NOT NULL,
    created_at       timestamptz NOT NULL DEFAULT now(),
    applied_at       timestamptz,
    PRIMARY KEY (tenant_id, idempotency_key, event_id)
);

-- outbox: the transactional outbox. Rows commit with the state change that caused them; the
-- relay publishes unpublished rows in id order and marks them published.
CREATE TABLE outbox (
    id            bigserial   PRIMARY KEY,
    topic         text        NOT NULL,
    record_key    bytea,
    value         bytea       NOT NULL,
    headers       jsonb       NOT NULL DEFAULT '[]',
    event_id      text        NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    published_at  timestamptz
);
CREATE INDEX outbox_unpublished ON outbox (id) WHERE published_at IS NULL;
-- One row per fact: output ids are deterministic, and a dead letter's id is its source position.
CREATE UNIQUE INDEX outbox_fact ON outbox (topic, event_id);

-- +goose Down
DROP TABLE outbox, pending_decision, provider_reference_claim, escalation, anomaly,
    attempt_transition, booking_attempt, booking_intent, processed_event;
