-- lookup by key (also serves isLocked): one read. $1 storage key.
-- Always one row; the lock columns are NULL when there is no row.
SELECT l."lock_id", l."expires_at_ms", l."acquired_at_ms", l."fence", l."user_key", t.now_ms
FROM (SELECT {{now_ms}} AS now_ms) AS t
LEFT JOIN {{locks}} AS l ON l."key" = $1::text
