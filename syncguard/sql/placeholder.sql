-- placeholder: an expired row for a key that has none, written when an
-- acquire found the key free but could not win its advisory try-lock and
-- no privileged session holds that lock ("absent" in acquire.sql): some
-- role without privileges on the lock tables holds it. Committed on its
-- own (on the pool, also for an acquire inside WithTx), so that the next
-- attempt takes an existing row over under its row lock, which excludes
-- the reference implementation's acquire. Never live (expires_at_ms 0):
-- no lookup, list, release or extend sees it; cleanup may delete it.
-- $1 storage key, $2 lockId (the attempt's, unique), $3 normalized user key.
INSERT INTO {{locks}} ("key", "lock_id", "expires_at_ms", "acquired_at_ms", "fence", "user_key")
VALUES ($1::text, $2::text, 0, 0, {{fence_text(0)}}, $3::text)
ON CONFLICT DO NOTHING
