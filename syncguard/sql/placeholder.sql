-- placeholder: an expired row for a key that has none, written when an
-- acquire found the key free but without a row and could not win its
-- advisory try-lock ("absent" in acquire.sql). Only when the key still
-- has no row (a racing acquire that won commits its row) and no session
-- of a role that may write the lock table holds the advisory lock (an
-- acquire in flight, ours or the reference implementation's): then some
-- role without privileges holds it. Committed on its own (on the pool,
-- also for an acquire inside WithTx), so that the next attempt takes an
-- existing row over under its row lock. Never live (expires_at_ms 0): no
-- lookup, list, release or extend sees it; cleanup may delete it.
-- $1 storage key, $2 lockId (the attempt's, unique), $3 normalized user
-- key. Returns whether it wrote the row.
WITH p AS (
  INSERT INTO {{locks}} ("key", "lock_id", "expires_at_ms", "acquired_at_ms", "fence", "user_key")
  SELECT $1::text, $2::text, 0, 0, {{fence_text(0)}}, $3::text
  WHERE CASE WHEN EXISTS (SELECT 1 FROM {{locks}} AS l WHERE l."key" = $1::text) THEN false
             WHEN {{gate_held_privileged($1::text)}} THEN false
             ELSE true END
  ON CONFLICT DO NOTHING
  RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM p)
