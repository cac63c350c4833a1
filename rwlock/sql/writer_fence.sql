-- writer_fence: the key's latest writer fence (0: no writer ever), $1 the
-- storage key.
SELECT COALESCE((SELECT k."fence" FROM {{keys}} AS k WHERE k."key" = $1::text), 0)
