-- hold: the lease of lockId $1, checked and locked in the caller's
-- transaction. One statement, one round trip, always one row.
--
-- l:  the lock row of $1, locked FOR KEY SHARE. That lock lets the
--     holder's extends through (an UPDATE of expires_at_ms only, a non-key
--     column, locks FOR NO KEY UPDATE) and makes every takeover wait until
--     the caller's transaction ends: an acquire's INSERT ... ON CONFLICT DO
--     UPDATE or UPDATE sets lock_id, which its unique index makes a key
--     column (FOR UPDATE); a release, Revoke or cleanup deletes the row
--     (FOR UPDATE); the reference implementation locks the row with
--     SELECT ... FOR UPDATE before it writes. Under READ COMMITTED a
--     takeover or release in flight is waited for and, once committed,
--     leaves no row of $1 (the re-check on the row's latest version fails);
--     under REPEATABLE READ and SERIALIZABLE one committed after the
--     snapshot fails the statement with 40001.
-- The row is locked whether live or not; the caller tells them apart
-- with now_ms, read after the lock was granted (the select list of the
-- join, evaluated once its row exists): a lease is held while
-- expires_at_ms > now_ms, without the spec's 1000 ms tolerance, which
-- protects the holder from a taker, not a taker from a holder.
SELECT l."key", l."fence", l."expires_at_ms", {{now_ms}} AS "now_ms"
FROM (VALUES (1)) AS one
LEFT JOIN (
  SELECT k."key", k."fence", k."expires_at_ms"
  FROM {{locks}} AS k
  WHERE k."lock_id" = $1::text
  FOR KEY SHARE OF k
) AS l ON true
