-- A waiter's row queued again renews its deadline, TTL and notified,
-- never a tombstone's (acquire_fn, inserted by the sql call).
ON CONFLICT ("lock_id") DO UPDATE SET "deadline_ms" = EXCLUDED."deadline_ms", "ttl_ms" = EXCLUDED."ttl_ms",
      "notified" = EXCLUDED."notified"
    WHERE q."ttl_ms" <> 0;
