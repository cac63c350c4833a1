-- release: one statement. $1 lockId.
-- Deletes the row only if it belongs to $1 and is live, under the row lock
-- (a concurrent takeover changes lock_id, and the re-check then fails).
-- When nothing was deleted, the same row is read from the statement's
-- snapshot to tell "expired" from "not-found" without another round trip.
WITH
t AS (
  SELECT {{now_ms}} AS now_ms
),
d AS (
  DELETE FROM {{locks}} AS l USING t
  WHERE l."lock_id" = $1::text AND {{live(l)}}
  RETURNING l."lock_id"
)
SELECT d."lock_id",
  CASE WHEN d."lock_id" IS NULL THEN
    (SELECT s."expires_at_ms" FROM {{locks}} AS s WHERE s."lock_id" = $1::text) END,
  t.now_ms
FROM t
LEFT JOIN d ON true
