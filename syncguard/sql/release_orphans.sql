-- release_orphans: the background release of acquires whose outcome is
-- unknown (docs/errors.md, "A cancelled acquire"). One statement for a
-- batch. $1 lockIds joined by ',' (lockIds are base64url: no commas).
-- Deletes those rows whatever their expiry: a lockId belongs to one
-- acquire only, so a row carrying it is that acquire's, and a takeover
-- would have changed it. Returns the lockIds deleted, joined the same way,
-- in one row.
WITH d AS (
  DELETE FROM {{locks}} AS l
  WHERE l."lock_id" = ANY (string_to_array($1::text, ','))
  RETURNING l."lock_id"
)
SELECT coalesce(string_agg(d."lock_id", ','), '') FROM d
