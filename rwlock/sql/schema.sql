-- syncguard rwlock: tables of its own, named from Config.TableName, never
-- shared with the mutex of the same key (its lock, fence counter and
-- queue live in the mutex's tables). Idempotent (IF NOT EXISTS).
--
-- holders: one row per live lease, shared (readers) or exclusive (the
-- writer). fence is the writer's fence for a writer, and for a reader the
-- writer generation: the key's writer fence when it was admitted.
CREATE TABLE IF NOT EXISTS {{holders}} (
  "key" TEXT NOT NULL,
  "lock_id" TEXT NOT NULL,
  "exclusive" BOOLEAN NOT NULL,
  "expires_at_ms" BIGINT NOT NULL,
  "acquired_at_ms" BIGINT NOT NULL,
  "fence" BIGINT NOT NULL,
  "user_key" TEXT NOT NULL,
  "identity" TEXT
);

CREATE UNIQUE INDEX IF NOT EXISTS {{holders_id_index}} ON {{holders}} ("lock_id");

CREATE INDEX IF NOT EXISTS {{holders_key_index}} ON {{holders}} ("key");

-- keys: one row per key ever used, never deleted: its writer fence counter
-- (strictly increasing, never reused) and the row every state change of
-- the key locks first: readers' attempts and releases FOR SHARE (side by
-- side), writers' operations and the hand-off FOR UPDATE (alone).
CREATE TABLE IF NOT EXISTS {{keys}} (
  "key" TEXT NOT NULL,
  "fence" BIGINT NOT NULL DEFAULT 0,
  "key_debug" TEXT
);

CREATE UNIQUE INDEX IF NOT EXISTS {{keys_index}} ON {{keys}} ("key");

-- waiters: the FIFO queue of Lock and WithLock, as the mutex's (place =
-- server clock in µs at the first attempt, deadline renewed by attempts,
-- notified: a notification reaches the waiter). UNLOGGED like the mutex's:
-- a crash empties it and waiters queue again at their next attempt.
{{sql(kit/waiters_head.sql)}}
  "exclusive" BOOLEAN NOT NULL,
  "user_key" TEXT NOT NULL,
{{sql(kit/waiters_tail.sql)}}
