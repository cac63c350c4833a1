-- extend: one statement. $1 lockId, $2 ttl in ms. Sets the permit's
-- expiry to server now + ttl, only while it is live, under the slot row's
-- lock (a takeover re-checks liveness under the same lock). Never revives
-- an expired permit. Who holds what does not change: no version bump.
WITH
t AS (
  SELECT {{now_ms}} AS now_ms
),
u AS (
  UPDATE {{slots}} AS l SET "expires_at_ms" = t.now_ms + $2::bigint
  FROM t
  WHERE l."lock_id" = $1::text AND {{live(l)}}
  RETURNING l."expires_at_ms"
)
SELECT (SELECT u."expires_at_ms" FROM u),
  (SELECT s."expires_at_ms" FROM {{slots}} AS s WHERE s."lock_id" = $1::text),
  t.now_ms
FROM t
