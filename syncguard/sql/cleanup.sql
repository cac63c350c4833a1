-- opportunistic cleanup (CleanupInIsLocked): deletes the lock row of one key
-- when it expired more than {{cleanup_grace}} ms ago. Never touches the fence
-- table. The re-check under the row lock spares a row taken over meanwhile.
-- (The key's waiters, if any, attempt at its expiry on their own.)
DELETE FROM {{locks}} AS l
WHERE l."key" = $1::text
  AND l."expires_at_ms" < {{now_ms}} - {{cleanup_grace}}
