-- hold_semaphore: the permit of lockId $1 (package semaphore), checked
-- and locked in the caller's transaction. One statement, one round trip,
-- always one row.
--
-- l:  the permit's slot row in {{sem_slots}}, locked FOR KEY SHARE, as
--     hold.sql locks a mutex's row: lock_id has a unique index there, so
--     every change of the slot's holder (a takeover or a release's
--     hand-off setting another lockId, a release setting NULL) changes a
--     key column and locks the row FOR UPDATE: it waits until the
--     caller's transaction ends. The holder's extends (an UPDATE of
--     expires_at_ms only) lock it FOR NO KEY UPDATE and go through. The
--     key's other slots are not locked: the other permits come and go.
-- now_ms is read after the lock was granted, as in hold.sql.
SELECT l."key", l."fence", l."expires_at_ms", {{now_ms}} AS "now_ms"
FROM (VALUES (1)) AS one
LEFT JOIN (
  SELECT k."key", {{fence_text(k."fence")}} AS "fence", k."expires_at_ms"
  FROM {{sem_slots}} AS k
  WHERE k."lock_id" = $1::text
  FOR KEY SHARE OF k
) AS l ON true
