-- A key's lock row goes to its new holder, as one upsert (acquire.sql,
-- release.sql's hand-off), inserted by the sql call.
ON CONFLICT ("key") DO UPDATE SET
    "lock_id" = EXCLUDED."lock_id",
    "expires_at_ms" = EXCLUDED."expires_at_ms",
    "acquired_at_ms" = EXCLUDED."acquired_at_ms",
    "fence" = EXCLUDED."fence",
    "user_key" = EXCLUDED."user_key",
    "fence_key" = EXCLUDED."fence_key",
    "n" = EXCLUDED."n",
    "identity" = EXCLUDED."identity"
