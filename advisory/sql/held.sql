-- Granted advisory locks of the current session on one key.
-- $1 classid, $2 objid, $3 objsubid (1: bigint key, 2: int4 pair), as pg_locks shows them.
SELECT count(*)
FROM pg_locks
WHERE locktype = 'advisory'
  AND pid = pg_backend_pid()
  AND granted
  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND classid::bigint = $1::bigint
  AND objid::bigint = $2::bigint
  AND objsubid = $3::int
