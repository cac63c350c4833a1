-- last fence (Backend.LastFence): the fence counter of one key, with the
-- server's now_ms. $1 fence key. The counter is NULL when the key was
-- never acquired.
WITH t AS (SELECT {{now_ms}} AS now_ms)
SELECT t.now_ms, c."fence"
FROM t
LEFT JOIN {{fences}} AS c ON c."fence_key" = $1::text
