-- +goose Up
-- The outbox writes less (issue 12; docs/decisions.md "The outbox writes less"; figures in
-- docs/performance.md "Where the WAL goes"):
--
-- 1. A published row leaves the table: the relay deletes it (a ~54 B WAL record) instead of
--    setting published_at (a never-HOT UPDATE that wrote a second ~1.4 kB copy of the row and new
--    entries in every index). Discarded rows stay, with their reason.
-- 2. The fact dedup moves to outbox_fact, one narrow row per (topic, event_id) ever written,
--    kept for good: re-deriving a fact stays a no-op after its row is published and gone.
-- 3. headers is bytea in internal/outbox's compact encoding (headers.go), which leaves out what
--    the row says already (ce_id is the event_id, ce_partitionkey the record key) and writes
--    the known keys and constant values as one-byte codes.
--
-- Run it with every service stopped (docs/deploy.md "Upgrading across 00008"): it locks outbox
-- for its whole run, and a service of the release before it cannot write or publish after it.
-- lock_timeout makes it fail at once, changing nothing, when a running service holds the table.
SET LOCAL lock_timeout = '10s';
DROP INDEX outbox_fact;
CREATE TABLE outbox_fact (
    topic    text NOT NULL,
    event_id text NOT NULL,
    PRIMARY KEY (topic, event_id)
);
INSERT INTO outbox_fact (topic, event_id) SELECT topic, event_id FROM outbox;
DELETE FROM outbox WHERE published_at IS NOT NULL;

DROP INDEX outbox_parked;
DROP INDEX outbox_pending;
ALTER TABLE outbox DROP COLUMN published_at;
-- Pending rows: those not discarded.
CREATE INDEX outbox_pending ON outbox (id) WHERE discarded_at IS NULL;
-- The rows that park their key (00002_outbox_set_aside.sql: by md5, few).
CREATE INDEX outbox_parked ON outbox (topic, md5(record_key), id)
    WHERE discarded_at IS NULL AND (set_aside_at IS NOT NULL OR retry_at IS NOT NULL);

-- The rows pending now keep their headers as literals (code 0, uvarint length, bytes), which
-- the relay decodes like any other.
-- +goose StatementBegin
CREATE FUNCTION pg_temp.outbox_literal(s text) RETURNS bytea LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    b bytea := convert_to(s, 'UTF8');
    n bigint := length(b);
    out bytea := '\x00';
BEGIN
    WHILE n >= 128 LOOP
        out := out || set_byte('\x00', 0, (n % 128 + 128)::int);
        n := n / 128;
    END LOOP;
    RETURN out || set_byte('\x00', 0, n::int) || b;
END $$;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE FUNCTION pg_temp.outbox_headers_bytea(hs jsonb) RETURNS bytea LANGUAGE sql IMMUTABLE AS $$
    SELECT coalesce(string_agg(pg_temp.outbox_literal(h->>'k') || pg_temp.outbox_literal(h->>'v'), '' ORDER BY i), '')
    FROM jsonb_array_elements(hs) WITH ORDINALITY AS e(h, i)
$$;
-- +goose StatementEnd
ALTER TABLE outbox ALTER COLUMN headers DROP DEFAULT;
ALTER TABLE outbox ALTER COLUMN headers TYPE bytea USING pg_temp.outbox_headers_bytea(headers);
ALTER TABLE outbox ALTER COLUMN headers SET DEFAULT '';
DROP FUNCTION pg_temp.outbox_headers_bytea(jsonb);
DROP FUNCTION pg_temp.outbox_literal(text);

-- +goose Down
-- Back to jsonb headers, published_at and the unique index; every fact of outbox_fact without a
-- row comes back as a published row without value or headers, so the old dedup still sees it.
-- +goose StatementBegin
CREATE FUNCTION pg_temp.outbox_headers_json(b bytea, event_id text, record_key bytea) RETURNS jsonb LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    keys text[] := ARRAY['ce_specversion', 'ce_id', 'ce_source', 'ce_type', 'ce_time', 'ce_subject', 'ce_partitionkey', 'content-type',
        'bookrecon.dlq.reason', 'bookrecon.dlq.detail', 'bookrecon.source.topic', 'bookrecon.source.partition', 'bookrecon.source.offset'];
    vals text[] := ARRAY['1.0', 'application/json', '/bookrecon', 'attempt.resolved', 'escalation.opened', 'escalation.closed'];
    out jsonb := '[]';
    p int := 0;
    part int;
    c int;
    n bigint;
    shift bigint;
    x int;
    s text[];
BEGIN
    WHILE p < length(b) LOOP
        s := ARRAY[]::text[];
        FOR part IN 1..2 LOOP
            c := get_byte(b, p);
            p := p + 1;
            IF c = 0 THEN
                n := 0; shift := 1;
                LOOP
                    x := get_byte(b, p);
                    p := p + 1;
                    n := n + (x % 128) * shift;
                    shift := shift * 128;
                    EXIT WHEN x < 128;
                END LOOP;
                s := s || convert_from(substring(b FROM p + 1 FOR n::int), 'UTF8');
                p := p + n::int;
            ELSIF part = 1 THEN
                s := s || keys[c];
            ELSIF c = 1 THEN
                s := s || event_id;
            ELSIF c = 2 THEN
                s := s || convert_from(record_key, 'UTF8');
            ELSE
                s := s || vals[c - 2];
            END IF;
        END LOOP;
        out := out || jsonb_build_array(jsonb_build_object('k', s[1], 'v', s[2]));
    END LOOP;
    RETURN out;
END $$;
-- +goose StatementEnd
ALTER TABLE outbox ALTER COLUMN headers DROP DEFAULT;
ALTER TABLE outbox ALTER COLUMN headers TYPE jsonb USING pg_temp.outbox_headers_json(headers, event_id, record_key);
ALTER TABLE outbox ALTER COLUMN headers SET DEFAULT '[]';
DROP FUNCTION pg_temp.outbox_headers_json(bytea, text, bytea);
DROP INDEX outbox_parked;
DROP INDEX outbox_pending;
ALTER TABLE outbox ADD COLUMN published_at timestamptz;
INSERT INTO outbox (topic, value, event_id, published_at)
SELECT f.topic, NULL, f.event_id, now() FROM outbox_fact f
WHERE NOT EXISTS (SELECT 1 FROM outbox o WHERE o.topic = f.topic AND o.event_id = f.event_id);
CREATE INDEX outbox_pending ON outbox (id) WHERE published_at IS NULL AND discarded_at IS NULL;
CREATE INDEX outbox_parked ON outbox (topic, md5(record_key), id)
    WHERE published_at IS NULL AND discarded_at IS NULL AND (set_aside_at IS NOT NULL OR retry_at IS NOT NULL);
DROP TABLE outbox_fact;
CREATE UNIQUE INDEX outbox_fact ON outbox (topic, event_id);
