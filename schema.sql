-- SyncGuard PostgreSQL schema: the lock table, the fence counter table and
-- their indexes, under the configured names. Idempotent (IF NOT EXISTS):
-- safe to run again.
CREATE TABLE IF NOT EXISTS "syncguard_locks" (
  "key" TEXT PRIMARY KEY,
  "lock_id" TEXT NOT NULL,
  "expires_at_ms" BIGINT NOT NULL,
  "acquired_at_ms" BIGINT NOT NULL,
  "fence" TEXT NOT NULL,
  "user_key" TEXT NOT NULL
);

CREATE UNIQUE INDEX IF NOT EXISTS "idx_syncguard_locks_lock_id" ON "syncguard_locks" ("lock_id");

CREATE INDEX IF NOT EXISTS "idx_syncguard_locks_expires" ON "syncguard_locks" ("expires_at_ms");

-- Fence counters are never deleted: deleting one would let fences repeat.
CREATE TABLE IF NOT EXISTS "syncguard_fence_counters" (
  "fence_key" TEXT PRIMARY KEY,
  "fence" BIGINT NOT NULL DEFAULT 0,
  "key_debug" TEXT
);
