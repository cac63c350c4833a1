-- txguard's SQL function, for callers who write SQL: {{hold_fn}}(lockId)
-- runs hold.sql in the caller's statement and returns the lease's fence
-- as a bigint, or raises SQLSTATE SG001 when the lease is not held (no
-- row of that lockId, or expired by the server's clock), which fails the
-- statement and so the transaction. Idempotent (CREATE OR REPLACE). It
-- runs with the caller's privileges (SECURITY INVOKER) and finds the lock
-- table on the caller's search_path, as every syncguard statement does.
CREATE OR REPLACE FUNCTION {{hold_fn}}(p_lock_id text) RETURNS bigint
LANGUAGE plpgsql VOLATILE AS $txguard$
DECLARE
  h record;
BEGIN
  SELECT * INTO h FROM (
{{hold}}
  ) AS s;
  IF h."expires_at_ms" IS NULL THEN
    RAISE EXCEPTION USING ERRCODE = 'SG001',
      MESSAGE = 'syncguard: lease not held: no lock has this lockId (released, taken over, or never acquired)',
      HINT = 'roll the transaction back: its writes must not commit';
  END IF;
  IF h."expires_at_ms" <= h."now_ms" THEN
    RAISE EXCEPTION USING ERRCODE = 'SG001',
      MESSAGE = format('syncguard: lease not held: expired %s ms ago by the server''s clock', h."now_ms" - h."expires_at_ms"),
      HINT = 'roll the transaction back: its writes must not commit';
  END IF;
  RETURN h."fence"::bigint;
END
$txguard$
