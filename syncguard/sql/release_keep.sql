--returns text, bigint, bigint, text, text, boolean
-- release_keep: the release of a lock whose acquire found the key's
-- advisory lock held by someone else and took the row over ('open' in
-- acquire.sql), usually because some role holds the key's advisory id:
-- the row is kept, expired (expires_at_ms 0, acquired_at_ms kept),
-- instead of deleted, so that the next acquire of the key takes an
-- existing row over under row locks and never needs to read pg_locks
-- (a deleted row makes the next acquire write a placeholder, and ask
-- pg_locks twice who holds the id). Only when no live waiter is queued
-- for the key (release.sql hands the key over, and wakes waiters, with
-- a delete); then Release runs release.sql. Same columns as release.sql.
-- $1 lockId. Kept rows are expired rows like any other: no lookup, list,
-- release or extend sees them, cleanup may delete them.
-- sc: as in release.sql, a lock with at most {{async_release_max}} ms left
-- is released without waiting for the WAL flush (this transaction only).
WITH
t AS (
  SELECT {{now_ms}} AS now_ms
),
k AS (
  UPDATE {{locks}} AS l SET "expires_at_ms" = 0
  FROM t
  WHERE l."lock_id" = $1::text AND {{live(l)}}
--if queue
    AND NOT EXISTS (SELECT 1 FROM {{waiters}} AS q WHERE q."key" = l."key" AND q."deadline_ms" > t.now_ms)
--end
  RETURNING l."lock_id", l."expires_at_ms" - t.now_ms AS left_ms
),
sc AS (
  SELECT set_config('synchronous_commit', 'off', true) AS v FROM k WHERE k.left_ms <= {{async_release_max}}
)
SELECT k."lock_id",
  CASE WHEN k."lock_id" IS NULL THEN
    (SELECT s."expires_at_ms" FROM {{locks}} AS s WHERE s."lock_id" = $1::text) END,
  t.now_ms, NULL::text AS woke, NULL::text AS woke_channel, false AS left_queue
FROM t
LEFT JOIN k ON true
LEFT JOIN sc ON true
