--returns boolean, boolean, boolean, bigint, bigint, text, bigint, boolean, bigint, bigint
-- acquire: one statement, all keys of the set or none.
-- $1 the set as JSON [{"s": storage key, "f": fence key, "u": user key}],
-- $2 lockId (a waiter's own, the same for all its attempts), $3 ttl ms,
-- $4 queue window ms (0: a plain attempt, which takes no place), $5
-- whether a notification reaches the waiter now, $6 identity (or NULL).
--
-- snap:  the keys' counter rows as the statement's snapshot shows them.
-- cur:   the live lock rows of the keys; own: ours (this statement ran
--        before, or a release handed the set to this waiter).
-- me:    the waiter's rows (place, tombstone: it has left).
-- ahead: the live waiters before this one (by place, then lockId) that
--        want any of its keys: its rank; while there is one, the set is
--        not free for it even when no key is held.
-- pre:   what the snapshot shows: present (every key has its counter row,
--        else the caller writes them, placeholder.sql, and attempts
--        again), mine, busy (a key held by another), tomb, rank, renewed
--        (the waiter's rows renewed within the last third of the window
--        with the same notified).
-- need:  whether this attempt would write: take the set (no key held,
--        nobody ahead), queue or renew, or leave the queue (it holds the
--        set). An attempt that would not (a key held or a waiter ahead,
--        its place fresh; or the set already its own) locks nothing and
--        writes nothing: its answer is true as of its snapshot, and it
--        makes no other statement wait (a lock on a counter row is a WAL
--        record, flushed at commit, while every statement on those keys
--        waits for it).
-- g:     the lock, when needed. The counter rows of the set's keys, locked
--        FOR UPDATE in one order (fence_key, collation "C") before
--        anything else is locked or written: every statement of the
--        package does the same, so two statements on {a, b} and {b, a}
--        queue on "a" and never deadlock.
-- chk:   fresh: nothing locked, or no counter's "ver" moved between this
--        statement's snapshot and its lock, so what the snapshot shows of
--        the keys' locks and waiters is still true (every change of a
--        key's holder or waiters bumps it under the same lock). A stale
--        attempt writes nothing; the caller runs it again with a new
--        snapshot.
-- take:  every key free (no live lock), nobody ahead, not a tombstone,
--        no counter at its maximum: take them all.
-- f:     the counters: each +1 when taking; "ver" +1 whenever this
--        statement changes the keys' holders or waiters.
-- ins:   the lock rows, one per key (overwriting expired rows).
-- q:     a waiter that did not take the set queues (a row per key, at
--        its place: the server's clock in µs at its first attempt) or
--        renews (deadline now + window; left alone while renewed).
-- dq:    a waiter that holds the set leaves the queue; rows dead for
--        {{waiter_gc}} ms go too.
-- ac:    an attempt that locked and took nothing (it queued, renewed or
--        left the queue) commits without waiting for its WAL to be flushed
--        (synchronous_commit off for its transaction, which is this
--        statement alone): it wrote no holder and no fence, only queue rows
--        (UNLOGGED) and "ver", and a crash loses both harmlessly; a later
--        statement that acts on them commits after them in the WAL, and
--        its flush covers them. Every statement that writes a holder or a
--        fence waits for its flush as before.
WITH
t AS (
  SELECT {{now_ms}} AS now_ms, {{now_us}} AS now_us
),
k AS MATERIALIZED (
  SELECT x."s", x."f", x."u" FROM jsonb_to_recordset($1::jsonb) AS x("s" text, "f" text, "u" text)
),
kn AS (
  SELECT count(*)::int AS n, min(k."s" COLLATE "C") AS ch FROM k
),
snap AS MATERIALIZED (
  SELECT c."fence_key", c."ver", c."fence" FROM {{fences}} AS c WHERE c."fence_key" IN (SELECT k."f" FROM k)
),
cur AS (
  SELECT l."key", l."lock_id", l."expires_at_ms", l."acquired_at_ms", l."fence"
  FROM {{locks}} AS l, t
  WHERE l."key" IN (SELECT k."s" FROM k) AND {{live(l)}}
),
own AS (
  SELECT cur.* FROM cur WHERE cur."lock_id" = $2::text
),
me AS (
  SELECT min(w."place") AS place, COALESCE(bool_or(w."ttl_ms" = 0), false) AS tomb,
    min(w."deadline_ms") AS deadline, bool_and(w."notified") AS notified, count(*) AS rows
  FROM {{waiters}} AS w WHERE w."lock_id" = $2::text
),
ahead AS (
  SELECT count(*) AS n FROM (
    SELECT DISTINCT w."lock_id" FROM {{waiters}} AS w, t
    WHERE w."key" IN (SELECT k."s" FROM k) AND w."lock_id" <> $2::text AND w."deadline_ms" > t.now_ms
      AND (w."place", w."lock_id") < (COALESCE((SELECT me."place" FROM me), t.now_us), $2::text)
    LIMIT {{rank_cap}}) AS a
),
pre AS MATERIALIZED (
  SELECT (SELECT count(*) FROM snap) = kn.n AS present,
    (SELECT count(*) FROM own) = kn.n AS mine,
    EXISTS (SELECT 1 FROM cur WHERE cur."lock_id" <> $2::text) AS busy,
    (SELECT me.tomb FROM me) AS tomb,
    (SELECT me.rows FROM me) AS rows,
    (SELECT ahead.n FROM ahead) AS ahead_n,
    EXISTS (SELECT 1 FROM snap WHERE snap."fence" >= {{fence_max}}) AS exhausted,
    EXISTS (SELECT 1 FROM me, t WHERE me.rows = kn.n AND me.notified = $5::boolean
            AND me.deadline > t.now_ms + $4::bigint * 2 / 3) AS renewed
  FROM kn
),
need AS MATERIALIZED (
  SELECT pre.present AND NOT pre.tomb AND (
      (pre.mine AND pre.rows > 0)
      OR (NOT pre.mine AND NOT pre.busy AND pre.ahead_n = 0)
      OR (NOT pre.mine AND $4::bigint > 0 AND NOT pre.renewed)) AS v
  FROM pre
),
g AS MATERIALIZED (
  SELECT c."fence_key", c."ver", c."fence" FROM {{fences}} AS c
  WHERE c."fence_key" IN (SELECT k."f" FROM k) AND (SELECT need.v FROM need)
  ORDER BY c."fence_key" COLLATE "C"
  FOR UPDATE {{nowait}}
),
chk AS MATERIALIZED (
  SELECT NOT need.v OR (
      (SELECT count(*) FROM g) = (SELECT count(*) FROM snap)
      AND NOT EXISTS (SELECT 1 FROM g LEFT JOIN snap ON snap."fence_key" = g."fence_key"
                      WHERE snap."ver" IS DISTINCT FROM g."ver")) AS fresh
  FROM need
),
st AS MATERIALIZED (
  SELECT pre.present AND chk.fresh AS ok, pre.present, pre.exhausted, pre.mine, pre.busy, pre.tomb, pre.ahead_n,
    pre.renewed, need.v AS need
  FROM pre, chk, need
),
take AS (
  SELECT t.now_ms FROM st, t
  WHERE st.ok AND st.need AND NOT st.mine AND NOT st.busy AND NOT st.tomb AND st.ahead_n = 0 AND NOT st.exhausted
),
q AS (
  INSERT INTO {{waiters}} AS w ("lock_id", "key", "place", "deadline_ms", "ttl_ms", "notified", "user_key", "fence_key", "n", "channel_key", "identity")
  SELECT $2::text, k."s", COALESCE((SELECT me."place" FROM me), t.now_us), t.now_ms + $4::bigint, $3::bigint, $5::boolean,
    k."u", k."f", kn.n, kn.ch, $6::text
  FROM k, t, kn, st
  WHERE $4::bigint > 0 AND st.ok AND st.need AND NOT st.mine AND NOT st.tomb AND NOT EXISTS (SELECT 1 FROM take)
    AND NOT st.renewed
  ORDER BY k."s" COLLATE "C"
  ON CONFLICT ("lock_id", "key") DO UPDATE SET "deadline_ms" = EXCLUDED."deadline_ms",
    "ttl_ms" = EXCLUDED."ttl_ms", "notified" = EXCLUDED."notified"
  WHERE w."ttl_ms" <> 0
  RETURNING 1
),
f AS (
  UPDATE {{fences}} AS c
  SET "fence" = c."fence" + CASE WHEN EXISTS (SELECT 1 FROM take) THEN 1 ELSE 0 END, "ver" = c."ver" + 1
  WHERE c."fence_key" IN (SELECT k."f" FROM k)
    AND (EXISTS (SELECT 1 FROM take) OR (SELECT count(*) FROM q) > 0)
  RETURNING c."fence_key", c."fence"
),
ins AS (
  INSERT INTO {{locks}} AS l ("key", "lock_id", "expires_at_ms", "acquired_at_ms", "fence", "user_key", "fence_key", "n", "identity")
  SELECT k."s", $2::text, take.now_ms + $3::bigint, take.now_ms, {{fence_text(f."fence")}}, k."u", k."f", kn.n, $6::text
  FROM take, kn, k JOIN f ON f."fence_key" = k."f"
  ORDER BY k."s" COLLATE "C"
  {{sql(lock_upsert.sql)}}
  RETURNING l."key", l."expires_at_ms", l."acquired_at_ms", l."fence"
),
ac AS (
  SELECT set_config('synchronous_commit', 'off', true) AS v FROM st
  WHERE st.need AND NOT EXISTS (SELECT 1 FROM take)
),
dq AS (
  DELETE FROM {{waiters}} AS w USING t, st
  WHERE st.ok AND st.need AND (
       (w."lock_id" = $2::text AND (st.mine OR EXISTS (SELECT 1 FROM take)))
    OR (w."key" IN (SELECT k."s" FROM k) AND w."lock_id" <> $2::text AND w."deadline_ms" < t.now_ms - {{waiter_gc}}))
  RETURNING 1
)
SELECT
  st.ok,
  st.present,
  st.mine OR EXISTS (SELECT 1 FROM ins) AS held,
  COALESCE((SELECT min(i."expires_at_ms") FROM ins AS i), (SELECT min(o."expires_at_ms") FROM own AS o)) AS expires_at_ms,
  COALESCE((SELECT min(i."acquired_at_ms") FROM ins AS i), (SELECT min(o."acquired_at_ms") FROM own AS o)) AS acquired_at_ms,
  COALESCE((SELECT string_agg(i."fence", ',' ORDER BY i."key" COLLATE "C") FROM ins AS i),
           (SELECT string_agg(o."fence", ',' ORDER BY o."key" COLLATE "C") FROM own AS o)) AS fences,
  (SELECT max(c."expires_at_ms") FROM cur AS c WHERE c."lock_id" <> $2::text) AS busy_until,
  st.exhausted AND NOT st.mine AS exhausted,
  st.ahead_n,
  t.now_ms
FROM t, st
WHERE (SELECT count(*) FROM ac) >= 0
