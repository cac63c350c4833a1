--returns text, integer, bigint, bigint, bigint, boolean, boolean, integer, bigint, boolean, bigint, bigint
-- acquire: one statement, one round trip, for a permit of key $1.
-- $1 storage key, $2 lockId (a waiter's own, the same for all its
-- attempts), $3 the caller's number of permits, $4 normalized user key,
-- $5 ttl in ms, $6 the waiter's queue window in ms (0: a plain attempt,
-- which takes no place in the queue), $7 whether a notification reaches
-- the waiter now, $8 the holder's identity (NULL: none).
--
-- k:     the key's row (permits, version) in this statement's snapshot;
--        absent: the key was never acquired, and this attempt creates it
--        with $3 permits (init).
-- sl:    the key's slots; live by the spec's rule on the server's clock.
-- mine:  a live slot of $2: a release handed it to the waiter, or this
--        statement already ran (database/sql re-ran it after
--        driver.ErrBadConn): success, reported again.
-- me:    the waiter's queue row (its place); ttl 0 is a tombstone (the
--        waiter gave up; an attempt of its still in flight takes nothing).
--        Locked (FOR UPDATE): a release hands a permit to a waiter under
--        the same row lock (release.sql), so the hand-off and this attempt
--        serialize there; me0 is the row in this statement's snapshot.
--        When the row left the queue after the snapshot (a hand-off that
--        committed meanwhile, which this snapshot does not show), the gate
--        is 'gone': nothing is written and the caller runs the statement
--        again (stale), which finds the permit ('mine').
-- ahead: live waiters queued before this one (before now for a plain
--        attempt or a waiter not queued yet) that hold no permit: while
--        there is one, no free slot is for this attempt (strict FIFO: a
--        later caller never overtakes an earlier waiter, even when a
--        permit is free). Counted up to {{rank_cap}}: the waiter's rank.
-- gate:  'mine', 'mismatch' (the key's permits differ from $3: nothing is
--        taken, the caller reports a typed error), 'gone' (see me), 'busy',
--        'init' or 'try'.
-- pick:  the lowest free slot, when the gate is 'try'; first a slot of
--        $2 that expired (a hand-off the waiter did not collect in time:
--        a lockId is on one slot row at most, a unique index).
-- v:     compare-and-set of the key's version: it locks the key row and
--        re-reads its latest committed version, and passes only if no
--        change of holders committed after this statement's snapshot.
--        Concurrent takers of one key serialize here; a loser writes
--        nothing and reports stale, and the caller runs the statement again
--        with a fresh snapshot. Every take is thus decided on an up-to-date
--        view of the key's takes; releases do not change the version (they
--        meet takes on the waiter's row, see me, and on slot rows).
-- tk:    takes the slot: new lockId, TTL from now, the slot's fence + 1
--        (refused past {{fence_max}}), re-checked under the slot row's lock
--        (an extend that committed after the snapshot keeps the slot).
-- ki/si: init: the key row and its slots 1..$3, slot 1 taken (fence 1).
--        A concurrent init wins ON CONFLICT: this one writes nothing and
--        reports stale.
-- q:     a waiter that got nothing queues at its place (server clock µs at
--        its first attempt, kept) or renews its row for $6 ms (skipped
--        when renewed within the last third of the window with the same
--        notified); never a tombstone.
-- dq:    a waiter that holds a permit leaves the queue; rows dead for
--        {{waiter_gc}} ms go too.
-- a:     the key and lockId the lookups compare, MATERIALIZED: no values for the planner, the generic plan serves ("Planning" in docs/design.md).
WITH
a AS MATERIALIZED (
  SELECT $1::text AS "key", $2::text AS "lock_id"
),
t AS (
  SELECT {{now_ms}} AS now_ms, {{now_us}} AS now_us
),
k AS (
  SELECT s."permits", s."version" FROM {{sem}} AS s WHERE s."key" = (SELECT a."key" FROM a)
),
sl AS (
  SELECT l."slot", l."lock_id", l."expires_at_ms", l."acquired_at_ms", l."fence", {{live(l)}} AS live
  FROM {{slots}} AS l, t WHERE l."key" = (SELECT a."key" FROM a)
),
mine AS (
  SELECT sl.* FROM sl WHERE sl."lock_id" = $2::text AND sl.live
),
me0 AS (
  SELECT 1 FROM {{waiters}} AS w WHERE w."lock_id" = (SELECT a."lock_id" FROM a)
),
me AS (
  SELECT w."place", w."deadline_ms", w."notified", w."ttl_ms" FROM {{waiters}} AS w WHERE w."lock_id" = (SELECT a."lock_id" FROM a)
  FOR UPDATE OF w
),
ahead AS (
  SELECT count(*) AS n FROM (
    SELECT 1 FROM {{waiters}} AS w, t
    WHERE w."key" = (SELECT a."key" FROM a) AND w."lock_id" <> (SELECT a."lock_id" FROM a)
      AND w."deadline_ms" > t.now_ms AND w."ttl_ms" > 0
      AND (w."place", w."lock_id") < (COALESCE((SELECT me."place" FROM me), t.now_us), (SELECT a."lock_id" FROM a))
      AND NOT EXISTS (SELECT 1 FROM sl WHERE sl."lock_id" = w."lock_id" AND sl.live)
    LIMIT {{rank_cap}}) AS a
),
gate AS (
  SELECT CASE WHEN EXISTS (SELECT 1 FROM mine) THEN 'mine'
              WHEN EXISTS (SELECT 1 FROM k WHERE k."permits" <> $3::integer) THEN 'mismatch'
              WHEN EXISTS (SELECT 1 FROM me0) AND NOT EXISTS (SELECT 1 FROM me) THEN 'gone'
              WHEN EXISTS (SELECT 1 FROM me WHERE me."ttl_ms" = 0) THEN 'busy'
              WHEN (SELECT ahead.n FROM ahead) > 0 THEN 'busy'
              WHEN NOT EXISTS (SELECT 1 FROM k) THEN 'init'
              ELSE 'try' END AS state
),
pick AS (
  SELECT sl."slot", sl."fence" FROM sl, gate
  WHERE gate.state = 'try' AND NOT sl.live AND sl."slot" <= $3::integer
  ORDER BY sl."lock_id" IS NOT DISTINCT FROM $2::text DESC, sl."slot"
  LIMIT 1
),
v AS (
  UPDATE {{sem}} AS s SET "version" = s."version" + 1
  FROM pick, k
  WHERE s."key" = (SELECT a."key" FROM a) AND s."version" = k."version" AND pick."fence" < {{fence_max}}
  RETURNING s."version"
),
tk AS (
  UPDATE {{slots}} AS l SET "lock_id" = $2::text, "expires_at_ms" = t.now_ms + $5::bigint,
    "acquired_at_ms" = t.now_ms, "fence" = l."fence" + 1, "identity" = $8::text
  FROM pick, v, t
  WHERE l."key" = (SELECT a."key" FROM a) AND l."slot" = pick."slot" AND l."fence" < {{fence_max}} AND NOT ({{live(l)}})
  RETURNING l."slot", l."lock_id", l."expires_at_ms", l."acquired_at_ms", l."fence"
),
ki AS (
  INSERT INTO {{sem}} ("key", "permits", "version", "user_key")
  SELECT $1::text, $3::integer, 1, $4::text FROM gate WHERE gate.state = 'init'
  ON CONFLICT ("key") DO NOTHING
  RETURNING "key"
),
si AS (
  INSERT INTO {{slots}} ("key", "slot", "lock_id", "expires_at_ms", "acquired_at_ms", "fence", "identity")
  SELECT $1::text, g.n,
    CASE WHEN g.n = 1 THEN $2::text END,
    CASE WHEN g.n = 1 THEN t.now_ms + $5::bigint ELSE 0 END,
    CASE WHEN g.n = 1 THEN t.now_ms ELSE 0 END,
    CASE WHEN g.n = 1 THEN 1 ELSE 0 END,
    CASE WHEN g.n = 1 THEN $8::text END
  FROM ki, t, generate_series(1, $3::integer) AS g(n)
  RETURNING "slot", "lock_id", "expires_at_ms", "acquired_at_ms", "fence"
),
won AS (
  SELECT * FROM tk UNION ALL SELECT * FROM si WHERE si."lock_id" IS NOT NULL
),
q AS (
  INSERT INTO {{waiters}} AS w ("key", "lock_id", "place", "deadline_ms", "ttl_ms", "notified", "identity")
  SELECT $1::text, $2::text, t.now_us, t.now_ms + $6::bigint, $5::bigint, $7::boolean, $8::text
  FROM t, gate
  WHERE $6::bigint > 0 AND gate.state IN ('busy', 'try')
    AND NOT EXISTS (SELECT 1 FROM won)
    AND NOT EXISTS (SELECT 1 FROM me WHERE me."notified" = $7::boolean AND me."deadline_ms" > t.now_ms + $6::bigint * 2 / 3)
  ON CONFLICT ("lock_id") DO UPDATE SET "deadline_ms" = EXCLUDED."deadline_ms", "ttl_ms" = EXCLUDED."ttl_ms",
    "notified" = EXCLUDED."notified"
  WHERE w."ttl_ms" <> 0
  RETURNING 1
),
dq AS (
  DELETE FROM {{waiters}} AS w USING t
  WHERE (w."lock_id" = (SELECT a."lock_id" FROM a) AND (EXISTS (SELECT 1 FROM won) OR EXISTS (SELECT 1 FROM mine)))
     OR (w."key" = (SELECT a."key" FROM a) AND w."lock_id" <> (SELECT a."lock_id" FROM a)
         AND w."deadline_ms" < t.now_ms - {{waiter_gc}})
  RETURNING 1
)
SELECT
  gate.state,
  COALESCE(won."slot", mine."slot") AS slot,
  COALESCE(won."expires_at_ms", mine."expires_at_ms") AS expires_at_ms,
  COALESCE(won."acquired_at_ms", mine."acquired_at_ms") AS acquired_at_ms,
  COALESCE(won."fence", mine."fence") AS fence,
  (gate.state = 'init' AND NOT EXISTS (SELECT 1 FROM ki))
    OR gate.state = 'gone'
    OR (EXISTS (SELECT 1 FROM pick WHERE pick."fence" < {{fence_max}}) AND NOT EXISTS (SELECT 1 FROM tk)) AS stale,
  EXISTS (SELECT 1 FROM pick WHERE pick."fence" >= {{fence_max}}) AS fence_exhausted,
  (SELECT k."permits" FROM k) AS permits,
  (SELECT min(sl."expires_at_ms") FROM sl WHERE sl.live AND sl."slot" <= $3::integer) AS first_expiry,
  EXISTS (SELECT 1 FROM sl WHERE NOT sl.live AND sl."slot" <= $3::integer) AS free,
  (SELECT ahead.n FROM ahead) AS ahead_n,
  t.now_ms
FROM t
CROSS JOIN gate
LEFT JOIN won ON true
LEFT JOIN mine ON true
