-- hold_multilock: the set of lockId $1 (package multilock), checked and
-- locked in the caller's transaction. One statement, one round trip: a
-- row per lock row of the set, or one row of NULLs when there is none.
--
-- l:  the set's lock rows in {{ml_locks}} (a row per key, all of one
--     holding sharing its lockId, expiry and size n), locked FOR SHARE in
--     the one order of the package's writes (key, collation "C"), so that
--     a takeover in flight, which writes the rows in that order, never
--     deadlocks with this. FOR SHARE, not FOR KEY SHARE: lock_id is no key
--     column of this table (its index is not unique: a set has a row per
--     key), so a takeover that rewrites a row in place (INSERT ... ON
--     CONFLICT DO UPDATE of lock_id) locks it only FOR NO KEY UPDATE,
--     which FOR KEY SHARE would let through; FOR SHARE makes it wait, and
--     a release's DELETE. The price: the holding's own extends (an UPDATE
--     of expires_at_ms) wait too. Under READ COMMITTED a takeover in
--     flight is waited for; once it committed, the rows it took are no
--     longer the set's (the re-check of lock_id on their latest version
--     drops them), and fewer than n rows come back; under REPEATABLE READ
--     and SERIALIZABLE one committed after the snapshot fails the
--     statement with 40001.
-- now_ms is read per row, after that row's lock was granted: the caller
-- takes the largest (after every lock) and the smallest expiry.
SELECT l."key", l."user_key", l."fence", l."expires_at_ms", l."n", {{now_ms}} AS "now_ms"
FROM (VALUES (1)) AS one
LEFT JOIN (
  SELECT k."key", k."user_key", k."fence", k."expires_at_ms", k."n"
  FROM {{ml_locks}} AS k
  WHERE k."lock_id" = $1::text
  ORDER BY k."key" COLLATE "C"
  FOR SHARE OF k
) AS l ON true
