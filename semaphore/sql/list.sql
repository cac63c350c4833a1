-- list: every live permit of every key, newest first, for diagnostics
-- (List; the CLI's status and ls). One statement, no arguments.
WITH t AS (
  SELECT {{now_ms}} AS now_ms
)
SELECT k."user_key", k."permits", s."slot", s."lock_id", s."fence", s."acquired_at_ms", s."expires_at_ms",
  COALESCE(s."identity", '')
FROM t, {{slots}} AS s
JOIN {{sem}} AS k ON k."key" = s."key"
WHERE s."lock_id" IS NOT NULL AND {{live(s)}}
ORDER BY s."acquired_at_ms" DESC, k."user_key", s."slot"
