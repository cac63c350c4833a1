--returns text, bigint, bigint, text, text, boolean
-- release: one statement. $1 lockId, $2 true on the pool path (the
-- statement is its own transaction), false inside the caller's, $3 whether
-- to send wake-up notifications in its commit (false on the re-run after a
-- full notification queue failed the commit with 54000: the hand-off still
-- commits, and the waiter finds it at its next attempt; false with
-- Config.NotifyDB, which carries the wake-up, woke on woke_channel, after
-- the commit), $4 the storage
-- key when $1 is a waiter of Lock giving up (its withdrawal), else NULL.
-- Deletes the row only if it belongs to $1 and is live, under the row lock
-- (a concurrent takeover changes lock_id, and the re-check then fails).
-- When nothing was deleted, the same row is read from the statement's
-- snapshot to tell "expired" from "not-found" without another round trip.
--
-- The lines between "--if queue" and "--end" hand the key over in the same
-- commit (left out when the waiters table is missing: stmtReleasePlain):
-- w:   the first live waiter of the released key (by place) that
--      attends (near or notified: acquire.sql's awake; an asleep waiter
--      far back keeps its place, not its turn);
-- wd:  its row leaves the queue, re-checked under the row lock (a waiter
--      whose deadline passed meanwhile is not granted), if a notification
--      reaches it: a waiter that polls would leave the key granted and
--      idle until its next attempt, so it is left the free key instead,
--      which no waiter behind it may take (acquire.sql's ahead);
-- me:  the releaser's own queue row, if it is a waiter giving up (Lock
--      withdraws with a release of its lockId, which passes on a key
--      granted to it meanwhile), made a tombstone (ttl 0, dead): an attempt
--      of the waiter still in flight on the server (pgx cancels
--      asynchronously) that commits later can then neither queue it again
--      nor take the key (acquire.sql's gate). Its place becomes the
--      time it died less 2^62 ({{tomb_place}}): tombstones sort before
--      every waiter, by age, so the scans of live waiters (place > 0)
--      skip them in the index and the oldest are found by a range; it is
--      deleted when it has been dead for {{waiter_gc}} ms. left_queue says
--      that the row was there, live;
-- mq:  a lease's release (not a waiter leaving) deletes a queue row of its
--      lockId: a waiter granted the key by a release took it from the
--      notification, without a statement, while an attempt of its was in
--      flight; that attempt's snapshot predated the grant, so it wrote the
--      waiter's row back (acquire.sql's q), and the row, live and
--      attending, stood ahead of every waiter of the key
--      (TestReleaseDeletesItsOwnQueueRow);
-- nx:  when that waiter leaves a key that no lock holds (it was first,
--      polling, or the key's holder expired), the first live attending
--      waiter after it, woken so that it attempts now instead of at its
--      next retry;
-- gf:  the waiter's fence: the counter incremented, as an acquire does
--      (the released lock was live until this statement, so no acquire
--      can have moved the counter since);
-- g:   the lock row of the waiter: its lockId, its TTL from now;
-- wk:  who is woken: the waiter granted, with a grant notification (the
--      hash of its lockId, its fence, the lock's start and TTL, and a mac
--      keyed by its lockId: internal/waiting/grant.go), which it takes
--      without another statement; or nx's, or the first waiter that wd
--      did not grant the key it left free (its row said no notification
--      reached it, but its LISTEN may have taken effect since), with the
--      hash of its lockId.
-- n:   a hint on the key's channel for wk. Any role can send one: a plain
--      one only makes that waiter attempt (and the attempt reads the row),
--      a grant's mac only the holder of the lockId can make.
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
  SELECT {{now_ms}} AS now_ms, $3::boolean AS notify, $4::text AS wkey
),
d AS (
  DELETE FROM {{locks}} AS l USING t
  WHERE l."lock_id" = $1::text AND {{live(l)}}
  RETURNING l."lock_id", l."key", l."expires_at_ms" - t.now_ms AS left_ms
),
--if queue
w AS (
  SELECT q."lock_id" FROM {{waiters}} AS q, d, t
  WHERE q."key" = d."key" AND q."place" > 0 AND q."deadline_ms" > t.now_ms AND q."lock_id" <> $1::text AND (q."near" OR q."notified")
  ORDER BY q."place", q."lock_id"
  LIMIT 1
),
wd AS (
  DELETE FROM {{waiters}} AS q USING t
  WHERE q."lock_id" = (SELECT w."lock_id" FROM w) AND q."deadline_ms" > t.now_ms AND q."notified"
  RETURNING q."key", q."lock_id", q."ttl_ms", q."user_key", q."fence_key", q."identity"
),
mq AS (
  DELETE FROM {{waiters}} AS q USING t
  WHERE q."lock_id" = $1::text AND t.wkey IS NULL
  RETURNING 1
),
me AS (
  INSERT INTO {{waiters}} AS q ("key", "lock_id", "place", "deadline_ms", "ttl_ms", "user_key", "fence_key")
  SELECT t.wkey, $1::text, {{tomb_place}}, t.now_ms - 1, 0, '', '' FROM t WHERE t.wkey IS NOT NULL
  ON CONFLICT ("lock_id") DO UPDATE SET "place" = EXCLUDED."place", "deadline_ms" = EXCLUDED."deadline_ms", "ttl_ms" = 0
  RETURNING q."key", q."xmax"::text <> '0' AS was
),
nx AS (
  SELECT q."key", q."lock_id" FROM {{waiters}} AS q, me, t
  WHERE q."key" = me."key" AND q."place" > 0 AND q."lock_id" <> $1::text AND q."deadline_ms" > t.now_ms AND (q."near" OR q."notified")
    AND NOT EXISTS (SELECT 1 FROM d)
    AND NOT EXISTS (SELECT 1 FROM {{locks}} AS l WHERE l."key" = me."key" AND {{live(l)}})
  ORDER BY q."place", q."lock_id"
  LIMIT 1
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
  RETURNING "key", "lock_id", "fence", "acquired_at_ms", "expires_at_ms"
),
--if holders
gh AS (
  INSERT INTO {{holders}} ("lock_id", "key", "identity")
  SELECT g."lock_id", g."key", wd."identity" FROM g, wd WHERE wd."identity" IS NOT NULL
  ON CONFLICT ("lock_id") DO UPDATE SET "identity" = EXCLUDED."identity"
  RETURNING 1
),
--end
wk AS (
  SELECT g."key", {{grant_payload(g."lock_id", g."fence", g."acquired_at_ms", g."expires_at_ms" - g."acquired_at_ms")}} AS payload FROM g
  UNION ALL SELECT nx."key", {{wake_payload(nx."lock_id")}} FROM nx
  UNION ALL SELECT d."key", {{wake_payload(w."lock_id")}} FROM w, d WHERE NOT EXISTS (SELECT 1 FROM wd)
),
n AS (
  SELECT pg_notify({{wake_channel(wk."key")}}, wk.payload) AS v FROM wk, t WHERE t.notify
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
  (SELECT wk.payload FROM wk LIMIT 1) AS woke,
  (SELECT {{wake_channel(wk."key")}} FROM wk LIMIT 1) AS woke_channel,
  EXISTS (SELECT 1 FROM me WHERE me.was) AS left_queue
--end
--if !queue
  NULL::text AS woke,
  NULL::text AS woke_channel,
  false AS left_queue
--end
FROM t
LEFT JOIN d ON true
LEFT JOIN sc ON true
--if queue
LEFT JOIN n ON true
--end
