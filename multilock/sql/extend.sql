--returns boolean, bigint, bigint, bigint, bigint, bigint, bigint
-- extend: one statement. $1 lockId, $2 ttl ms. The set's expiry becomes
-- server now + ttl, for every key at once, only when every key of the
-- holding is still live; never revives an expired holding.
-- g locks the keys' counter rows in the one order first (acquire.sql);
-- chk.fresh: no "ver" moved since the snapshot (else nothing is written
-- and the caller runs it again). An extend bumps "ver": an attempt whose
-- snapshot saw the holding expired must not take it over.
WITH
{{sql(mine.sql)}},
snap AS (
  SELECT c."fence_key", c."ver" FROM {{fences}} AS c WHERE c."fence_key" IN (SELECT mine."fence_key" FROM mine)
),
g AS MATERIALIZED (
  SELECT c."fence_key", c."ver" FROM {{fences}} AS c
  WHERE c."fence_key" IN (SELECT mine."fence_key" FROM mine)
  ORDER BY c."fence_key" COLLATE "C"
  FOR UPDATE {{nowait}}
),
chk AS MATERIALIZED (
  SELECT NOT EXISTS (SELECT 1 FROM g LEFT JOIN snap ON snap."fence_key" = g."fence_key"
                     WHERE snap."ver" IS DISTINCT FROM g."ver") AS fresh,
    (SELECT count(*) FROM mine WHERE mine.live) = COALESCE((SELECT max(mine."n") FROM mine), -1) AS whole
),
u AS (
  UPDATE {{locks}} AS l SET "expires_at_ms" = t.now_ms + $2::bigint
  FROM t, chk
  WHERE l."lock_id" = $1::text AND chk.fresh AND chk.whole
  RETURNING l."expires_at_ms"
),
b AS (
  UPDATE {{fences}} AS c SET "ver" = c."ver" + 1
  WHERE c."fence_key" IN (SELECT g."fence_key" FROM g) AND (SELECT count(*) FROM u) > 0
  RETURNING 1
)
SELECT chk.fresh,
  (SELECT count(*) FROM u) AS extended,
  (SELECT max(u."expires_at_ms") FROM u) AS expires_at_ms,
  (SELECT max(mine."expires_at_ms") FROM mine) AS seen_expires,
  (SELECT count(*) FROM mine) AS seen,
  t.now_ms,
  (SELECT count(*) FROM b) AS bumped
FROM t, chk
