-- The relay's election on the outbox_lease row (migrations/sql/00004_outbox_lease.sql): one row,
-- name 'outbox', with its holder, a fencing token bumped by every acquisition and an expiry on
-- the database's clock (river's leader election is the model).

-- name: outbox_lease_renew
-- $1 holder, $2 its token, $3 TTL (interval): extends the hold, keeping the token, only while it
-- has not expired on the database clock. No row: the hold is gone.
UPDATE outbox_lease SET expires_at = now() + $3::interval
WHERE name = 'outbox' AND holder = $1 AND token = $2 AND expires_at > now()
RETURNING token;

-- name: outbox_lease_acquire
-- $1 holder, $2 TTL (interval): takes a free row, or an expired one whoever held it, bumping the
-- token. No row: another relay holds it.
INSERT INTO outbox_lease (name, holder, token, expires_at) VALUES ('outbox', $1, 1, now() + $2::interval)
ON CONFLICT (name) DO UPDATE SET holder = EXCLUDED.holder, token = outbox_lease.token + 1,
    acquired_at = now(), expires_at = EXCLUDED.expires_at
WHERE outbox_lease.expires_at <= now()
RETURNING token;

-- name: outbox_lease_release
-- $1 holder, $2 its token: expires the hold at once (shutdown) so another relay takes over.
UPDATE outbox_lease SET expires_at = now() WHERE name = 'outbox' AND holder = $1 AND token = $2;
