-- SyncGuard PostgreSQL schema: the lock table, the fence counter table and
-- their indexes, under the configured names. Idempotent (IF NOT EXISTS):
-- safe to run again.
CREATE TABLE IF NOT EXISTS {{locks}} (
  "key" TEXT PRIMARY KEY,
  "lock_id" TEXT NOT NULL,
  "expires_at_ms" BIGINT NOT NULL,
  "acquired_at_ms" BIGINT NOT NULL,
  "fence" TEXT NOT NULL,
  "user_key" TEXT NOT NULL
);

CREATE UNIQUE INDEX IF NOT EXISTS {{lock_id_index}} ON {{locks}} ("lock_id");

CREATE INDEX IF NOT EXISTS {{expires_index}} ON {{locks}} ("expires_at_ms");

-- Fence counters are never deleted: deleting one would let fences repeat.
CREATE TABLE IF NOT EXISTS {{fences}} (
  "fence_key" TEXT PRIMARY KEY,
  "fence" BIGINT NOT NULL DEFAULT 0,
  "key_debug" TEXT
);

-- The queue of waiters of syncguard-go's Lock and WithLock (not in the
-- spec; the reference implementation neither reads nor needs it). A
-- release hands the key to the first live waiter that attends (near the
-- head, or notified) in the same commit.
-- UNLOGGED: a crash or a failover empties it (no WAL, no fsync for a
-- waiter's renewals), and waiters queue again at their next attempt.
CREATE UNLOGGED TABLE IF NOT EXISTS {{waiters}} (
  "key" TEXT NOT NULL,
  "lock_id" TEXT NOT NULL,
  "place" BIGINT NOT NULL,
  "deadline_ms" BIGINT NOT NULL,
  "ttl_ms" BIGINT NOT NULL,
  "user_key" TEXT NOT NULL,
  "fence_key" TEXT NOT NULL,
  "notified" BOOLEAN NOT NULL DEFAULT false,
  "identity" TEXT,
  "near" BOOLEAN NOT NULL DEFAULT true
);

-- "near": the waiter was within a few places of the head at its last
-- attempt (a row without it, of an older version, attends: true).
ALTER TABLE {{waiters}} ADD COLUMN IF NOT EXISTS "near" BOOLEAN NOT NULL DEFAULT true;

CREATE UNIQUE INDEX IF NOT EXISTS {{waiters_id_index}} ON {{waiters}} ("lock_id");

CREATE INDEX IF NOT EXISTS {{waiters_key_index}} ON {{waiters}} ("key", "place", "lock_id");

-- The holders' identities (Config.Identity, LockOptions.Identity; not in
-- the spec; the reference implementation neither reads nor needs it), by
-- lockId: a lookup joins it on the lock row's lock_id, so a key taken
-- over by a process that writes no row here shows no identity, never the
-- previous holder's. An acquire with an identity writes its row; a
-- release deletes the rows of its key.
CREATE TABLE IF NOT EXISTS {{holders}} (
  "lock_id" TEXT PRIMARY KEY,
  "key" TEXT NOT NULL,
  "identity" TEXT NOT NULL
);

CREATE INDEX IF NOT EXISTS {{holders_key_index}} ON {{holders}} ("key");
