-- A function of functions.sql for a lease of one row (a mutex's lock
-- row, a semaphore permit's slot, an rwlock reader's or writer's holder
-- row): one_fn runs the hold statement one_hold and returns the lease's
-- fence, or raises SG001 naming one_what; with key (the mutex's), a
-- lockId that holds another key's lock too.
CREATE OR REPLACE FUNCTION {{one_fn}}({{one_args}}) RETURNS bigint
LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
  h record;
BEGIN
  SELECT * INTO h FROM (
{{one_hold}}
  ) AS s;
  IF h."expires_at_ms" IS NULL THEN
    RAISE EXCEPTION USING ERRCODE = 'SG001',
      MESSAGE = 'syncguard: lease not held: no {{one_what}} has this lockId (released, taken over, or never acquired)',
      HINT = 'roll the transaction back: its writes must not commit';
  END IF;
--if key
  IF h."key" IS DISTINCT FROM {{storage_key(p_key)}} THEN
    RAISE EXCEPTION USING ERRCODE = 'SG001',
      MESSAGE = 'syncguard: lease not held: this lockId holds the lock of another key',
      HINT = 'pass the key the lease was acquired on; roll the transaction back: its writes must not commit';
  END IF;
--end
{{sql(hold_expired.sql)}}
  RETURN h."fence"::bigint;
END
$fn$;
