-- holders: the live leases of key $1 (storage key), or of lockId $2, with
-- the server's clock.
WITH t AS (
  SELECT {{now_ms}} AS now_ms
)
SELECT h."lock_id", h."exclusive", h."expires_at_ms", h."acquired_at_ms", h."fence", h."user_key",
  COALESCE(h."identity", ''), t.now_ms
FROM {{holders}} AS h, t
WHERE (h."key" = $1::text OR h."lock_id" = $2::text) AND {{live(h)}}
ORDER BY h."acquired_at_ms", h."lock_id"
