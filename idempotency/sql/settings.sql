-- Session settings the idempotency package changes for one transaction.

-- name: lock_timeout_set
-- Sets lock_timeout for the rest of the transaction ($1, e.g. '2000ms') and returns the value it
-- had, so the caller can put it back.
SELECT current_setting('lock_timeout') AS previous, set_config('lock_timeout', $1, true) AS now_set;
