-- The rest of the queue's table and its indexes (waiters_head.sql).
  "notified" BOOLEAN NOT NULL DEFAULT false,
  "identity" TEXT
);

CREATE UNIQUE INDEX IF NOT EXISTS {{waiters_id_index}} ON {{waiters}} ("lock_id");

CREATE INDEX IF NOT EXISTS {{waiters_key_index}} ON {{waiters}} ("key", "place", "lock_id");
