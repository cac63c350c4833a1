-- placeholder: the counter (guard) rows of a set's keys that do not exist
-- yet, at 0, in the one lock order; committed on its own before the
-- acquire runs again (acquire.sql's present). $1 the set as JSON
-- [{"s","f","u"}].
INSERT INTO {{fences}} ("fence_key", "fence", "ver", "key_debug")
SELECT x."f", 0, 0, x."u" FROM jsonb_to_recordset($1::jsonb) AS x("f" text, "u" text)
ORDER BY x."f" COLLATE "C"
ON CONFLICT ("fence_key") DO NOTHING
