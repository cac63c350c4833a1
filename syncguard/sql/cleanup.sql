-- opportunistic cleanup (CleanupInIsLocked): deletes the lock row of one key
-- when it expired more than {{cleanup_grace}} ms ago. Never touches the fence
-- table. The re-check under the row lock spares a row taken over meanwhile.
-- (The key's waiters, if any, attempt at its expiry on their own.)
WITH t AS (SELECT {{now_ms}} AS now_ms)
DELETE FROM {{locks}} AS l USING t
WHERE l."key" = $1::text
  AND l."expires_at_ms" < t.now_ms - {{cleanup_grace}}
