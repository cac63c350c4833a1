-- The queue of a kind's waiters, as the mutex's (place: the server's
-- clock in µs at the first attempt; deadline renewed by attempts;
-- notified: a notification reaches the waiter), its columns up to the
-- kind's own (a kind's schema.sql inserts it by the sql call).
CREATE UNLOGGED TABLE IF NOT EXISTS {{waiters}} (
  "key" TEXT NOT NULL,
  "lock_id" TEXT NOT NULL,
  "place" BIGINT NOT NULL,
  "deadline_ms" BIGINT NOT NULL,
  "ttl_ms" BIGINT NOT NULL,
