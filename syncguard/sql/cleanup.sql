-- opportunistic cleanup (CleanupInIsLocked): deletes the lock row of one key
-- when it expired more than {{cleanup_grace}} ms ago. Never touches the fence
-- table. The re-check under the row lock spares a row taken over meanwhile.
DELETE FROM {{locks}}
WHERE "key" = $1::text
  AND "expires_at_ms" < {{now_ms}} - {{cleanup_grace}}
