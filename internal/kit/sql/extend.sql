-- extend: $1 lockId, $2 ttl in ms. Sets the lease's expiry to server now
-- + ttl only while it is live, under its row's lock (a takeover re-checks
-- liveness under the same lock); never revives an expired one. Who holds
-- what does not change. leases: the kind's table of leases, one row each,
-- lock_id unique.
WITH
t AS (
  SELECT {{now_ms}} AS now_ms
),
u AS (
  UPDATE {{leases}} AS l SET "expires_at_ms" = t.now_ms + $2::bigint
  FROM t
  WHERE l."lock_id" = $1::text AND {{live(l)}}
  RETURNING l."expires_at_ms"
)
SELECT u."expires_at_ms",
  (SELECT s."expires_at_ms" FROM {{leases}} AS s WHERE s."lock_id" = $1::text),
  t.now_ms
FROM t
LEFT JOIN u ON true
