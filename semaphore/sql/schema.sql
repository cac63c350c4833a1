-- The semaphore's tables, named from syncguard.Config.TableName: a
-- namespace of their own, so a key used as a semaphore never shares a row
-- or a fence counter with the mutex of the same name. Idempotent.

-- One row per semaphore key: its number of permits, fixed by the first
-- acquire of the key, and a version that every take of a free slot
-- increments (compare-and-set: see acquire.sql; releases meet on the
-- waiter's row instead, see release.sql).
CREATE TABLE IF NOT EXISTS {{sem}} (
  "key" TEXT PRIMARY KEY,
  "permits" INTEGER NOT NULL CHECK ("permits" > 0),
  "version" BIGINT NOT NULL,
  "user_key" TEXT NOT NULL
);

-- One row per permit slot (1..permits), created with the key and never
-- deleted: "fence" is the slot's fence counter, strictly increasing, so
-- each slot behaves as a fenced mutex. lock_id is the holder's (NULL and
-- expires_at_ms 0 when free; an expired holder's stays until a takeover);
-- acquired_at_ms is the server time the slot last changed hands (taken,
-- handed over, or freed).
CREATE TABLE IF NOT EXISTS {{slots}} (
  "key" TEXT NOT NULL,
  "slot" INTEGER NOT NULL,
  "lock_id" TEXT,
  "expires_at_ms" BIGINT NOT NULL,
  "acquired_at_ms" BIGINT NOT NULL,
  "fence" BIGINT NOT NULL,
  "identity" TEXT,
  PRIMARY KEY ("key", "slot")
);

CREATE UNIQUE INDEX IF NOT EXISTS {{slots_id_index}} ON {{slots}} ("lock_id");

-- The queue of waiters for a permit, as the mutex's: UNLOGGED (a crash
-- empties it, waiters queue again at their next attempt).
{{sql(kit/waiters_head.sql)}}
{{sql(kit/waiters_tail.sql)}}
