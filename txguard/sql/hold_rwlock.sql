-- hold_rwlock: the lease of lockId $1 (package rwlock: a reader or the
-- writer), checked and locked in the caller's transaction. One
-- statement, one round trip, always one row.
--
-- l:  the lease's holder row in {{rw_holders}} (a row per live lease),
--     locked FOR KEY SHARE, as hold.sql locks a mutex's row. A lease
--     ends only with its row: a release deletes it, and an acquire of the
--     key deletes the key's dead holders before it decides, so a
--     takeover (a writer after an expired reader or writer, a reader
--     after an expired writer) waits on this row until the caller's
--     transaction ends. The holder's extends (an UPDATE of expires_at_ms
--     only, no key column: lock_id's index is the unique one) go through.
--     The key's row in the keys table is not locked: the other readers
--     come and go.
-- now_ms is read after the lock was granted, as in hold.sql.
SELECT l."key", l."fence", l."expires_at_ms", {{now_ms}} AS "now_ms"
FROM (VALUES (1)) AS one
LEFT JOIN (
  SELECT k."key", {{fence_text(k."fence")}} AS "fence", k."expires_at_ms"
  FROM {{rw_holders}} AS k
  WHERE k."lock_id" = $1::text
  FOR KEY SHARE OF k
) AS l ON true
