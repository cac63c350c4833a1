-- list: every live lease of every key, newest first, for diagnostics
-- (List; the CLI's status and ls). One statement, no arguments.
WITH t AS (
  SELECT {{now_ms}} AS now_ms
)
SELECT h."user_key", h."exclusive", h."lock_id", h."fence", h."acquired_at_ms", h."expires_at_ms",
  COALESCE(h."identity", '')
FROM t, {{holders}} AS h
WHERE {{live(h)}}
ORDER BY h."acquired_at_ms" DESC, h."user_key", h."lock_id"
