--returns boolean, bigint, integer, bigint, bigint, text, text, boolean, bigint, bigint
-- release: one statement. $1 lockId; $2 whether to send the wake-ups in
-- its commit (false with Config.NotifyDB: the caller sends them after);
-- $3 whether $1 is a waiter leaving the queue (its rows become a
-- tombstone, ttl 0 and dead, so that an attempt of its still in flight
-- neither queues it again nor takes the set); $4 and $5 the storage and
-- fence key of the waiter's first key (its tombstone when it has no row).
--
-- fr:    the keys this statement frees: its live lock rows, its queue rows.
-- cand:  the live waiters that want any of them.
-- g:     the counter rows of every key involved (ours, and all keys of
--        every candidate), locked FOR UPDATE in the one order first
--        (acquire.sql); chk.fresh: no "ver" moved since the snapshot, else
--        nothing is written and the caller runs the statement again.
-- d:     our live lock rows go.
-- adm:   the candidates admitted: live and whole, every key free once d
--        is done, no live waiter before them (place, lockId) wanting any
--        of their keys; notified or polling (a polling waiter finds its set
--        at its next poll, as it would find the keys free: it is first for
--        them either way, and its confirmation then locks nothing).
--        Two admitted waiters never share a key (the later one would have
--        the earlier one before it), so each is decided on its own.
-- wd:    their queue rows go; gf: their keys' counters +1 (every involved
--        counter's "ver" +1 when anything changed); gl: their lock rows,
--        each with its own TTL from now, written after d (count(*) of d).
-- nt:    a wake-up per admitted waiter on the channel of its first key,
--        naming it (a hash of its lockId): a hint, its attempt finds the rows.
-- sc:    when nothing was handed over, and each key it deletes had at
--        most {{async_release_max}} ms left, the commit does not wait for
--        the WAL flush (synchronous_commit off for this transaction only,
--        as the mutex's release: docs/design-operations.md, "Durability of
--        a release"). It wrote no holder and no fence, only deletes, "ver"
--        and queue rows (UNLOGGED): a release lost in a crash leaves the
--        set held until its TTL, which is safe and bounded, and the commit
--        of any later write that depends on it (a take of one of its keys,
--        which waits for its flush) flushes the WAL up to itself, the
--        release included. A hand-off is always flushed: its fences must
--        not be handed out twice.
WITH
{{sql(mine.sql)}},
mw AS (
  SELECT w."key", w."fence_key", w."deadline_ms" > t.now_ms AND w."ttl_ms" > 0 AS live
  FROM {{waiters}} AS w, t WHERE w."lock_id" = $1::text
),
fr AS (
  SELECT mine."key" FROM mine WHERE mine.live UNION SELECT mw."key" FROM mw
),
cand AS (
  SELECT DISTINCT w."lock_id" FROM {{waiters}} AS w, t
  WHERE w."key" IN (SELECT fr."key" FROM fr) AND w."lock_id" <> $1::text AND w."deadline_ms" > t.now_ms
),
wr AS (
  SELECT w.* FROM {{waiters}} AS w WHERE w."lock_id" IN (SELECT cand."lock_id" FROM cand)
),
gk AS (
  SELECT mine."fence_key" AS f FROM mine WHERE mine.live
  UNION SELECT mw."fence_key" FROM mw
  UNION SELECT wr."fence_key" FROM wr
  UNION SELECT $5::text WHERE $3::boolean
),
snap AS (
  SELECT c."fence_key", c."ver" FROM {{fences}} AS c WHERE c."fence_key" IN (SELECT gk.f FROM gk)
),
g AS MATERIALIZED (
  SELECT c."fence_key", c."ver", c."fence" FROM {{fences}} AS c
  WHERE c."fence_key" IN (SELECT gk.f FROM gk)
  ORDER BY c."fence_key" COLLATE "C"
  FOR UPDATE {{nowait}}
),
chk AS MATERIALIZED (
  SELECT NOT EXISTS (SELECT 1 FROM g LEFT JOIN snap ON snap."fence_key" = g."fence_key"
                     WHERE snap."ver" IS DISTINCT FROM g."ver") AS fresh
),
d AS (
  DELETE FROM {{locks}} AS l USING t, chk
  WHERE l."lock_id" = $1::text AND {{live(l)}} AND chk.fresh
  RETURNING l."key", l."expires_at_ms" - t.now_ms AS left_ms
),
adm AS MATERIALIZED (
  SELECT c."lock_id" FROM cand AS c, t, chk
  WHERE chk.fresh
    AND (SELECT count(*) FROM wr WHERE wr."lock_id" = c."lock_id" AND wr."deadline_ms" > t.now_ms
           AND wr."ttl_ms" > 0)
        = (SELECT max(wr."n") FROM wr WHERE wr."lock_id" = c."lock_id")
    AND NOT EXISTS (
      SELECT 1 FROM wr, {{locks}} AS l
      WHERE wr."lock_id" = c."lock_id" AND l."key" = wr."key" AND l."lock_id" <> $1::text AND {{live(l)}})
    AND NOT EXISTS (
      SELECT 1 FROM wr, {{waiters}} AS v
      WHERE wr."lock_id" = c."lock_id" AND v."key" = wr."key" AND v."lock_id" <> c."lock_id"
        AND v."lock_id" <> $1::text AND v."deadline_ms" > t.now_ms
        AND (v."place", v."lock_id") < (wr."place", wr."lock_id"))
    AND NOT EXISTS (
      SELECT 1 FROM wr, g WHERE wr."lock_id" = c."lock_id" AND g."fence_key" = wr."fence_key"
        AND g."fence" >= {{fence_max}})
),
wd AS (
  DELETE FROM {{waiters}} AS w WHERE w."lock_id" IN (SELECT adm."lock_id" FROM adm)
  RETURNING w."lock_id", w."key", w."fence_key", w."user_key", w."ttl_ms", w."n", w."identity", w."channel_key"
),
tomb AS (
  INSERT INTO {{waiters}} AS w ("lock_id", "key", "place", "deadline_ms", "ttl_ms", "notified", "user_key", "fence_key", "n", "channel_key")
  SELECT $1::text, x."key", 0, t.now_ms - 1, 0, false, '', '', 0, x."key"
  FROM t, chk, (SELECT mw."key" FROM mw UNION SELECT $4::text) AS x
  WHERE $3::boolean AND chk.fresh AND x."key" IS NOT NULL
  ON CONFLICT ("lock_id", "key") DO UPDATE SET "deadline_ms" = EXCLUDED."deadline_ms", "ttl_ms" = 0
  RETURNING 1
),
gf AS (
  UPDATE {{fences}} AS c
  SET "fence" = c."fence" + CASE WHEN c."fence_key" IN (SELECT wd."fence_key" FROM wd) THEN 1 ELSE 0 END,
    "ver" = c."ver" + 1
  WHERE c."fence_key" IN (SELECT g."fence_key" FROM g)
    AND ((SELECT count(*) FROM d) > 0 OR (SELECT count(*) FROM wd) > 0 OR (SELECT count(*) FROM tomb) > 0)
  RETURNING c."fence_key", c."fence"
),
gl AS (
  INSERT INTO {{locks}} AS l ("key", "lock_id", "expires_at_ms", "acquired_at_ms", "fence", "user_key", "fence_key", "n", "identity")
  SELECT wd."key", wd."lock_id", t.now_ms + wd."ttl_ms", t.now_ms, {{fence_text(gf."fence")}}, wd."user_key", wd."fence_key", wd."n", wd."identity"
  FROM wd JOIN gf ON gf."fence_key" = wd."fence_key", t
  WHERE (SELECT count(*) FROM d) >= 0
  ORDER BY wd."key" COLLATE "C"
  {{sql(lock_upsert.sql)}}
  RETURNING l."lock_id"
),
wk AS (
  SELECT DISTINCT wd."lock_id", wd."channel_key" FROM wd
),
nt AS (
  SELECT pg_notify({{wake_channel(wk."channel_key")}}, {{wake_payload(wk."lock_id")}}) AS v FROM wk WHERE $2::boolean
),
sc AS (
  SELECT set_config('synchronous_commit', 'off', true) AS v FROM chk
  WHERE chk.fresh AND NOT EXISTS (SELECT 1 FROM wd)
    AND NOT EXISTS (SELECT 1 FROM d WHERE d.left_ms > {{async_release_max}})
)
SELECT
  chk.fresh,
  (SELECT count(*) FROM d) AS deleted,
  (SELECT max(mine."n") FROM mine) AS n,
  (SELECT max(mine."expires_at_ms") FROM mine) AS seen_expires,
  t.now_ms,
  (SELECT string_agg({{wake_payload(wk."lock_id")}}, ',') FROM wk) AS woke,
  (SELECT string_agg({{wake_channel(wk."channel_key")}}, ',') FROM wk) AS woke_channels,
  EXISTS (SELECT 1 FROM mw WHERE mw.live) AS left_queue,
  (SELECT count(*) FROM gl) AS granted,
  (SELECT count(*) FROM nt) AS notified
FROM t, chk
WHERE (SELECT count(*) FROM sc) >= 0
