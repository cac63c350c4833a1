-- lookup by lockId: one read. $1 lockId.
SELECT l."lock_id", l."expires_at_ms", l."acquired_at_ms", l."fence", l."user_key", t.now_ms
FROM (SELECT {{now_ms}} AS now_ms) AS t
LEFT JOIN {{locks}} AS l ON l."lock_id" = $1::text
