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

-- The queue of waiters of syncguard-go's Lock and WithLock (not in the
-- spec; the reference implementation neither reads nor needs it). A
-- release hands the key to the first live waiter that attends (near the
-- head, or notified) in the same commit.
-- UNLOGGED: a crash or a failover empties it (no WAL, no fsync for a
-- waiter's renewals), and waiters queue again at their next attempt.
CREATE UNLOGGED TABLE IF NOT EXISTS "syncguard_locks_waiters" (
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
ALTER TABLE "syncguard_locks_waiters" ADD COLUMN IF NOT EXISTS "near" BOOLEAN NOT NULL DEFAULT true;

CREATE UNIQUE INDEX IF NOT EXISTS "idx_syncguard_locks_wid" ON "syncguard_locks_waiters" ("lock_id");

CREATE INDEX IF NOT EXISTS "idx_syncguard_locks_wkey" ON "syncguard_locks_waiters" ("key", "place", "lock_id");

-- The holders' identities (Config.Identity, LockOptions.Identity; not in
-- the spec; the reference implementation neither reads nor needs it), by
-- lockId: a lookup joins it on the lock row's lock_id, so a key taken
-- over by a process that writes no row here shows no identity, never the
-- previous holder's. An acquire with an identity writes its row; a
-- release deletes the rows of its key.
CREATE TABLE IF NOT EXISTS "syncguard_locks_holders" (
  "lock_id" TEXT PRIMARY KEY,
  "key" TEXT NOT NULL,
  "identity" TEXT NOT NULL
);

CREATE INDEX IF NOT EXISTS "idx_syncguard_locks_hkey" ON "syncguard_locks_holders" ("key");

-- Statement functions: the statements below, each planned once per
-- server session, without values, whether the call is prepared or sent
-- unprepared (behind a transaction-mode pooler). Named by a hash of their definition, each is
-- created when missing (any role with CREATE may apply this again).

DO $do$ BEGIN IF to_regprocedure(quote_ident(current_schema()) || '.' || '"syncguard_locks_op_30b1184c"(text,text,text,text,bigint)') IS NULL THEN CREATE FUNCTION "syncguard_locks_op_30b1184c"(text, text, text, text, bigint) RETURNS TABLE (r1 text, r2 bigint, r3 bigint, r4 text, r5 boolean, r6 bigint, r7 boolean, r8 boolean, r9 bigint) LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $syncguard$
#variable_conflict use_column
BEGIN
RETURN QUERY
WITH
a AS MATERIALIZED (
  SELECT $1::text AS "key", $2::text AS "lock_id", $3::text AS "fence_key"
),
t AS (
  SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now_ms
),
row0 AS (
  SELECT l."lock_id", l."expires_at_ms", l."acquired_at_ms", l."fence"
  FROM "syncguard_locks" AS l
  WHERE l."key" = (SELECT a."key" FROM a)
),
cur AS (
  SELECT l.* FROM row0 AS l, t WHERE l."expires_at_ms" > t.now_ms - 1000
),
snapf AS (
  SELECT c."fence" FROM "syncguard_fence_counters" AS c WHERE c."fence_key" = (SELECT a."fence_key" FROM a)
),
lk AS (
  SELECT 1 FROM "syncguard_locks" AS l, "syncguard_fence_counters" AS c
  WHERE l."key" = (SELECT a."key" FROM a) AND c."fence_key" = (SELECT a."fence_key" FROM a) AND l."acquired_at_ms" <> 0
  FOR UPDATE OF l, c SKIP LOCKED
),
gate AS (
  SELECT CASE WHEN EXISTS (SELECT 1 FROM cur) THEN 'busy'
             WHEN pg_try_advisory_xact_lock(hashtext(a."key")) THEN 'gated'
             WHEN NOT EXISTS (SELECT 1 FROM row0) THEN 'absent'
             WHEN EXISTS (SELECT 1 FROM row0 WHERE row0."acquired_at_ms" <> 0) AND EXISTS (SELECT 1 FROM snapf) THEN
               CASE WHEN EXISTS (SELECT 1 FROM lk) THEN 'open' ELSE 'busy' END
             WHEN EXISTS (
  SELECT 1 FROM pg_catalog.pg_locks AS pl
  LEFT JOIN pg_catalog.pg_stat_activity AS sa ON sa."pid" = pl."pid"
  WHERE pl."locktype" = 'advisory' AND pl."granted" AND pl."objsubid" = 1
    AND pl."database" = (SELECT d."oid" FROM pg_catalog.pg_database AS d WHERE d."datname" = current_database())
    AND pl."classid" = ((hashtext(a."key")::bigint >> 32) & 4294967295)::oid
    AND pl."objid" = (hashtext(a."key")::bigint & 4294967295)::oid
    AND pl."pid" IS DISTINCT FROM pg_backend_pid()
    AND CASE WHEN pl."pid" IS NOT NULL THEN sa."usesysid" IS NULL OR has_table_privilege(sa."usesysid", '"syncguard_locks"', 'UPDATE')
             ELSE COALESCE((
               SELECT bool_or(r."oid" IS NULL OR has_table_privilege(r."oid", '"syncguard_locks"', 'UPDATE'))
               FROM pg_catalog.pg_prepared_xacts AS px
               LEFT JOIN pg_catalog.pg_roles AS r ON r."rolname" = px."owner"
               WHERE pl."virtualtransaction" = '-1/' || px."transaction"::text
                  OR EXISTS (SELECT 1 FROM pg_catalog.pg_locks AS pt
                             WHERE pt."locktype" = 'transactionid' AND pt."pid" IS NULL
                               AND pt."virtualtransaction" = pl."virtualtransaction" AND pt."transactionid" = px."transaction")), true) END) THEN 'busy'
             ELSE 'open' END AS state
  FROM a
),
free AS (
  SELECT t.now_ms, gate.state = 'gated' AS gated FROM t, gate WHERE gate.state IN ('gated', 'open')
),
f AS (
  INSERT INTO "syncguard_fence_counters" AS c ("fence_key", "fence", "key_debug")
  SELECT $3::text, 1, $4::text FROM free
  ON CONFLICT ("fence_key") DO UPDATE SET "fence" = c."fence" + 1
  WHERE c."fence" < 900000000000000 AND c."fence" = (SELECT snapf."fence" FROM snapf)
  RETURNING c."fence"
),
ins AS (
  INSERT INTO "syncguard_locks" AS l ("key", "lock_id", "expires_at_ms", "acquired_at_ms", "fence", "user_key")
  SELECT $1::text, $2::text, free.now_ms + $5::bigint, free.now_ms, lpad((f."fence")::text, 15, '0'), $4::text
  FROM free, f
  WHERE free.gated
  ON CONFLICT ("key") DO UPDATE SET
    "lock_id" = EXCLUDED."lock_id",
    "expires_at_ms" = EXCLUDED."expires_at_ms",
    "acquired_at_ms" = EXCLUDED."acquired_at_ms",
    "fence" = EXCLUDED."fence",
    "user_key" = EXCLUDED."user_key"
  WHERE NOT (l."expires_at_ms" > EXCLUDED."acquired_at_ms" - 1000)
  RETURNING l."lock_id", l."expires_at_ms", l."acquired_at_ms", l."fence"
),
upd AS (
  UPDATE "syncguard_locks" AS l SET "lock_id" = $2::text, "expires_at_ms" = free.now_ms + $5::bigint,
    "acquired_at_ms" = free.now_ms, "fence" = lpad((f."fence")::text, 15, '0'), "user_key" = $4::text
  FROM free, f
  WHERE l."key" = (SELECT a."key" FROM a) AND NOT free.gated AND NOT (l."expires_at_ms" > free.now_ms - 1000)
  RETURNING l."lock_id", l."expires_at_ms", l."acquired_at_ms", l."fence"
),
won AS (
  SELECT * FROM ins UNION ALL SELECT * FROM upd
)
SELECT
  COALESCE(won."lock_id", cur."lock_id") AS lock_id,
  COALESCE(won."expires_at_ms", cur."expires_at_ms") AS expires_at_ms,
  COALESCE(won."acquired_at_ms", cur."acquired_at_ms") AS acquired_at_ms,
  COALESCE(won."fence", cur."fence") AS fence,
  (EXISTS (SELECT 1 FROM free) AND NOT EXISTS (SELECT 1 FROM f)
   AND COALESCE((SELECT snapf."fence" FROM snapf), 0) >= 900000000000000) AS fence_exhausted,
  t.now_ms,
  (SELECT gate.state = 'absent' FROM gate) AS absent,
  (SELECT gate.state = 'open' FROM gate) AS opened,
  0::bigint AS ahead_n
FROM t
LEFT JOIN won ON true
LEFT JOIN cur ON true; END
$syncguard$; END IF; EXCEPTION WHEN duplicate_function THEN NULL; END $do$;

DO $do$ BEGIN IF to_regprocedure(quote_ident(current_schema()) || '.' || '"syncguard_locks_op_9b67f932"(text,text,text,text,bigint,bigint,boolean)') IS NULL THEN CREATE FUNCTION "syncguard_locks_op_9b67f932"(text, text, text, text, bigint, bigint, boolean) RETURNS TABLE (r1 text, r2 bigint, r3 bigint, r4 text, r5 boolean, r6 bigint, r7 boolean, r8 boolean, r9 bigint) LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $syncguard$
#variable_conflict use_column
BEGIN
RETURN QUERY
WITH
a AS MATERIALIZED (
  SELECT $1::text AS "key", $2::text AS "lock_id", $3::text AS "fence_key"
),
t AS (
  SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now_ms
),
row0 AS (
  SELECT l."lock_id", l."expires_at_ms", l."acquired_at_ms", l."fence"
  FROM "syncguard_locks" AS l
  WHERE l."key" = (SELECT a."key" FROM a)
),
cur AS (
  SELECT l.* FROM row0 AS l, t WHERE l."expires_at_ms" > t.now_ms - 1000
),
me AS (
  SELECT w."place", w."deadline_ms", w."notified", w."near", w."ttl_ms" FROM "syncguard_locks_waiters" AS w WHERE w."lock_id" = (SELECT a."lock_id" FROM a)
),
ahead AS (
  SELECT count(*) AS n, COALESCE(bool_or(r.attends), false) AS awake FROM (
    SELECT w."near" OR w."notified" AS attends FROM "syncguard_locks_waiters" AS w, t
    WHERE w."key" = (SELECT a."key" FROM a) AND w."place" > 0 AND w."lock_id" <> (SELECT a."lock_id" FROM a) AND w."deadline_ms" > t.now_ms
      AND (w."place", w."lock_id") < (COALESCE((SELECT me."place" FROM me), floor(extract(epoch FROM statement_timestamp()) * 1000000)::bigint), (SELECT a."lock_id" FROM a))
    LIMIT 64) AS r
),
snapf AS (
  SELECT c."fence" FROM "syncguard_fence_counters" AS c WHERE c."fence_key" = (SELECT a."fence_key" FROM a)
),
lk AS (
  SELECT 1 FROM "syncguard_locks" AS l, "syncguard_fence_counters" AS c
  WHERE l."key" = (SELECT a."key" FROM a) AND c."fence_key" = (SELECT a."fence_key" FROM a) AND l."acquired_at_ms" <> 0
  FOR UPDATE OF l, c SKIP LOCKED
),
gate AS (
  SELECT CASE WHEN EXISTS (SELECT 1 FROM cur) THEN 'busy'
             WHEN (SELECT ahead.awake FROM ahead) THEN 'busy'
             WHEN EXISTS (SELECT 1 FROM me WHERE me."ttl_ms" = 0) THEN 'busy'
             WHEN pg_try_advisory_xact_lock(hashtext(a."key")) THEN 'gated'
             WHEN NOT EXISTS (SELECT 1 FROM row0) THEN 'absent'
             WHEN EXISTS (SELECT 1 FROM row0 WHERE row0."acquired_at_ms" <> 0) AND EXISTS (SELECT 1 FROM snapf) THEN
               CASE WHEN EXISTS (SELECT 1 FROM lk) THEN 'open' ELSE 'busy' END
             WHEN EXISTS (
  SELECT 1 FROM pg_catalog.pg_locks AS pl
  LEFT JOIN pg_catalog.pg_stat_activity AS sa ON sa."pid" = pl."pid"
  WHERE pl."locktype" = 'advisory' AND pl."granted" AND pl."objsubid" = 1
    AND pl."database" = (SELECT d."oid" FROM pg_catalog.pg_database AS d WHERE d."datname" = current_database())
    AND pl."classid" = ((hashtext(a."key")::bigint >> 32) & 4294967295)::oid
    AND pl."objid" = (hashtext(a."key")::bigint & 4294967295)::oid
    AND pl."pid" IS DISTINCT FROM pg_backend_pid()
    AND CASE WHEN pl."pid" IS NOT NULL THEN sa."usesysid" IS NULL OR has_table_privilege(sa."usesysid", '"syncguard_locks"', 'UPDATE')
             ELSE COALESCE((
               SELECT bool_or(r."oid" IS NULL OR has_table_privilege(r."oid", '"syncguard_locks"', 'UPDATE'))
               FROM pg_catalog.pg_prepared_xacts AS px
               LEFT JOIN pg_catalog.pg_roles AS r ON r."rolname" = px."owner"
               WHERE pl."virtualtransaction" = '-1/' || px."transaction"::text
                  OR EXISTS (SELECT 1 FROM pg_catalog.pg_locks AS pt
                             WHERE pt."locktype" = 'transactionid' AND pt."pid" IS NULL
                               AND pt."virtualtransaction" = pl."virtualtransaction" AND pt."transactionid" = px."transaction")), true) END) THEN 'busy'
             ELSE 'open' END AS state
  FROM a
),
free AS (
  SELECT t.now_ms, gate.state = 'gated' AS gated FROM t, gate WHERE gate.state IN ('gated', 'open')
),
f AS (
  INSERT INTO "syncguard_fence_counters" AS c ("fence_key", "fence", "key_debug")
  SELECT $3::text, 1, $4::text FROM free
  ON CONFLICT ("fence_key") DO UPDATE SET "fence" = c."fence" + 1
  WHERE c."fence" < 900000000000000 AND c."fence" = (SELECT snapf."fence" FROM snapf)
  RETURNING c."fence"
),
ins AS (
  INSERT INTO "syncguard_locks" AS l ("key", "lock_id", "expires_at_ms", "acquired_at_ms", "fence", "user_key")
  SELECT $1::text, $2::text, free.now_ms + $5::bigint, free.now_ms, lpad((f."fence")::text, 15, '0'), $4::text
  FROM free, f
  WHERE free.gated
  ON CONFLICT ("key") DO UPDATE SET
    "lock_id" = EXCLUDED."lock_id",
    "expires_at_ms" = EXCLUDED."expires_at_ms",
    "acquired_at_ms" = EXCLUDED."acquired_at_ms",
    "fence" = EXCLUDED."fence",
    "user_key" = EXCLUDED."user_key"
  WHERE NOT (l."expires_at_ms" > EXCLUDED."acquired_at_ms" - 1000)
  RETURNING l."lock_id", l."expires_at_ms", l."acquired_at_ms", l."fence"
),
upd AS (
  UPDATE "syncguard_locks" AS l SET "lock_id" = $2::text, "expires_at_ms" = free.now_ms + $5::bigint,
    "acquired_at_ms" = free.now_ms, "fence" = lpad((f."fence")::text, 15, '0'), "user_key" = $4::text
  FROM free, f
  WHERE l."key" = (SELECT a."key" FROM a) AND NOT free.gated AND NOT (l."expires_at_ms" > free.now_ms - 1000)
  RETURNING l."lock_id", l."expires_at_ms", l."acquired_at_ms", l."fence"
),
won AS (
  SELECT * FROM ins UNION ALL SELECT * FROM upd
)
, q AS (
  INSERT INTO "syncguard_locks_waiters" AS w ("key", "lock_id", "place", "deadline_ms", "ttl_ms", "user_key", "fence_key", "notified", "near", "identity")
  SELECT $1::text, $2::text, floor(extract(epoch FROM statement_timestamp()) * 1000000)::bigint, t.now_ms + $6::bigint, $5::bigint, $4::text, $3::text, $7::boolean,
    (SELECT ahead.n FROM ahead) <= 3,
    NULL::text
  FROM t
  WHERE NOT EXISTS (SELECT 1 FROM won) AND NOT EXISTS (SELECT 1 FROM cur WHERE cur."lock_id" = $2::text)
    AND NOT EXISTS (SELECT 1 FROM me WHERE me."notified" = $7::boolean AND me."deadline_ms" > t.now_ms + $6::bigint * 2 / 3)
  ON CONFLICT ("lock_id") DO UPDATE SET "deadline_ms" = EXCLUDED."deadline_ms", "ttl_ms" = EXCLUDED."ttl_ms",
    "notified" = EXCLUDED."notified", "near" = EXCLUDED."near"
  WHERE w."ttl_ms" <> 0
  RETURNING 1
),
dq AS (
  DELETE FROM "syncguard_locks_waiters" AS w USING t
  WHERE (w."lock_id" = (SELECT a."lock_id" FROM a)
         AND (EXISTS (SELECT 1 FROM won) OR EXISTS (SELECT 1 FROM cur WHERE cur."lock_id" = $2::text)))
     OR (w."key" = (SELECT a."key" FROM a) AND w."place" < (floor(extract(epoch FROM statement_timestamp()) * 1000000)::bigint - 4611686018427387904) - 60000::bigint * 1000
         AND w."lock_id" <> (SELECT a."lock_id" FROM a) AND ((SELECT ahead.n FROM ahead) = 0 OR NOT EXISTS (SELECT 1 FROM me)))
     OR (w."key" = (SELECT a."key" FROM a) AND w."place" >= 0 AND w."place" < floor(extract(epoch FROM statement_timestamp()) * 1000000)::bigint - 60000::bigint * 1000
         AND w."deadline_ms" < t.now_ms - 60000
         AND w."lock_id" <> (SELECT a."lock_id" FROM a) AND ((SELECT ahead.n FROM ahead) = 0 OR NOT EXISTS (SELECT 1 FROM me)))
  RETURNING 1
)
SELECT
  COALESCE(won."lock_id", cur."lock_id") AS lock_id,
  COALESCE(won."expires_at_ms", cur."expires_at_ms") AS expires_at_ms,
  COALESCE(won."acquired_at_ms", cur."acquired_at_ms") AS acquired_at_ms,
  COALESCE(won."fence", cur."fence") AS fence,
  (EXISTS (SELECT 1 FROM free) AND NOT EXISTS (SELECT 1 FROM f)
   AND COALESCE((SELECT snapf."fence" FROM snapf), 0) >= 900000000000000) AS fence_exhausted,
  t.now_ms,
  (SELECT gate.state = 'absent' FROM gate) AS absent,
  (SELECT gate.state = 'open' FROM gate) AS opened,
  (SELECT ahead.n FROM ahead) AS ahead_n
FROM t
LEFT JOIN won ON true
LEFT JOIN cur ON true; END
$syncguard$; END IF; EXCEPTION WHEN duplicate_function THEN NULL; END $do$;

DO $do$ BEGIN IF to_regprocedure(quote_ident(current_schema()) || '.' || '"syncguard_locks_op_4a4733ef"(text,text,text,text,bigint,text)') IS NULL THEN CREATE FUNCTION "syncguard_locks_op_4a4733ef"(text, text, text, text, bigint, text) RETURNS TABLE (r1 text, r2 bigint, r3 bigint, r4 text, r5 boolean, r6 bigint, r7 boolean, r8 boolean, r9 bigint) LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $syncguard$
#variable_conflict use_column
BEGIN
RETURN QUERY
WITH
a AS MATERIALIZED (
  SELECT $1::text AS "key", $2::text AS "lock_id", $3::text AS "fence_key"
),
t AS (
  SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now_ms
),
row0 AS (
  SELECT l."lock_id", l."expires_at_ms", l."acquired_at_ms", l."fence"
  FROM "syncguard_locks" AS l
  WHERE l."key" = (SELECT a."key" FROM a)
),
cur AS (
  SELECT l.* FROM row0 AS l, t WHERE l."expires_at_ms" > t.now_ms - 1000
),
snapf AS (
  SELECT c."fence" FROM "syncguard_fence_counters" AS c WHERE c."fence_key" = (SELECT a."fence_key" FROM a)
),
lk AS (
  SELECT 1 FROM "syncguard_locks" AS l, "syncguard_fence_counters" AS c
  WHERE l."key" = (SELECT a."key" FROM a) AND c."fence_key" = (SELECT a."fence_key" FROM a) AND l."acquired_at_ms" <> 0
  FOR UPDATE OF l, c SKIP LOCKED
),
gate AS (
  SELECT CASE WHEN EXISTS (SELECT 1 FROM cur) THEN 'busy'
             WHEN pg_try_advisory_xact_lock(hashtext(a."key")) THEN 'gated'
             WHEN NOT EXISTS (SELECT 1 FROM row0) THEN 'absent'
             WHEN EXISTS (SELECT 1 FROM row0 WHERE row0."acquired_at_ms" <> 0) AND EXISTS (SELECT 1 FROM snapf) THEN
               CASE WHEN EXISTS (SELECT 1 FROM lk) THEN 'open' ELSE 'busy' END
             WHEN EXISTS (
  SELECT 1 FROM pg_catalog.pg_locks AS pl
  LEFT JOIN pg_catalog.pg_stat_activity AS sa ON sa."pid" = pl."pid"
  WHERE pl."locktype" = 'advisory' AND pl."granted" AND pl."objsubid" = 1
    AND pl."database" = (SELECT d."oid" FROM pg_catalog.pg_database AS d WHERE d."datname" = current_database())
    AND pl."classid" = ((hashtext(a."key")::bigint >> 32) & 4294967295)::oid
    AND pl."objid" = (hashtext(a."key")::bigint & 4294967295)::oid
    AND pl."pid" IS DISTINCT FROM pg_backend_pid()
    AND CASE WHEN pl."pid" IS NOT NULL THEN sa."usesysid" IS NULL OR has_table_privilege(sa."usesysid", '"syncguard_locks"', 'UPDATE')
             ELSE COALESCE((
               SELECT bool_or(r."oid" IS NULL OR has_table_privilege(r."oid", '"syncguard_locks"', 'UPDATE'))
               FROM pg_catalog.pg_prepared_xacts AS px
               LEFT JOIN pg_catalog.pg_roles AS r ON r."rolname" = px."owner"
               WHERE pl."virtualtransaction" = '-1/' || px."transaction"::text
                  OR EXISTS (SELECT 1 FROM pg_catalog.pg_locks AS pt
                             WHERE pt."locktype" = 'transactionid' AND pt."pid" IS NULL
                               AND pt."virtualtransaction" = pl."virtualtransaction" AND pt."transactionid" = px."transaction")), true) END) THEN 'busy'
             ELSE 'open' END AS state
  FROM a
),
free AS (
  SELECT t.now_ms, gate.state = 'gated' AS gated FROM t, gate WHERE gate.state IN ('gated', 'open')
),
f AS (
  INSERT INTO "syncguard_fence_counters" AS c ("fence_key", "fence", "key_debug")
  SELECT $3::text, 1, $4::text FROM free
  ON CONFLICT ("fence_key") DO UPDATE SET "fence" = c."fence" + 1
  WHERE c."fence" < 900000000000000 AND c."fence" = (SELECT snapf."fence" FROM snapf)
  RETURNING c."fence"
),
ins AS (
  INSERT INTO "syncguard_locks" AS l ("key", "lock_id", "expires_at_ms", "acquired_at_ms", "fence", "user_key")
  SELECT $1::text, $2::text, free.now_ms + $5::bigint, free.now_ms, lpad((f."fence")::text, 15, '0'), $4::text
  FROM free, f
  WHERE free.gated
  ON CONFLICT ("key") DO UPDATE SET
    "lock_id" = EXCLUDED."lock_id",
    "expires_at_ms" = EXCLUDED."expires_at_ms",
    "acquired_at_ms" = EXCLUDED."acquired_at_ms",
    "fence" = EXCLUDED."fence",
    "user_key" = EXCLUDED."user_key"
  WHERE NOT (l."expires_at_ms" > EXCLUDED."acquired_at_ms" - 1000)
  RETURNING l."lock_id", l."expires_at_ms", l."acquired_at_ms", l."fence"
),
upd AS (
  UPDATE "syncguard_locks" AS l SET "lock_id" = $2::text, "expires_at_ms" = free.now_ms + $5::bigint,
    "acquired_at_ms" = free.now_ms, "fence" = lpad((f."fence")::text, 15, '0'), "user_key" = $4::text
  FROM free, f
  WHERE l."key" = (SELECT a."key" FROM a) AND NOT free.gated AND NOT (l."expires_at_ms" > free.now_ms - 1000)
  RETURNING l."lock_id", l."expires_at_ms", l."acquired_at_ms", l."fence"
),
won AS (
  SELECT * FROM ins UNION ALL SELECT * FROM upd
)
, h AS (
  INSERT INTO "syncguard_locks_holders" AS h ("lock_id", "key", "identity")
  SELECT won."lock_id", $1::text, $6::text FROM won
  ON CONFLICT ("lock_id") DO UPDATE SET "identity" = EXCLUDED."identity"
  RETURNING 1
)
SELECT
  COALESCE(won."lock_id", cur."lock_id") AS lock_id,
  COALESCE(won."expires_at_ms", cur."expires_at_ms") AS expires_at_ms,
  COALESCE(won."acquired_at_ms", cur."acquired_at_ms") AS acquired_at_ms,
  COALESCE(won."fence", cur."fence") AS fence,
  (EXISTS (SELECT 1 FROM free) AND NOT EXISTS (SELECT 1 FROM f)
   AND COALESCE((SELECT snapf."fence" FROM snapf), 0) >= 900000000000000) AS fence_exhausted,
  t.now_ms,
  (SELECT gate.state = 'absent' FROM gate) AS absent,
  (SELECT gate.state = 'open' FROM gate) AS opened,
  0::bigint AS ahead_n
FROM t
LEFT JOIN won ON true
LEFT JOIN cur ON true; END
$syncguard$; END IF; EXCEPTION WHEN duplicate_function THEN NULL; END $do$;

DO $do$ BEGIN IF to_regprocedure(quote_ident(current_schema()) || '.' || '"syncguard_locks_op_81d809a2"(text,text,text,text,bigint,bigint,boolean,text)') IS NULL THEN CREATE FUNCTION "syncguard_locks_op_81d809a2"(text, text, text, text, bigint, bigint, boolean, text) RETURNS TABLE (r1 text, r2 bigint, r3 bigint, r4 text, r5 boolean, r6 bigint, r7 boolean, r8 boolean, r9 bigint) LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $syncguard$
#variable_conflict use_column
BEGIN
RETURN QUERY
WITH
a AS MATERIALIZED (
  SELECT $1::text AS "key", $2::text AS "lock_id", $3::text AS "fence_key"
),
t AS (
  SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now_ms
),
row0 AS (
  SELECT l."lock_id", l."expires_at_ms", l."acquired_at_ms", l."fence"
  FROM "syncguard_locks" AS l
  WHERE l."key" = (SELECT a."key" FROM a)
),
cur AS (
  SELECT l.* FROM row0 AS l, t WHERE l."expires_at_ms" > t.now_ms - 1000
),
me AS (
  SELECT w."place", w."deadline_ms", w."notified", w."near", w."ttl_ms" FROM "syncguard_locks_waiters" AS w WHERE w."lock_id" = (SELECT a."lock_id" FROM a)
),
ahead AS (
  SELECT count(*) AS n, COALESCE(bool_or(r.attends), false) AS awake FROM (
    SELECT w."near" OR w."notified" AS attends FROM "syncguard_locks_waiters" AS w, t
    WHERE w."key" = (SELECT a."key" FROM a) AND w."place" > 0 AND w."lock_id" <> (SELECT a."lock_id" FROM a) AND w."deadline_ms" > t.now_ms
      AND (w."place", w."lock_id") < (COALESCE((SELECT me."place" FROM me), floor(extract(epoch FROM statement_timestamp()) * 1000000)::bigint), (SELECT a."lock_id" FROM a))
    LIMIT 64) AS r
),
snapf AS (
  SELECT c."fence" FROM "syncguard_fence_counters" AS c WHERE c."fence_key" = (SELECT a."fence_key" FROM a)
),
lk AS (
  SELECT 1 FROM "syncguard_locks" AS l, "syncguard_fence_counters" AS c
  WHERE l."key" = (SELECT a."key" FROM a) AND c."fence_key" = (SELECT a."fence_key" FROM a) AND l."acquired_at_ms" <> 0
  FOR UPDATE OF l, c SKIP LOCKED
),
gate AS (
  SELECT CASE WHEN EXISTS (SELECT 1 FROM cur) THEN 'busy'
             WHEN (SELECT ahead.awake FROM ahead) THEN 'busy'
             WHEN EXISTS (SELECT 1 FROM me WHERE me."ttl_ms" = 0) THEN 'busy'
             WHEN pg_try_advisory_xact_lock(hashtext(a."key")) THEN 'gated'
             WHEN NOT EXISTS (SELECT 1 FROM row0) THEN 'absent'
             WHEN EXISTS (SELECT 1 FROM row0 WHERE row0."acquired_at_ms" <> 0) AND EXISTS (SELECT 1 FROM snapf) THEN
               CASE WHEN EXISTS (SELECT 1 FROM lk) THEN 'open' ELSE 'busy' END
             WHEN EXISTS (
  SELECT 1 FROM pg_catalog.pg_locks AS pl
  LEFT JOIN pg_catalog.pg_stat_activity AS sa ON sa."pid" = pl."pid"
  WHERE pl."locktype" = 'advisory' AND pl."granted" AND pl."objsubid" = 1
    AND pl."database" = (SELECT d."oid" FROM pg_catalog.pg_database AS d WHERE d."datname" = current_database())
    AND pl."classid" = ((hashtext(a."key")::bigint >> 32) & 4294967295)::oid
    AND pl."objid" = (hashtext(a."key")::bigint & 4294967295)::oid
    AND pl."pid" IS DISTINCT FROM pg_backend_pid()
    AND CASE WHEN pl."pid" IS NOT NULL THEN sa."usesysid" IS NULL OR has_table_privilege(sa."usesysid", '"syncguard_locks"', 'UPDATE')
             ELSE COALESCE((
               SELECT bool_or(r."oid" IS NULL OR has_table_privilege(r."oid", '"syncguard_locks"', 'UPDATE'))
               FROM pg_catalog.pg_prepared_xacts AS px
               LEFT JOIN pg_catalog.pg_roles AS r ON r."rolname" = px."owner"
               WHERE pl."virtualtransaction" = '-1/' || px."transaction"::text
                  OR EXISTS (SELECT 1 FROM pg_catalog.pg_locks AS pt
                             WHERE pt."locktype" = 'transactionid' AND pt."pid" IS NULL
                               AND pt."virtualtransaction" = pl."virtualtransaction" AND pt."transactionid" = px."transaction")), true) END) THEN 'busy'
             ELSE 'open' END AS state
  FROM a
),
free AS (
  SELECT t.now_ms, gate.state = 'gated' AS gated FROM t, gate WHERE gate.state IN ('gated', 'open')
),
f AS (
  INSERT INTO "syncguard_fence_counters" AS c ("fence_key", "fence", "key_debug")
  SELECT $3::text, 1, $4::text FROM free
  ON CONFLICT ("fence_key") DO UPDATE SET "fence" = c."fence" + 1
  WHERE c."fence" < 900000000000000 AND c."fence" = (SELECT snapf."fence" FROM snapf)
  RETURNING c."fence"
),
ins AS (
  INSERT INTO "syncguard_locks" AS l ("key", "lock_id", "expires_at_ms", "acquired_at_ms", "fence", "user_key")
  SELECT $1::text, $2::text, free.now_ms + $5::bigint, free.now_ms, lpad((f."fence")::text, 15, '0'), $4::text
  FROM free, f
  WHERE free.gated
  ON CONFLICT ("key") DO UPDATE SET
    "lock_id" = EXCLUDED."lock_id",
    "expires_at_ms" = EXCLUDED."expires_at_ms",
    "acquired_at_ms" = EXCLUDED."acquired_at_ms",
    "fence" = EXCLUDED."fence",
    "user_key" = EXCLUDED."user_key"
  WHERE NOT (l."expires_at_ms" > EXCLUDED."acquired_at_ms" - 1000)
  RETURNING l."lock_id", l."expires_at_ms", l."acquired_at_ms", l."fence"
),
upd AS (
  UPDATE "syncguard_locks" AS l SET "lock_id" = $2::text, "expires_at_ms" = free.now_ms + $5::bigint,
    "acquired_at_ms" = free.now_ms, "fence" = lpad((f."fence")::text, 15, '0'), "user_key" = $4::text
  FROM free, f
  WHERE l."key" = (SELECT a."key" FROM a) AND NOT free.gated AND NOT (l."expires_at_ms" > free.now_ms - 1000)
  RETURNING l."lock_id", l."expires_at_ms", l."acquired_at_ms", l."fence"
),
won AS (
  SELECT * FROM ins UNION ALL SELECT * FROM upd
)
, q AS (
  INSERT INTO "syncguard_locks_waiters" AS w ("key", "lock_id", "place", "deadline_ms", "ttl_ms", "user_key", "fence_key", "notified", "near", "identity")
  SELECT $1::text, $2::text, floor(extract(epoch FROM statement_timestamp()) * 1000000)::bigint, t.now_ms + $6::bigint, $5::bigint, $4::text, $3::text, $7::boolean,
    (SELECT ahead.n FROM ahead) <= 3,
    $8::text
  FROM t
  WHERE NOT EXISTS (SELECT 1 FROM won) AND NOT EXISTS (SELECT 1 FROM cur WHERE cur."lock_id" = $2::text)
    AND NOT EXISTS (SELECT 1 FROM me WHERE me."notified" = $7::boolean AND me."deadline_ms" > t.now_ms + $6::bigint * 2 / 3)
  ON CONFLICT ("lock_id") DO UPDATE SET "deadline_ms" = EXCLUDED."deadline_ms", "ttl_ms" = EXCLUDED."ttl_ms",
    "notified" = EXCLUDED."notified", "near" = EXCLUDED."near"
  WHERE w."ttl_ms" <> 0
  RETURNING 1
),
dq AS (
  DELETE FROM "syncguard_locks_waiters" AS w USING t
  WHERE (w."lock_id" = (SELECT a."lock_id" FROM a)
         AND (EXISTS (SELECT 1 FROM won) OR EXISTS (SELECT 1 FROM cur WHERE cur."lock_id" = $2::text)))
     OR (w."key" = (SELECT a."key" FROM a) AND w."place" < (floor(extract(epoch FROM statement_timestamp()) * 1000000)::bigint - 4611686018427387904) - 60000::bigint * 1000
         AND w."lock_id" <> (SELECT a."lock_id" FROM a) AND ((SELECT ahead.n FROM ahead) = 0 OR NOT EXISTS (SELECT 1 FROM me)))
     OR (w."key" = (SELECT a."key" FROM a) AND w."place" >= 0 AND w."place" < floor(extract(epoch FROM statement_timestamp()) * 1000000)::bigint - 60000::bigint * 1000
         AND w."deadline_ms" < t.now_ms - 60000
         AND w."lock_id" <> (SELECT a."lock_id" FROM a) AND ((SELECT ahead.n FROM ahead) = 0 OR NOT EXISTS (SELECT 1 FROM me)))
  RETURNING 1
)
, h AS (
  INSERT INTO "syncguard_locks_holders" AS h ("lock_id", "key", "identity")
  SELECT won."lock_id", $1::text, $8::text FROM won
  ON CONFLICT ("lock_id") DO UPDATE SET "identity" = EXCLUDED."identity"
  RETURNING 1
)
SELECT
  COALESCE(won."lock_id", cur."lock_id") AS lock_id,
  COALESCE(won."expires_at_ms", cur."expires_at_ms") AS expires_at_ms,
  COALESCE(won."acquired_at_ms", cur."acquired_at_ms") AS acquired_at_ms,
  COALESCE(won."fence", cur."fence") AS fence,
  (EXISTS (SELECT 1 FROM free) AND NOT EXISTS (SELECT 1 FROM f)
   AND COALESCE((SELECT snapf."fence" FROM snapf), 0) >= 900000000000000) AS fence_exhausted,
  t.now_ms,
  (SELECT gate.state = 'absent' FROM gate) AS absent,
  (SELECT gate.state = 'open' FROM gate) AS opened,
  (SELECT ahead.n FROM ahead) AS ahead_n
FROM t
LEFT JOIN won ON true
LEFT JOIN cur ON true; END
$syncguard$; END IF; EXCEPTION WHEN duplicate_function THEN NULL; END $do$;

DO $do$ BEGIN IF to_regprocedure(quote_ident(current_schema()) || '.' || '"syncguard_locks_op_58476b23"(text,boolean,boolean,text)') IS NULL THEN CREATE FUNCTION "syncguard_locks_op_58476b23"(text, boolean, boolean, text) RETURNS TABLE (r1 text, r2 bigint, r3 bigint, r4 text, r5 text, r6 boolean) LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $syncguard$
#variable_conflict use_column
BEGIN
RETURN QUERY
WITH
t AS (
  SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now_ms, $3::boolean AS notify, $4::text AS wkey
),
d AS (
  DELETE FROM "syncguard_locks" AS l USING t
  WHERE l."lock_id" = $1::text AND l."expires_at_ms" > t.now_ms - 1000
  RETURNING l."lock_id", l."key", l."expires_at_ms" - t.now_ms AS left_ms
),
w AS (
  SELECT q."lock_id" FROM "syncguard_locks_waiters" AS q, d, t
  WHERE q."key" = d."key" AND q."place" > 0 AND q."deadline_ms" > t.now_ms AND q."lock_id" <> $1::text AND (q."near" OR q."notified")
  ORDER BY q."place", q."lock_id"
  LIMIT 1
),
wd AS (
  DELETE FROM "syncguard_locks_waiters" AS q USING t
  WHERE q."lock_id" = (SELECT w."lock_id" FROM w) AND q."deadline_ms" > t.now_ms AND q."notified"
  RETURNING q."key", q."lock_id", q."ttl_ms", q."user_key", q."fence_key", q."identity"
),
mq AS (
  DELETE FROM "syncguard_locks_waiters" AS q USING t
  WHERE q."lock_id" = $1::text AND t.wkey IS NULL
  RETURNING 1
),
me AS (
  INSERT INTO "syncguard_locks_waiters" AS q ("key", "lock_id", "place", "deadline_ms", "ttl_ms", "user_key", "fence_key")
  SELECT t.wkey, $1::text, (floor(extract(epoch FROM statement_timestamp()) * 1000000)::bigint - 4611686018427387904), t.now_ms - 1, 0, '', '' FROM t WHERE t.wkey IS NOT NULL
  ON CONFLICT ("lock_id") DO UPDATE SET "place" = EXCLUDED."place", "deadline_ms" = EXCLUDED."deadline_ms", "ttl_ms" = 0
  RETURNING q."key", q."xmax"::text <> '0' AS was
),
nx AS (
  SELECT q."key", q."lock_id" FROM "syncguard_locks_waiters" AS q, me, t
  WHERE q."key" = me."key" AND q."place" > 0 AND q."lock_id" <> $1::text AND q."deadline_ms" > t.now_ms AND (q."near" OR q."notified")
    AND NOT EXISTS (SELECT 1 FROM d)
    AND NOT EXISTS (SELECT 1 FROM "syncguard_locks" AS l WHERE l."key" = me."key" AND l."expires_at_ms" > t.now_ms - 1000)
  ORDER BY q."place", q."lock_id"
  LIMIT 1
),
gf AS (
  INSERT INTO "syncguard_fence_counters" AS c ("fence_key", "fence", "key_debug")
  SELECT wd."fence_key", 1, wd."user_key" FROM wd
  ON CONFLICT ("fence_key") DO UPDATE SET "fence" = c."fence" + 1
  WHERE c."fence" < 900000000000000
  RETURNING c."fence"
),
g AS (
  INSERT INTO "syncguard_locks" ("key", "lock_id", "expires_at_ms", "acquired_at_ms", "fence", "user_key")
  SELECT wd."key", wd."lock_id", t.now_ms + wd."ttl_ms", t.now_ms, lpad((gf."fence")::text, 15, '0'), wd."user_key"
  FROM wd, gf, t
  RETURNING "key", "lock_id", "fence", "acquired_at_ms", "expires_at_ms"
),
gh AS (
  INSERT INTO "syncguard_locks_holders" ("lock_id", "key", "identity")
  SELECT g."lock_id", g."key", wd."identity" FROM g, wd WHERE wd."identity" IS NOT NULL
  ON CONFLICT ("lock_id") DO UPDATE SET "identity" = EXCLUDED."identity"
  RETURNING 1
),
wk AS (
  SELECT g."key", left(encode(sha256(convert_to(g."lock_id", 'UTF8')), 'hex'), 16) || ':' || g."fence" || ':' || (g."acquired_at_ms")::text || ':' || (g."expires_at_ms" - g."acquired_at_ms")::text || ':' || left(encode(sha256(convert_to(g."lock_id" || ':' || g."fence" || ':' || (g."acquired_at_ms")::text || ':' || (g."expires_at_ms" - g."acquired_at_ms")::text, 'UTF8')), 'hex'), 32) AS payload FROM g
  UNION ALL SELECT nx."key", left(encode(sha256(convert_to(nx."lock_id", 'UTF8')), 'hex'), 16) FROM nx
  UNION ALL SELECT d."key", left(encode(sha256(convert_to(w."lock_id", 'UTF8')), 'hex'), 16) FROM w, d WHERE NOT EXISTS (SELECT 1 FROM wd)
),
n AS (
  SELECT pg_notify('syncguard:9f8f0944:' || left(encode(sha256(convert_to(wk."key", 'UTF8')), 'hex'), 24), wk.payload) AS v FROM wk, t WHERE t.notify
),
hl AS (
  DELETE FROM "syncguard_locks_holders" AS h USING d WHERE h."key" = d."key"
  RETURNING 1
),
sc AS (
  SELECT set_config('synchronous_commit', 'off', true) AS v FROM d
  WHERE $2::boolean AND d.left_ms <= 60000
    AND NOT EXISTS (SELECT 1 FROM g)
)
SELECT d."lock_id",
  CASE WHEN d."lock_id" IS NULL THEN
    (SELECT s."expires_at_ms" FROM "syncguard_locks" AS s WHERE s."lock_id" = $1::text) END,
  t.now_ms,
  (SELECT wk.payload FROM wk LIMIT 1) AS woke,
  (SELECT 'syncguard:9f8f0944:' || left(encode(sha256(convert_to(wk."key", 'UTF8')), 'hex'), 24) FROM wk LIMIT 1) AS woke_channel,
  EXISTS (SELECT 1 FROM me WHERE me.was) AS left_queue
FROM t
LEFT JOIN d ON true
LEFT JOIN sc ON true
LEFT JOIN n ON true; END
$syncguard$; END IF; EXCEPTION WHEN duplicate_function THEN NULL; END $do$;

DO $do$ BEGIN IF to_regprocedure(quote_ident(current_schema()) || '.' || '"syncguard_locks_op_51f6bdca"(text,boolean,boolean,text)') IS NULL THEN CREATE FUNCTION "syncguard_locks_op_51f6bdca"(text, boolean, boolean, text) RETURNS TABLE (r1 text, r2 bigint, r3 bigint, r4 text, r5 text, r6 boolean) LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $syncguard$
#variable_conflict use_column
BEGIN
RETURN QUERY
WITH
t AS (
  SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now_ms, $3::boolean AS notify, $4::text AS wkey
),
d AS (
  DELETE FROM "syncguard_locks" AS l USING t
  WHERE l."lock_id" = $1::text AND l."expires_at_ms" > t.now_ms - 1000
  RETURNING l."lock_id", l."key", l."expires_at_ms" - t.now_ms AS left_ms
),
w AS (
  SELECT q."lock_id" FROM "syncguard_locks_waiters" AS q, d, t
  WHERE q."key" = d."key" AND q."place" > 0 AND q."deadline_ms" > t.now_ms AND q."lock_id" <> $1::text AND (q."near" OR q."notified")
  ORDER BY q."place", q."lock_id"
  LIMIT 1
),
wd AS (
  DELETE FROM "syncguard_locks_waiters" AS q USING t
  WHERE q."lock_id" = (SELECT w."lock_id" FROM w) AND q."deadline_ms" > t.now_ms AND q."notified"
  RETURNING q."key", q."lock_id", q."ttl_ms", q."user_key", q."fence_key", q."identity"
),
mq AS (
  DELETE FROM "syncguard_locks_waiters" AS q USING t
  WHERE q."lock_id" = $1::text AND t.wkey IS NULL
  RETURNING 1
),
me AS (
  INSERT INTO "syncguard_locks_waiters" AS q ("key", "lock_id", "place", "deadline_ms", "ttl_ms", "user_key", "fence_key")
  SELECT t.wkey, $1::text, (floor(extract(epoch FROM statement_timestamp()) * 1000000)::bigint - 4611686018427387904), t.now_ms - 1, 0, '', '' FROM t WHERE t.wkey IS NOT NULL
  ON CONFLICT ("lock_id") DO UPDATE SET "place" = EXCLUDED."place", "deadline_ms" = EXCLUDED."deadline_ms", "ttl_ms" = 0
  RETURNING q."key", q."xmax"::text <> '0' AS was
),
nx AS (
  SELECT q."key", q."lock_id" FROM "syncguard_locks_waiters" AS q, me, t
  WHERE q."key" = me."key" AND q."place" > 0 AND q."lock_id" <> $1::text AND q."deadline_ms" > t.now_ms AND (q."near" OR q."notified")
    AND NOT EXISTS (SELECT 1 FROM d)
    AND NOT EXISTS (SELECT 1 FROM "syncguard_locks" AS l WHERE l."key" = me."key" AND l."expires_at_ms" > t.now_ms - 1000)
  ORDER BY q."place", q."lock_id"
  LIMIT 1
),
gf AS (
  INSERT INTO "syncguard_fence_counters" AS c ("fence_key", "fence", "key_debug")
  SELECT wd."fence_key", 1, wd."user_key" FROM wd
  ON CONFLICT ("fence_key") DO UPDATE SET "fence" = c."fence" + 1
  WHERE c."fence" < 900000000000000
  RETURNING c."fence"
),
g AS (
  INSERT INTO "syncguard_locks" ("key", "lock_id", "expires_at_ms", "acquired_at_ms", "fence", "user_key")
  SELECT wd."key", wd."lock_id", t.now_ms + wd."ttl_ms", t.now_ms, lpad((gf."fence")::text, 15, '0'), wd."user_key"
  FROM wd, gf, t
  RETURNING "key", "lock_id", "fence", "acquired_at_ms", "expires_at_ms"
),
wk AS (
  SELECT g."key", left(encode(sha256(convert_to(g."lock_id", 'UTF8')), 'hex'), 16) || ':' || g."fence" || ':' || (g."acquired_at_ms")::text || ':' || (g."expires_at_ms" - g."acquired_at_ms")::text || ':' || left(encode(sha256(convert_to(g."lock_id" || ':' || g."fence" || ':' || (g."acquired_at_ms")::text || ':' || (g."expires_at_ms" - g."acquired_at_ms")::text, 'UTF8')), 'hex'), 32) AS payload FROM g
  UNION ALL SELECT nx."key", left(encode(sha256(convert_to(nx."lock_id", 'UTF8')), 'hex'), 16) FROM nx
  UNION ALL SELECT d."key", left(encode(sha256(convert_to(w."lock_id", 'UTF8')), 'hex'), 16) FROM w, d WHERE NOT EXISTS (SELECT 1 FROM wd)
),
n AS (
  SELECT pg_notify('syncguard:9f8f0944:' || left(encode(sha256(convert_to(wk."key", 'UTF8')), 'hex'), 24), wk.payload) AS v FROM wk, t WHERE t.notify
),
sc AS (
  SELECT set_config('synchronous_commit', 'off', true) AS v FROM d
  WHERE $2::boolean AND d.left_ms <= 60000
    AND NOT EXISTS (SELECT 1 FROM g)
)
SELECT d."lock_id",
  CASE WHEN d."lock_id" IS NULL THEN
    (SELECT s."expires_at_ms" FROM "syncguard_locks" AS s WHERE s."lock_id" = $1::text) END,
  t.now_ms,
  (SELECT wk.payload FROM wk LIMIT 1) AS woke,
  (SELECT 'syncguard:9f8f0944:' || left(encode(sha256(convert_to(wk."key", 'UTF8')), 'hex'), 24) FROM wk LIMIT 1) AS woke_channel,
  EXISTS (SELECT 1 FROM me WHERE me.was) AS left_queue
FROM t
LEFT JOIN d ON true
LEFT JOIN sc ON true
LEFT JOIN n ON true; END
$syncguard$; END IF; EXCEPTION WHEN duplicate_function THEN NULL; END $do$;

DO $do$ BEGIN IF to_regprocedure(quote_ident(current_schema()) || '.' || '"syncguard_locks_op_4c8b469a"(text,boolean,boolean,text)') IS NULL THEN CREATE FUNCTION "syncguard_locks_op_4c8b469a"(text, boolean, boolean, text) RETURNS TABLE (r1 text, r2 bigint, r3 bigint, r4 text, r5 text, r6 boolean) LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $syncguard$
#variable_conflict use_column
BEGIN
RETURN QUERY
WITH
t AS (
  SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now_ms, $3::boolean AS notify, $4::text AS wkey
),
d AS (
  DELETE FROM "syncguard_locks" AS l USING t
  WHERE l."lock_id" = $1::text AND l."expires_at_ms" > t.now_ms - 1000
  RETURNING l."lock_id", l."key", l."expires_at_ms" - t.now_ms AS left_ms
),
sc AS (
  SELECT set_config('synchronous_commit', 'off', true) AS v FROM d
  WHERE $2::boolean AND d.left_ms <= 60000
)
SELECT d."lock_id",
  CASE WHEN d."lock_id" IS NULL THEN
    (SELECT s."expires_at_ms" FROM "syncguard_locks" AS s WHERE s."lock_id" = $1::text) END,
  t.now_ms,
  NULL::text AS woke,
  NULL::text AS woke_channel,
  false AS left_queue
FROM t
LEFT JOIN d ON true
LEFT JOIN sc ON true; END
$syncguard$; END IF; EXCEPTION WHEN duplicate_function THEN NULL; END $do$;

DO $do$ BEGIN IF to_regprocedure(quote_ident(current_schema()) || '.' || '"syncguard_locks_op_b1016ab6"(text,bigint)') IS NULL THEN CREATE FUNCTION "syncguard_locks_op_b1016ab6"(text, bigint) RETURNS TABLE (r1 text, r2 bigint, r3 bigint, r4 bigint) LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $syncguard$
#variable_conflict use_column
BEGIN
RETURN QUERY
WITH
t AS (
  SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now_ms
),
u AS (
  UPDATE "syncguard_locks" AS l SET "expires_at_ms" = t.now_ms + $2::bigint
  FROM t
  WHERE l."lock_id" = $1::text AND l."expires_at_ms" > t.now_ms - 1000
  RETURNING l."lock_id", l."expires_at_ms"
)
SELECT u."lock_id", u."expires_at_ms",
  CASE WHEN u."lock_id" IS NULL THEN
    (SELECT s."expires_at_ms" FROM "syncguard_locks" AS s WHERE s."lock_id" = $1::text) END,
  t.now_ms
FROM t
LEFT JOIN u ON true; END
$syncguard$; END IF; EXCEPTION WHEN duplicate_function THEN NULL; END $do$;
