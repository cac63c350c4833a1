-- txguard's SQL functions, for callers who write SQL: each runs the hold
-- statement of one kind of lock in the caller's statement and returns the
-- lease's fence as a bigint, or raises SQLSTATE SG001 when the lease is
-- not held (no row of that lockId, fewer rows than the set has, or
-- expired by the server's clock), which fails the statement and so the
-- transaction. Idempotent (CREATE OR REPLACE). They run with the caller's
-- privileges (SECURITY INVOKER) and find the tables on the caller's
-- search_path, as every syncguard statement does. A function whose
-- kind's tables do not exist is created all the same and fails only when
-- called (42P01).
--
-- The mutex's function took the lockId alone before: a live lockId of
-- another key passed, and the caller wrote that lease's fence into this
-- key's row. Dropped, so that SQL still calling it fails (42883) instead
-- of trusting a bare lockId.
DROP FUNCTION IF EXISTS {{hold_fn}}(text);

-- {{hold_fn}}(lockId, key): a mutex lease (hold.sql) on key, the key as
-- given to Acquire (normalized and made a storage key here as Go's Hold
-- does, rules.StorageKeySQL); a lockId that holds another key's lock raises
-- SG001, as Hold reports it.
{{hold_def}}

-- {{sem_hold_fn}}(lockId): a semaphore permit (hold_semaphore.sql); the
-- fence of its slot.
{{sem_def}}

-- {{rw_hold_fn}}(lockId): a read-write lock's reader or writer
-- (hold_rwlock.sql); the writer's fence, or the reader's writer
-- generation.
{{rw_def}}

-- {{ml_hold_fn}}(lockId, key): a multilock set (hold_multilock.sql): it
-- checks and locks every key of the set and returns the fence of key, one
-- of the set's keys in NFC form (as multilock.Lease.Keys returns them); a
-- key not in the set raises 22023.
CREATE OR REPLACE FUNCTION {{ml_hold_fn}}(p_lock_id text, p_key text) RETURNS bigint
LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
  h record;
BEGIN
  SELECT count(s."key") AS "rows", max(s."n") AS "n", min(s."expires_at_ms") AS "expires_at_ms",
    max(s."now_ms") AS "now_ms", max(s."fence") FILTER (WHERE s."user_key" = p_key) AS "fence"
  INTO h FROM (
{{hold_ml}}
  ) AS s;
  IF h."rows" = 0 THEN
    RAISE EXCEPTION USING ERRCODE = 'SG001',
      MESSAGE = 'syncguard: lease not held: no set has this lockId (released, taken over, or never acquired)',
      HINT = 'roll the transaction back: its writes must not commit';
  END IF;
  IF h."rows" <> h."n" THEN
    RAISE EXCEPTION USING ERRCODE = 'SG001',
      MESSAGE = format('syncguard: lease not held: this lockId holds %s of its set''s %s keys (the others were taken over)', h."rows", h."n"),
      HINT = 'roll the transaction back: its writes must not commit';
  END IF;
{{sql(hold_expired.sql)}}
  IF h."fence" IS NULL THEN
    RAISE EXCEPTION USING ERRCODE = '22023',
      MESSAGE = 'syncguard: the key is not in the set of this lockId (pass one of the set''s keys in NFC form)';
  END IF;
  RETURN h."fence"::bigint;
END
$fn$
