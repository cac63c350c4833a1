-- The server's clock (t) and the lock rows of the holding $1 (mine), the
-- first CTEs of release.sql and extend.sql (inserted by the sql call).
t AS (
  SELECT {{now_ms}} AS now_ms
),
mine AS (
  SELECT l."key", l."fence_key", l."n", l."expires_at_ms", {{live(l)}} AS live
  FROM {{locks}} AS l, t WHERE l."lock_id" = $1::text
)
