-- extend: one statement. $1 lockId, $2 ttl in ms.
-- Sets expiry to server now + ttl, only for a live row of this lockId, under
-- the row lock; never revives an expired lock. Returns the new expiry.
-- n: an extend that shortens the lock (the new expiry is earlier than the
-- one in the statement's snapshot) tells the waiters ("x <key hash>
-- <expires_at_ms>"), so they try again right after the new expiry, if any
-- process waits for the key (see release.sql).
WITH
t AS (
  SELECT {{now_ms}} AS now_ms
),
u AS (
  UPDATE {{locks}} AS l SET "expires_at_ms" = t.now_ms + $2::bigint
  FROM t
  WHERE l."lock_id" = $1::text AND {{live(l)}}
  RETURNING l."lock_id", l."expires_at_ms", l."key"
),
n AS (
  SELECT pg_notify({{channel}}, 'x ' || w.kh || ' ' || u."expires_at_ms") AS v
  FROM u, LATERAL (SELECT {{wake_hash(u."key")}} AS kh) AS w
  WHERE u."expires_at_ms" < (SELECT s."expires_at_ms" FROM {{locks}} AS s WHERE s."lock_id" = $1::text)
    AND NOT pg_try_advisory_xact_lock({{wait_class}}, {{wait_id(w.kh)}})
)
SELECT u."lock_id", u."expires_at_ms",
  CASE WHEN u."lock_id" IS NULL THEN
    (SELECT s."expires_at_ms" FROM {{locks}} AS s WHERE s."lock_id" = $1::text) END,
  t.now_ms
FROM t
LEFT JOIN u ON true
LEFT JOIN n ON true
