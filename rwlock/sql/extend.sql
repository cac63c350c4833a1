-- extend: $1 lockId, $2 ttl in ms. Sets the lease's expiry to server now +
-- ttl only while it is live, under its row lock; never revives one.
WITH
t AS (
  SELECT {{now_ms}} AS now_ms
),
u AS (
  UPDATE {{holders}} AS h SET "expires_at_ms" = t.now_ms + $2::bigint
  FROM t
  WHERE h."lock_id" = $1::text AND {{live(h)}}
  RETURNING h."expires_at_ms"
)
SELECT u."expires_at_ms",
  (SELECT s."expires_at_ms" FROM {{holders}} AS s WHERE s."lock_id" = $1::text),
  t.now_ms
FROM t
LEFT JOIN u ON true
