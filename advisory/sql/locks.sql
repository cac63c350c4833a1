-- Advisory locks held or awaited in the current database, with the
-- sessions involved: the queries of the advisory-locks document's
-- "Monitoring and Debugging" section in one.
-- $1: true to list only waiting requests.
-- waitstart exists from PostgreSQL 14; to_jsonb reads it without failing
-- on older servers.
SELECT l.classid::bigint,
       l.objid::bigint,
       l.objsubid::int,
       l.pid,
       l.mode,
       l.granted,
       CASE WHEN l.granted OR l.pid IS NULL THEN ''
            ELSE array_to_string(pg_blocking_pids(l.pid), ',') END,
       floor(extract(epoch FROM (to_jsonb(l) ->> 'waitstart')::timestamptz) * 1000)::bigint,
       a.application_name,
       a.state,
       floor(extract(epoch FROM a.xact_start) * 1000)::bigint,
       floor(extract(epoch FROM a.query_start) * 1000)::bigint
FROM pg_locks l
LEFT JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'advisory'
  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND (NOT $1::boolean OR NOT l.granted)
ORDER BY l.classid, l.objid, l.objsubid, l.granted DESC, l.pid
