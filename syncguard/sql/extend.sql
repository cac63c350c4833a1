--returns text, bigint, bigint, bigint
-- extend: one statement. $1 lockId, $2 ttl in ms.
-- Sets expiry to server now + ttl, only for a live row of this lockId, under
-- the row lock; never revives an expired lock. Returns the new expiry.
-- (Waiters learn a shortened expiry at their next attempt: they renew
-- their place in the queue at least every third of its window.)
WITH
t AS (
  SELECT {{now_ms}} AS now_ms
),
u AS (
  UPDATE {{locks}} AS l SET "expires_at_ms" = t.now_ms + $2::bigint
  FROM t
  WHERE l."lock_id" = $1::text AND {{live(l)}}
  RETURNING l."lock_id", l."expires_at_ms"
)
SELECT u."lock_id", u."expires_at_ms",
  CASE WHEN u."lock_id" IS NULL THEN
    (SELECT s."expires_at_ms" FROM {{locks}} AS s WHERE s."lock_id" = $1::text) END,
  t.now_ms
FROM t
LEFT JOIN u ON true
