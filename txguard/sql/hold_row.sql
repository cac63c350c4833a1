-- The hold statement of a lease of one row of the kind's table, rows
-- (hold_semaphore.sql, hold_rwlock.sql, inserted by the sql call).
SELECT l."key", l."fence", l."expires_at_ms", {{now_ms}} AS "now_ms"
FROM (VALUES (1)) AS one
LEFT JOIN (
  SELECT k."key", {{fence_text(k."fence")}} AS "fence", k."expires_at_ms"
  FROM {{rows}} AS k
  WHERE k."lock_id" = $1::text
  FOR KEY SHARE OF k
) AS l ON true
