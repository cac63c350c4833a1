-- list (Backend.List): lock rows, newest acquisition first, read in one
-- statement with the server's now_ms. $1 true: expired rows too;
-- $2 the most rows returned (NULL: all).
-- Always at least one row: the lock columns are NULL when none matched.
WITH t AS (SELECT {{now_ms}} AS now_ms)
SELECT t.now_ms, l."user_key", l."lock_id", l."fence", l."acquired_at_ms", l."expires_at_ms",
--if holders
  (SELECT h."identity" FROM {{holders}} AS h WHERE h."lock_id" = l."lock_id")
--end
--if !holders
  NULL::text
--end
FROM t
LEFT JOIN LATERAL (
  SELECT l."user_key", l."lock_id", l."fence", l."acquired_at_ms", l."expires_at_ms", l."key"
  FROM {{locks}} AS l
  WHERE $1::boolean OR {{live(l)}}
  ORDER BY l."acquired_at_ms" DESC, l."key"
  LIMIT $2::bigint
) AS l ON true
ORDER BY l."acquired_at_ms" DESC, l."key"
