-- What the foreign keys dropped by 00009_hot_foreign_keys.sql held, read back (Orphans in
-- integrity.go): every audit row and every claim names an attempt that exists, every attempt an
-- intent that exists. Each row is one break, described; none is the healthy answer.

-- name: schema_orphans
-- $1 the most rows to return.
(SELECT 'attempt_transition ' || t.id || ' names attempt ' || t.attempt_id || ', which does not exist'
   FROM attempt_transition t
  WHERE NOT EXISTS (SELECT 1 FROM booking_attempt a WHERE a.id = t.attempt_id)
  ORDER BY t.id)
UNION ALL
(SELECT 'provider_reference_claim ' || c.provider || '/' || c.operation || '/' || c.reference
        || ' names attempt ' || c.attempt_id || ', which does not exist'
   FROM provider_reference_claim c
  WHERE NOT EXISTS (SELECT 1 FROM booking_attempt a WHERE a.id = c.attempt_id)
  ORDER BY c.provider, c.operation, c.reference)
UNION ALL
(SELECT 'booking_attempt ' || a.id || ' names intent ' || a.tenant_id || '/' || a.booking_intent_id
        || ', which does not exist'
   FROM booking_attempt a
  WHERE NOT EXISTS (SELECT 1 FROM booking_intent i
                     WHERE i.tenant_id = a.tenant_id AND i.booking_intent_id = a.booking_intent_id)
  ORDER BY a.id)
LIMIT $1;
