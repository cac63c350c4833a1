-- opportunistic cleanup (CleanupInIsLocked): deletes the lock row of one key
-- when it expired more than {{cleanup_grace}} ms ago. Never touches the fence
-- table. The re-check under the row lock spares a row taken over meanwhile.
-- The delete wakes the key's waiters, if any, as a release does.
WITH d AS (
  DELETE FROM {{locks}} AS l
  WHERE l."key" = $1::text
    AND l."expires_at_ms" < {{now_ms}} - {{cleanup_grace}}
  RETURNING {{wake_hash(l."key")}} AS kh
)
SELECT pg_notify({{channel}}, 'r ' || d.kh) FROM d
WHERE NOT pg_try_advisory_xact_lock({{wait_class}}, {{wait_id(d.kh)}})
