-- status and ls: every live permit of every semaphore key (semaphore's
-- tables, docs/semaphore.md). Diagnostics only.
WITH t AS (
  SELECT {{now_ms}} AS now_ms
)
SELECT 'permit', k."user_key", s."slot", k."permits", s."lock_id", s."fence", s."acquired_at_ms", s."expires_at_ms",
  COALESCE(s."identity", '')
FROM t, {{slots}} AS s
JOIN {{sem}} AS k ON k."key" = s."key"
WHERE s."lock_id" IS NOT NULL AND {{live(s)}}
ORDER BY s."acquired_at_ms" DESC, k."user_key", s."slot"
