-- holders: the key's permits, read in one statement with the server's
-- now_ms. $1 storage key, or NULL with $2 a lockId: that permit's key.
-- Always at least one row (slot NULL when the key has none).
-- k:     the key, MATERIALIZED: no value for the planner, the generic plan serves ("Planning" in docs/design.md).
WITH
t AS (
  SELECT {{now_ms}} AS now_ms
),
k AS MATERIALIZED (
  SELECT COALESCE($1::text, (SELECT s."key" FROM {{slots}} AS s WHERE s."lock_id" = $2::text)) AS key
)
SELECT t.now_ms, s."permits", l."slot", l."lock_id", l."expires_at_ms", l."acquired_at_ms", l."fence", l."identity", s."user_key"
FROM t
CROSS JOIN k
LEFT JOIN {{sem}} AS s ON s."key" = k.key
LEFT JOIN {{slots}} AS l ON l."key" = k.key
ORDER BY l."slot"
