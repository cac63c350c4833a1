-- status and ls: every live lease of every read-write lock (rwlock's
-- tables, docs/rwlock.md). Diagnostics only.
WITH t AS (
  SELECT {{now_ms}} AS now_ms
)
SELECT CASE WHEN h."exclusive" THEN 'exclusive' ELSE 'shared' END, h."user_key", 0, 0, h."lock_id", h."fence",
  h."acquired_at_ms", h."expires_at_ms", COALESCE(h."identity", '')
FROM t, {{holders}} AS h
WHERE {{live(h)}}
ORDER BY h."acquired_at_ms" DESC, h."user_key", h."lock_id"
