-- release_orphans: the background release of acquires whose outcome is
-- unknown (docs/errors.md, "A cancelled acquire"). One statement for a
-- batch. $1 lockIds joined by ',' (lockIds are base64url: no commas).
-- Deletes those rows whatever their expiry: a lockId belongs to one
-- acquire only, so a row carrying it is that acquire's, and a takeover
-- would have changed it. Returns the lockIds deleted, joined the same way,
-- in one row.
--if queue
-- A waiter's lockId comes here once Lock gave up on an attempt cut short
-- (pgx cancels asynchronously, so the attempt may commit after Lock's
-- withdrawal looked): dw deletes the queue row it may have left, which
-- would otherwise stand before later waiters for a whole window, and nx
-- wakes the first live attending waiter (near or notified, as release.sql's
-- w) of each key that no lock now holds. Without the waiters table, or
-- with one of an older version, the Backend sends the variant without
-- these lines (orphans.go).
--end
WITH
t AS (
  SELECT {{now_ms}} AS now_ms, string_to_array($1::text, ',') AS ids
),
d AS (
  DELETE FROM {{locks}} AS l USING t
  WHERE l."lock_id" = ANY (t.ids)
  RETURNING l."lock_id", l."key"
),
--if queue
dw AS (
  DELETE FROM {{waiters}} AS q USING t
  WHERE q."lock_id" = ANY (t.ids)
  RETURNING q."lock_id", q."key"
),
nx AS (
  SELECT DISTINCT ON (q."key") q."key", q."lock_id" FROM {{waiters}} AS q, t
  WHERE q."key" IN (SELECT d."key" FROM d UNION SELECT dw."key" FROM dw)
    AND q."place" > 0 AND q."lock_id" <> ALL (t.ids) AND q."deadline_ms" > t.now_ms AND (q."near" OR q."notified")
    AND NOT EXISTS (SELECT 1 FROM {{locks}} AS l WHERE l."key" = q."key" AND {{live(l)}} AND l."lock_id" <> ALL (t.ids))
  ORDER BY q."key", q."place", q."lock_id"
),
n AS (
  SELECT count(pg_notify({{wake_channel(nx."key")}}, {{wake_payload(nx."lock_id")}})) AS c FROM nx
),
--end
x AS (
  SELECT d."lock_id" FROM d
--if queue
  UNION SELECT dw."lock_id" FROM dw
--end
)
SELECT coalesce(string_agg(x."lock_id", ','), '') FROM x
--if queue
  , n
--end
