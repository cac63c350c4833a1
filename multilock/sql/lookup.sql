-- lookup: the lock rows of a holding ($1 lockId), of a set's keys ($2,
-- the set as JSON [{"s"}]) and of the holdings that hold any of them, or
-- all rows ($3), with whether each is live by the server's clock now.
-- Read only.
SELECT l."key", l."lock_id", l."user_key", l."fence", l."expires_at_ms", l."acquired_at_ms", l."n",
  l."identity", {{live(l)}} AS live, t.now_ms
FROM {{locks}} AS l, (SELECT {{now_ms}} AS now_ms) AS t
WHERE $3::boolean OR l."lock_id" = $1::text
   OR l."key" IN (SELECT x."s" FROM jsonb_to_recordset($2::jsonb) AS x("s" text))
   OR l."lock_id" IN (SELECT m."lock_id" FROM {{locks}} AS m
                      WHERE m."key" IN (SELECT x."s" FROM jsonb_to_recordset($2::jsonb) AS x("s" text)))
ORDER BY l."lock_id", l."key" COLLATE "C"
