-- multilock schema: tables of their own beside the mutex tables of the
-- same Config.TableName. Idempotent (IF NOT EXISTS): safe to run again.
--
-- The lock rows: one per key of a held set, all rows of one holding
-- sharing its lockId, expiry and size n. A key locked here is independent
-- of the mutex of the same name (another table, other counters).
CREATE TABLE IF NOT EXISTS {{locks}} (
  "key" TEXT PRIMARY KEY,
  "lock_id" TEXT NOT NULL,
  "expires_at_ms" BIGINT NOT NULL,
  "acquired_at_ms" BIGINT NOT NULL,
  "fence" TEXT NOT NULL,
  "user_key" TEXT NOT NULL,
  "fence_key" TEXT NOT NULL,
  "n" INTEGER NOT NULL,
  "identity" TEXT
);

CREATE INDEX IF NOT EXISTS {{lock_id_index}} ON {{locks}} ("lock_id");

-- One row per key ever locked here: its fence counter (never deleted:
-- fences never repeat) and its guard. Every statement that changes
-- anything about a key locks its row FOR UPDATE first, all of a
-- statement's rows in one order (fence_key, collation "C"), and bumps
-- "ver" when it changes the key's holder or waiters.
CREATE TABLE IF NOT EXISTS {{fences}} (
  "fence_key" TEXT PRIMARY KEY,
  "fence" BIGINT NOT NULL DEFAULT 0,
  "ver" BIGINT NOT NULL DEFAULT 0,
  "key_debug" TEXT
);

-- The queue: one row per (waiter, key of its set), all rows of a waiter
-- sharing its place. UNLOGGED: a crash empties it, and waiters queue
-- again at their next attempt.
CREATE UNLOGGED TABLE IF NOT EXISTS {{waiters}} (
  "lock_id" TEXT NOT NULL,
  "key" TEXT NOT NULL,
  "place" BIGINT NOT NULL,
  "deadline_ms" BIGINT NOT NULL,
  "ttl_ms" BIGINT NOT NULL,
  "notified" BOOLEAN NOT NULL DEFAULT false,
  "user_key" TEXT NOT NULL,
  "fence_key" TEXT NOT NULL,
  "n" INTEGER NOT NULL,
  "channel_key" TEXT NOT NULL,
  "identity" TEXT,
  PRIMARY KEY ("lock_id", "key")
);

CREATE INDEX IF NOT EXISTS {{waiters_key_index}} ON {{waiters}} ("key", "place", "lock_id");
