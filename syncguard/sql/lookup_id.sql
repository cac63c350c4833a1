-- lookup by lockId: one read (with the holder's identity: the holders table joined by lockId, unless it is missing). $1 lockId.
WITH t AS (SELECT {{now_ms}} AS now_ms)
SELECT l."lock_id", l."expires_at_ms", l."acquired_at_ms", l."fence", l."user_key", t.now_ms,
--if holders
  h."identity"
--end
--if !holders
  NULL::text
--end
FROM t
LEFT JOIN {{locks}} AS l ON l."lock_id" = $1::text
--if holders
LEFT JOIN {{holders}} AS h ON h."lock_id" = l."lock_id"
--end
