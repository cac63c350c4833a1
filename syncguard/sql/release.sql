-- release: one statement. $1 lockId, $2 '' or the releasing Backend's
-- wake token (see wake.go).
-- Deletes the row only if it belongs to $1 and is live, under the row lock
-- (a concurrent takeover changes lock_id, and the re-check then fails).
-- When nothing was deleted, the same row is read from the statement's
-- snapshot to tell "expired" from "not-found" without another round trip.
-- n: a deleted lock wakes its waiters, in every process listening on the
-- table's channel, when this transaction commits ("r <key hash> [token]";
-- see wake.go), if any process waits for the key: the LISTEN connections
-- of waiting processes hold a shared advisory lock on the key's wait id,
-- so the exclusive try-lock fails. (Notifying commits are serialized by
-- PostgreSQL: a release nobody waits for must not notify.) The hash is also
-- returned: the releasing Backend wakes its own waiters at once, and knows
-- its notification by the token.
-- sc: on the pool path ($2 <> '': the statement is its own transaction),
-- when the deleted lock had at most {{async_release_max}} ms left, the
-- commit does not wait for the WAL flush (synchronous_commit off for this
-- transaction only; it is read at commit). A release lost in a crash
-- leaves the lock held until its TTL, which is safe, and that bounds how
-- long; the commit of any later write that depends on the release (the
-- next acquire of the key) flushes the WAL up to itself, the release
-- included. One fsync per hand-off instead of two (docs/design.md,
-- "Durability of a release"). Inside the caller's transaction ($2 = '')
-- nothing changes: that commit is the caller's.
WITH
t AS (
  SELECT {{now_ms}} AS now_ms
),
d AS (
  DELETE FROM {{locks}} AS l USING t
  WHERE l."lock_id" = $1::text AND {{live(l)}}
  RETURNING l."lock_id", {{wake_hash(l."key")}} AS kh, l."expires_at_ms" - t.now_ms AS left_ms
),
sc AS (
  SELECT set_config('synchronous_commit', 'off', true) AS v FROM d
  WHERE $2::text <> '' AND d.left_ms <= {{async_release_max}}
),
n AS (
  SELECT pg_notify({{channel}}, 'r ' || d.kh || CASE WHEN $2::text <> '' THEN ' ' || $2::text ELSE '' END) AS v FROM d
  WHERE NOT pg_try_advisory_xact_lock({{wait_class}}, {{wait_id(d.kh)}})
)
SELECT d."lock_id",
  CASE WHEN d."lock_id" IS NULL THEN
    (SELECT s."expires_at_ms" FROM {{locks}} AS s WHERE s."lock_id" = $1::text) END,
  t.now_ms, d.kh
FROM t
LEFT JOIN d ON true
LEFT JOIN n ON true
LEFT JOIN sc ON true
