-- +goose Up
-- outbox_lease elects the one active outbox relay for the whole outbox (docs/design.md#outbox): a
-- lease row with an expiry, re-asserted by its holder on a timer, and a fencing token bumped by
-- every acquisition. The holder checks it before every publish and every mark, and carries the
-- token on every record it publishes. It works through a transaction pooler (no session state).
CREATE TABLE outbox_lease (
    name        text        PRIMARY KEY CHECK (name = 'outbox'),
    holder      text        NOT NULL,
    token       bigint      NOT NULL CHECK (token >= 1),
    acquired_at timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL
);

-- +goose Down
DROP TABLE outbox_lease;
