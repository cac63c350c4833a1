-- release: one statement. $1 lockId, $2 true on the pool path (the
-- statement is its own transaction), false inside the caller's.
-- Deletes the row only if it belongs to $1 and is live, under the row lock
-- (a concurrent takeover changes lock_id, and the re-check then fails).
-- When nothing was deleted, the same row is read from the statement's
-- snapshot to tell "expired" from "not-found" without another round trip.
--
-- The lines between "--if queue" and "--end" hand the key over in the same
-- commit (left out when the waiters table is missing: stmtReleasePlain):
-- w:   the first live waiter of the released key (by place);
-- wd:  its row leaves the queue, re-checked under the row lock (a waiter
--      whose deadline passed meanwhile is not granted), if a notification
--      reaches it: a waiter that polls would leave the key granted and
--      idle until its next attempt, so it is left the free key instead,
--      which no waiter behind it may take (acquire.sql's ahead);
-- me:  the releaser's own queue row, if it is a waiter giving up (Lock
--      withdraws with a release of its lockId, which passes on a key
--      granted to it meanwhile); left_queue says it was there;
-- gf:  the waiter's fence: the counter incremented, as an acquire does
--      (the released lock was live until this statement, so no acquire
--      can have moved the counter since);
-- g:   the lock row of the waiter: its lockId, its TTL from now;
-- n:   a hint on the key's channel naming the waiter (a hash of its
--      lockId). Any role can send it: it only makes that waiter attempt,
--      and the attempt finds the row.
-- The lines between "--if holders" and "--end" keep the holders table
-- (left out when it is missing): hl deletes the identity rows of the
-- released key (the releaser's, and those of earlier holders that expired
-- or were taken over by another implementation; not gh's, which this
-- statement's snapshot does not see); gh writes the waiter's, when it
-- queued with one.
-- sc:  when nothing was handed over, on the pool path, for a lock with at
--      most {{async_release_max}} ms left, the commit does not wait for the
--      WAL flush (synchronous_commit off for this transaction only; read at
--      commit). A release lost in a crash leaves the lock held until its
--      TTL, which is safe, and that bounds how long; the commit of any later
--      write that depends on the release (the next acquire of the key)
--      flushes the WAL up to itself, the release included. A hand-off is
--      always flushed: its fence must not be handed out twice.
WITH
t AS (
  SELECT {{now_ms}} AS now_ms
),
d AS (
  DELETE FROM {{locks}} AS l USING t
  WHERE l."lock_id" = $1::text AND {{live(l)}}
  RETURNING l."lock_id", l."key", l."expires_at_ms" - t.now_ms AS left_ms
),
--if queue
w AS (
  SELECT q."lock_id" FROM {{waiters}} AS q, d, t
  WHERE q."key" = d."key" AND q."deadline_ms" > t.now_ms AND q."lock_id" <> $1::text
  ORDER BY q."place", q."lock_id"
  LIMIT 1
),
wd AS (
  DELETE FROM {{waiters}} AS q USING t
  WHERE q."lock_id" = (SELECT w."lock_id" FROM w) AND q."deadline_ms" > t.now_ms AND q."notified"
  RETURNING q."key", q."lock_id", q."ttl_ms", q."user_key", q."fence_key", q."identity"
),
me AS (
  DELETE FROM {{waiters}} AS q WHERE q."lock_id" = $1::text
  RETURNING 1
),
gf AS (
  INSERT INTO {{fences}} AS c ("fence_key", "fence", "key_debug")
  SELECT wd."fence_key", 1, wd."user_key" FROM wd
  ON CONFLICT ("fence_key") DO UPDATE SET "fence" = c."fence" + 1
  WHERE c."fence" < {{fence_max}}
  RETURNING c."fence"
),
g AS (
  INSERT INTO {{locks}} ("key", "lock_id", "expires_at_ms", "acquired_at_ms", "fence", "user_key")
  SELECT wd."key", wd."lock_id", t.now_ms + wd."ttl_ms", t.now_ms, {{fence_text(gf."fence")}}, wd."user_key"
  FROM wd, gf, t
  RETURNING "key", "lock_id"
),
--if holders
gh AS (
  INSERT INTO {{holders}} ("lock_id", "key", "identity")
  SELECT g."lock_id", g."key", wd."identity" FROM g, wd WHERE wd."identity" IS NOT NULL
  ON CONFLICT ("lock_id") DO UPDATE SET "identity" = EXCLUDED."identity"
  RETURNING 1
),
--end
n AS (
  SELECT pg_notify({{wake_channel(g."key")}}, {{wake_payload(g."lock_id")}}) AS v FROM g
),
--end
--if holders
hl AS (
  DELETE FROM {{holders}} AS h USING d WHERE h."key" = d."key"
  RETURNING 1
),
--end
sc AS (
  SELECT set_config('synchronous_commit', 'off', true) AS v FROM d
  WHERE $2::boolean AND d.left_ms <= {{async_release_max}}
--if queue
    AND NOT EXISTS (SELECT 1 FROM g)
--end
)
SELECT d."lock_id",
  CASE WHEN d."lock_id" IS NULL THEN
    (SELECT s."expires_at_ms" FROM {{locks}} AS s WHERE s."lock_id" = $1::text) END,
  t.now_ms,
--if queue
  (SELECT {{wake_payload(g."lock_id")}} FROM g) AS woke,
  EXISTS (SELECT 1 FROM me) AS left_queue
--end
--if !queue
  NULL::text AS woke,
  false AS left_queue
--end
FROM t
LEFT JOIN d ON true
LEFT JOIN sc ON true
--if queue
LEFT JOIN n ON true
--end
