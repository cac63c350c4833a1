--returns boolean, bigint, bigint, text, text, boolean, bigint, text, integer, bigint, bigint
-- release: one statement. $1 lockId, $2 whether to send the wake-up
-- notification in its commit (false with Config.NotifyDB, which carries
-- it after the commit), $3 the storage key when $1 is a waiter giving up
-- (its withdrawal), else NULL.
--
-- s0:  the slot of $1, its row locked (FOR UPDATE: a concurrent release
--      of $1, or a take of it once expired, that committed meanwhile is
--      seen: the row no longer matches); d: if live. Under that lock rel
--      finds it as d does, so a waiter's row that wd removes is always
--      given the slot.
-- hold: the key's live holders (a waiter among them is skipped).
-- w:   the first live waiter of the key (by place) that holds no permit
--      and whose lockId is on no slot row (an expired hand-off it did not
--      collect: its own attempt takes that slot again; a lockId is on one
--      slot row at most, a unique index), its queue row locked (FOR
--      UPDATE). Concurrent releases of one key meet on that row, not on
--      the key row: the later waits for the earlier's commit, finds the
--      row gone (or changed: re-checked) and locks the next waiter in
--      place order instead, in the same statement (READ COMMITTED). So
--      each release hands its slot to a distinct first waiter, in FIFO
--      order, without a retry; releases do not take part in the key's
--      version (acquire.sql): a take re-checks its slot under the slot
--      row's lock, and a waiter's row leaves the queue in the statement
--      that gives it a permit.
-- wd:  w's queue row leaves the queue;
-- rel: the slot goes to that waiter in this same commit (its lockId, its
--      TTL from now, the slot's fence + 1), or is freed (lock_id NULL,
--      expires_at_ms 0; the fence counter stays); acquired_at_ms is the
--      server time of the change either way (a free slot's: when it was
--      freed). Re-checked under the
--      slot row's lock: only a live permit of $1 is released.
-- me:  a withdrawing waiter's queue row becomes a tombstone (ttl 0): an
--      attempt of its still in flight can neither queue it again nor take
--      a permit; left_queue says that it was there, live.
-- nx:  after a withdrawal, the next live waiter of its key is woken, so
--      that it attempts now (a free permit may be its).
-- n:   notifications on the key's channel naming the waiter granted (and
--      nx's): hints only, any role can send one; the attempt they cause
--      finds the slot.
-- granted*: the waiter rel handed the slot to, the slot, its fence and
--      expiry, as committed: a waiter of the releasing Semaphore holds the
--      permit without an attempt (grants.go).
WITH
t AS (
  SELECT {{now_ms}} AS now_ms, $2::boolean AS notify, $3::text AS wkey
),
s0 AS (
  SELECT l."key", l."slot", l."expires_at_ms", l."fence", {{live(l)}} AS live
  FROM {{slots}} AS l, t WHERE l."lock_id" = $1::text
  FOR UPDATE OF l
),
d AS (
  SELECT s0.* FROM s0 WHERE s0.live
),
hold AS (
  SELECT l."lock_id" FROM {{slots}} AS l, d, t
  WHERE l."key" = d."key" AND l."lock_id" IS NOT NULL AND {{live(l)}}
),
w AS (
  SELECT q."lock_id" FROM {{waiters}} AS q, d, t
  WHERE q."key" = d."key" AND q."deadline_ms" > t.now_ms AND q."ttl_ms" > 0 AND q."lock_id" <> $1::text
    AND d."fence" < {{fence_max}}
    AND NOT EXISTS (SELECT 1 FROM hold WHERE hold."lock_id" = q."lock_id")
    AND NOT EXISTS (SELECT 1 FROM {{slots}} AS o WHERE o."lock_id" = q."lock_id")
  ORDER BY q."place", q."lock_id"
  LIMIT 1
  FOR UPDATE OF q
),
wd AS (
  DELETE FROM {{waiters}} AS q USING t
  WHERE q."lock_id" = (SELECT w."lock_id" FROM w) AND q."deadline_ms" > t.now_ms AND q."ttl_ms" > 0
  RETURNING q."lock_id", q."ttl_ms", q."identity"
),
rel AS (
  UPDATE {{slots}} AS l SET
    "lock_id" = wd."lock_id",
    "expires_at_ms" = COALESCE(t.now_ms + wd."ttl_ms", 0),
    "acquired_at_ms" = t.now_ms,
    "fence" = CASE WHEN wd."lock_id" IS NULL THEN l."fence" ELSE l."fence" + 1 END,
    "identity" = wd."identity"
  FROM t LEFT JOIN wd ON true
  WHERE l."lock_id" = $1::text AND {{live(l)}}
  RETURNING l."key", l."lock_id" AS granted, l."slot", l."fence", l."expires_at_ms"
),
me AS (
  INSERT INTO {{waiters}} AS q ("key", "lock_id", "place", "deadline_ms", "ttl_ms")
  SELECT t.wkey, $1::text, 0, t.now_ms - 1, 0 FROM t WHERE t.wkey IS NOT NULL
  ON CONFLICT ("lock_id") DO UPDATE SET "deadline_ms" = EXCLUDED."deadline_ms", "ttl_ms" = 0
  RETURNING q."key", q."xmax"::text <> '0' AS was
),
nx AS (
  SELECT q."key", q."lock_id" FROM {{waiters}} AS q, me, t
  WHERE q."key" = me."key" AND q."lock_id" <> $1::text AND q."deadline_ms" > t.now_ms AND q."ttl_ms" > 0
    AND NOT EXISTS (SELECT 1 FROM wd)
  ORDER BY q."place", q."lock_id"
  LIMIT 1
),
wk AS (
  SELECT rel."key", rel."granted" AS lock_id FROM rel WHERE rel."granted" IS NOT NULL
  UNION ALL SELECT nx."key", nx."lock_id" FROM nx
),
n AS (
  SELECT count(pg_notify({{wake_channel(wk."key")}}, {{wake_payload(wk."lock_id")}})) AS c FROM wk, t WHERE t.notify
)
SELECT
  EXISTS (SELECT 1 FROM rel) AS released,
  (SELECT s0."expires_at_ms" FROM s0) AS seen_expires,
  t.now_ms,
  (SELECT {{wake_payload(wk."lock_id")}} FROM wk LIMIT 1) AS woke,
  (SELECT {{wake_channel(wk."key")}} FROM wk LIMIT 1) AS woke_channel,
  EXISTS (SELECT 1 FROM me WHERE me.was) AS left_queue,
  (SELECT n.c FROM n) AS notified,
  (SELECT rel."granted" FROM rel) AS granted,
  (SELECT rel."slot" FROM rel WHERE rel."granted" IS NOT NULL) AS granted_slot,
  (SELECT rel."fence" FROM rel WHERE rel."granted" IS NOT NULL) AS granted_fence,
  (SELECT rel."expires_at_ms" FROM rel WHERE rel."granted" IS NOT NULL) AS granted_expires
FROM t
