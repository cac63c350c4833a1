-- Ends the server session that still holds a session-level advisory lock
-- after the *sql.Conn of its SessionLock went back to the pool (a misuse):
-- only that very session (pid and backend_start, so a reused pid is never
-- hit), and only while it still holds the lock. Returns one row (true) when
-- it was terminated, none otherwise.
-- $1 pid, $2 backend_start, $3 classid, $4 objid, $5 objsubid.
SELECT pg_terminate_backend(a.pid)
FROM pg_stat_activity AS a
WHERE a.pid = $1::int
  AND a.backend_start = $2::timestamptz
  AND EXISTS (
    SELECT 1 FROM pg_locks AS l
    WHERE l.locktype = 'advisory' AND l.pid = a.pid AND l.granted
      AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
      AND l.classid::bigint = $3::bigint AND l.objid::bigint = $4::bigint AND l.objsubid = $5::int)
