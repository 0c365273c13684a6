-- provider_reference_claim: the insert-first owner of an outcome provider reference.

-- name: provider_reference_claim_insert
INSERT INTO provider_reference_claim (provider, operation, reference, attempt_id, tenant_id)
VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING;

-- name: provider_reference_claim_owner
SELECT attempt_id FROM provider_reference_claim WHERE provider = $1 AND operation = $2 AND reference = $3;

-- name: provider_reference_claim_owners
-- The batch's read of who holds its provider references ($1 providers, $2 operations, $3 references).
-- A LATERAL … LIMIT 1 on the primary key: an index probe per reference whatever the statistics
-- say (a hash join took a sequential scan of the whole table for every batch).
SELECT c.provider, c.operation, c.reference, c.attempt_id
FROM (SELECT DISTINCT * FROM unnest($1::text[], $2::text[], $3::text[])) AS u(p, o, r)
CROSS JOIN LATERAL (SELECT provider, operation, reference, attempt_id FROM provider_reference_claim
    WHERE provider = u.p AND operation = u.o AND reference = u.r LIMIT 1) c;

-- name: provider_reference_claim_insert_many
-- Claimed in (provider, operation, reference) order by the caller; returns the claims won.
INSERT INTO provider_reference_claim (provider, operation, reference, attempt_id, tenant_id)
SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::uuid[], $5::text[])
ON CONFLICT DO NOTHING RETURNING provider, operation, reference;
