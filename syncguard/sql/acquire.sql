--returns text, bigint, bigint, text, boolean, bigint, boolean, boolean, bigint
-- acquire: one statement, one round trip.
-- $1 storage key, $2 lockId, $3 fence key, $4 normalized user key, $5 ttl in ms.
-- The lines between "--if queue" and "--end" are the attempt of a waiter
-- of Lock and WithLock (stmtAcquireWait), which keeps its place in the
-- queue of waiters: $2 is then the waiter's own lockId, the same for all
-- its attempts, $6 its queue window in ms and $7 whether a notification
-- reaches it now (see "Waiting" in docs/design.md).
--
--if queue
-- me:    the waiter's row in the queue, if it has one (its place); a
--        tombstone (ttl 0) when the waiter has given up and this is
--        an attempt of its that was still in flight: it takes nothing
--        and q does not bring the row back.
-- ahead: the live waiters queued before this one (before now, for a
--        waiter not queued yet), counted up to {{rank_cap}}: the waiter's
--        rank, returned as ahead_n (it spaces the waiter's attempts and
--        says whether it listens), and whether one of them attends: it
--        was within {{listen_rank}} of the head at its last attempt (near),
--        or a notification reaches it (notified). While one does, the key
--        is not free for this waiter even when no lock is live: a crashed
--        holder's key goes to the first attending waiter, not to whoever
--        attempts first. A waiter that was further back at its last
--        attempt, and hears nothing, is asleep until its approach: it
--        keeps its place but not its turn (a release passes it too, and so
--        does a newcomer when no one ahead attends).
-- q:     a waiter that did not get the key queues, at its place (the
--        server's clock in microseconds at its first attempt, kept), or
--        renews its row: live for $6 ms more, notified or not ($7), near
--        or not (its rank); a row renewed within the last third of the
--        window with the same notified is left alone (a waiter that polls
--        often writes, and takes a transaction id, at most every third of
--        the window), near included: a waiter that comes near is written
--        again when its LISTEN takes effect (notified), one that polls at
--        its next renewal. Rewriting the row for near alone cost waiters
--        with short timeouts nine tenths of their holds
--        (TestAdversary/WaitersWithShortTimeoutsDoNotStarveTheKey). A release hands the key only to a live
--        waiter that is notified; a first attending waiter that is not
--        takes the free key itself.
-- dq:    a waiter that holds the key (taken now, or granted by a release)
--        leaves the queue; a waiter's first attempt, and the first
--        waiter's, also delete the key's rows dead for {{waiter_gc}} ms,
--        each found by an index range (a tombstone's place is the time it
--        died, less 2^62: release.sql's me; a dead waiter's place is
--        older than its deadline, and 0 in an older version's tombstone)
--        (not
--        a far-back waiter's later attempts, which then read no more than
--        their rank's rows; a key whose waiters all take grants from
--        notifications still has a first attempt per waiter).
--end
--
-- cur:  the live row for the key in this statement's snapshot, if any.
-- gate: decides whether this attempt may take the free key, and how.
--       'gated': the snapshot shows no live lock and this statement won
--       pg_try_advisory_xact_lock(hashtext(key)), the spec's per-key
--       advisory lock in its non-blocking form. Racers that all saw the key
--       free are turned away by it instead of queueing on the counter row,
--       and the reference implementation's acquire, which holds the same
--       lock throughout its transaction, is excluded.
--       'open': the try-lock failed and the key's row exists. Any role
--       can take advisory locks, so the lock is a hint, never a gate. A
--       row that an acquire wrote (acquired_at_ms <> 0), with its fence
--       counter: lk locks both, FOR UPDATE SKIP LOCKED, never waiting;
--       either locked by another (an acquire, ours or the reference
--       implementation's, that holds the row; a release; a txguard Hold)
--       makes the attempt 'busy'. The reference locks the row (SELECT ...
--       FOR UPDATE) before its counter, and found this row in its
--       snapshot (it existed before our snapshot): one that locked it
--       first makes us skip it; one that comes later waits for our row
--       lock and then sees our live lock. Our gated racers lock the
--       counter, then the row; skipping never waits, so no deadlock. No
--       read of pg_locks: what other roles hold sets no price here.
--       A placeholder (acquired_at_ms 0), or a row without a counter:
--       a reference acquire whose snapshot predates the placeholder's
--       commit would upsert over it without waiting for our row lock
--       first, so the attempt asks who holds the advisory lock
--       (gate_held_privileged reads pg_locks; a privileged holder, an
--       acquire in flight, ours or the reference implementation's,
--       makes the attempt 'busy'). The attempt then only takes that row
--       over (upd), under its row lock.
--       'absent': as 'open', but the key has no row. The attempt writes
--       nothing: an insert without the advisory lock could be overwritten
--       by a reference acquire whose snapshot missed it. The caller
--       writes a placeholder row (placeholder.sql, committed on its own,
--       when no privileged session holds the advisory lock and the key
--       still has no row) and attempts again.
--       'busy': a live lock, an attending waiter ahead, a row or counter
--       locked by another, or a privileged holder of the advisory lock
--       (reading pg_locks takes every lock-manager partition's lock: only
--       an attempt on a placeholder pays it). A contended attempt stops here:
--       it reads only, writes nothing and never waits.
-- free: one row (carrying now_ms and whether the attempt is gated) when
--       the attempt may take the key.
-- snapf: the counter as this statement's snapshot sees it.
-- f:    increments the fence counter (or creates it at 1). ON CONFLICT DO
--       UPDATE locks the counter row and reads its latest committed value, so
--       concurrent acquires of one key serialize here and fences are unique
--       and ordered like the commits. It refuses to pass FenceMax, and it
--       refuses when the latest counter differs from snapf: then another
--       acquire committed after our snapshot was taken (our view of the key
--       is stale), and we report "locked" instead of burning a fence and
--       locking the new holder's row.
-- ins:  writes the lock row, when gated. On conflict it overwrites only a
--       row that is still expired in its latest committed version, under
--       that row's lock (never a lock whose extend just committed).
-- upd:  the same takeover when open: an UPDATE of the existing row, never
--       an insert, with the same re-check under the row lock.
-- won:  the row written by ins or upd.
--if holders
-- h:    with the holder's identity ({{identity_arg}}): its row in the holders
--       table, by lockId, when the lock was taken. Rows of the key's earlier
--       holders (expired, or taken over by another implementation) are left
--       to the next release of the key: deleting them here would make an
--       acquire with an identity cost 20 % more than one without.
--end
-- a:    the arguments that the lookups compare, in a row of their own
--       (MATERIALIZED): the planner sees no values in them, so it estimates
--       the plan for the first execution as for any later one, and the
--       prepared statement keeps that generic plan instead of planning
--       each execution again ("Planning" in docs/design.md).
-- The final SELECT always returns one row; absent asks the caller for a
-- placeholder row and another attempt. A row of our own lockId in cur
-- means this statement already ran (database/sql re-ran it after
-- driver.ErrBadConn): report that success again. now_ms lets a failed
-- attempt compute when the holder's lock expires, in server time.
WITH
a AS MATERIALIZED (
  SELECT $1::text AS "key", $2::text AS "lock_id", $3::text AS "fence_key"
),
t AS (
  SELECT {{now_ms}} AS now_ms
),
row0 AS (
  SELECT l."lock_id", l."expires_at_ms", l."acquired_at_ms", l."fence"
  FROM {{locks}} AS l
  WHERE l."key" = (SELECT a."key" FROM a)
),
cur AS (
  SELECT l.* FROM row0 AS l, t WHERE {{live(l)}}
),
--if queue
me AS (
  SELECT w."place", w."deadline_ms", w."notified", w."near", w."ttl_ms" FROM {{waiters}} AS w WHERE w."lock_id" = (SELECT a."lock_id" FROM a)
),
ahead AS (
  SELECT count(*) AS n, COALESCE(bool_or(r.attends), false) AS awake FROM (
    SELECT w."near" OR w."notified" AS attends FROM {{waiters}} AS w, t
    WHERE w."key" = (SELECT a."key" FROM a) AND w."place" > 0 AND w."lock_id" <> (SELECT a."lock_id" FROM a) AND w."deadline_ms" > t.now_ms
      AND (w."place", w."lock_id") < (COALESCE((SELECT me."place" FROM me), {{now_us}}), (SELECT a."lock_id" FROM a))
    LIMIT {{rank_cap}}) AS r
),
--end
snapf AS (
  SELECT c."fence" FROM {{fences}} AS c WHERE c."fence_key" = (SELECT a."fence_key" FROM a)
),
lk AS (
  SELECT 1 FROM {{locks}} AS l, {{fences}} AS c
  WHERE l."key" = (SELECT a."key" FROM a) AND c."fence_key" = (SELECT a."fence_key" FROM a) AND l."acquired_at_ms" <> 0
  FOR UPDATE OF l, c SKIP LOCKED
),
gate AS (
  SELECT CASE WHEN EXISTS (SELECT 1 FROM cur) THEN 'busy'
--if queue
             WHEN (SELECT ahead.awake FROM ahead) THEN 'busy'
             WHEN EXISTS (SELECT 1 FROM me WHERE me."ttl_ms" = 0) THEN 'busy'
--end
             WHEN pg_try_advisory_xact_lock(hashtext(a."key")) THEN 'gated'
             WHEN NOT EXISTS (SELECT 1 FROM row0) THEN 'absent'
             WHEN EXISTS (SELECT 1 FROM row0 WHERE row0."acquired_at_ms" <> 0) AND EXISTS (SELECT 1 FROM snapf) THEN
               CASE WHEN EXISTS (SELECT 1 FROM lk) THEN 'open' ELSE 'busy' END
             WHEN {{gate_held_privileged(a."key")}} THEN 'busy'
             ELSE 'open' END AS state
  FROM a
),
free AS (
  SELECT t.now_ms, gate.state = 'gated' AS gated FROM t, gate WHERE gate.state IN ('gated', 'open')
),
f AS (
  INSERT INTO {{fences}} AS c ("fence_key", "fence", "key_debug")
  SELECT $3::text, 1, $4::text FROM free
  ON CONFLICT ("fence_key") DO UPDATE SET "fence" = c."fence" + 1
  WHERE c."fence" < {{fence_max}} AND c."fence" = (SELECT snapf."fence" FROM snapf)
  RETURNING c."fence"
),
ins AS (
  INSERT INTO {{locks}} AS l ("key", "lock_id", "expires_at_ms", "acquired_at_ms", "fence", "user_key")
  SELECT $1::text, $2::text, free.now_ms + $5::bigint, free.now_ms, {{fence_text(f."fence")}}, $4::text
  FROM free, f
  WHERE free.gated
  ON CONFLICT ("key") DO UPDATE SET
    "lock_id" = EXCLUDED."lock_id",
    "expires_at_ms" = EXCLUDED."expires_at_ms",
    "acquired_at_ms" = EXCLUDED."acquired_at_ms",
    "fence" = EXCLUDED."fence",
    "user_key" = EXCLUDED."user_key"
  WHERE NOT ({{live(l, EXCLUDED."acquired_at_ms")}})
  RETURNING l."lock_id", l."expires_at_ms", l."acquired_at_ms", l."fence"
),
upd AS (
  UPDATE {{locks}} AS l SET "lock_id" = $2::text, "expires_at_ms" = free.now_ms + $5::bigint,
    "acquired_at_ms" = free.now_ms, "fence" = {{fence_text(f."fence")}}, "user_key" = $4::text
  FROM free, f
  WHERE l."key" = (SELECT a."key" FROM a) AND NOT free.gated AND NOT ({{live(l, free.now_ms)}})
  RETURNING l."lock_id", l."expires_at_ms", l."acquired_at_ms", l."fence"
),
won AS (
  SELECT * FROM ins UNION ALL SELECT * FROM upd
)
--if queue
, q AS (
  INSERT INTO {{waiters}} AS w ("key", "lock_id", "place", "deadline_ms", "ttl_ms", "user_key", "fence_key", "notified", "near", "identity")
  SELECT $1::text, $2::text, {{now_us}}, t.now_ms + $6::bigint, $5::bigint, $4::text, $3::text, $7::boolean,
    (SELECT ahead.n FROM ahead) <= {{listen_rank}},
--if holders
    {{identity_arg}}::text
--end
--if !holders
    NULL::text
--end
  FROM t
  WHERE NOT EXISTS (SELECT 1 FROM won) AND NOT EXISTS (SELECT 1 FROM cur WHERE cur."lock_id" = $2::text)
    AND NOT EXISTS (SELECT 1 FROM me WHERE me."notified" = $7::boolean AND me."deadline_ms" > t.now_ms + $6::bigint * 2 / 3)
  ON CONFLICT ("lock_id") DO UPDATE SET "deadline_ms" = EXCLUDED."deadline_ms", "ttl_ms" = EXCLUDED."ttl_ms",
    "notified" = EXCLUDED."notified", "near" = EXCLUDED."near"
  WHERE w."ttl_ms" <> 0
  RETURNING 1
),
dq AS (
  DELETE FROM {{waiters}} AS w USING t
  WHERE (w."lock_id" = (SELECT a."lock_id" FROM a)
         AND (EXISTS (SELECT 1 FROM won) OR EXISTS (SELECT 1 FROM cur WHERE cur."lock_id" = $2::text)))
     OR (w."key" = (SELECT a."key" FROM a) AND w."place" < {{tomb_place}} - {{waiter_gc}}::bigint * 1000
         AND w."lock_id" <> (SELECT a."lock_id" FROM a) AND ((SELECT ahead.n FROM ahead) = 0 OR NOT EXISTS (SELECT 1 FROM me)))
     OR (w."key" = (SELECT a."key" FROM a) AND w."place" >= 0 AND w."place" < {{now_us}} - {{waiter_gc}}::bigint * 1000
         AND w."deadline_ms" < t.now_ms - {{waiter_gc}}
         AND w."lock_id" <> (SELECT a."lock_id" FROM a) AND ((SELECT ahead.n FROM ahead) = 0 OR NOT EXISTS (SELECT 1 FROM me)))
  RETURNING 1
)
--end
--if holders
, h AS (
  INSERT INTO {{holders}} AS h ("lock_id", "key", "identity")
  SELECT won."lock_id", $1::text, {{identity_arg}}::text FROM won
  ON CONFLICT ("lock_id") DO UPDATE SET "identity" = EXCLUDED."identity"
  RETURNING 1
)
--end
SELECT
  COALESCE(won."lock_id", cur."lock_id") AS lock_id,
  COALESCE(won."expires_at_ms", cur."expires_at_ms") AS expires_at_ms,
  COALESCE(won."acquired_at_ms", cur."acquired_at_ms") AS acquired_at_ms,
  COALESCE(won."fence", cur."fence") AS fence,
  (EXISTS (SELECT 1 FROM free) AND NOT EXISTS (SELECT 1 FROM f)
   AND COALESCE((SELECT snapf."fence" FROM snapf), 0) >= {{fence_max}}) AS fence_exhausted,
  t.now_ms,
  (SELECT gate.state = 'absent' FROM gate) AS absent,
  (SELECT gate.state = 'open' FROM gate) AS opened,
--if queue
  (SELECT ahead.n FROM ahead) AS ahead_n
--end
--if !queue
  0::bigint AS ahead_n
--end
FROM t
LEFT JOIN won ON true
LEFT JOIN cur ON true
