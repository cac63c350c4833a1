-- The fence guard of one resource table: a BEFORE UPDATE trigger (which
-- INSERT ... ON CONFLICT DO UPDATE fires too) that rejects, with SQLSTATE
-- SG002, a row whose {{column}} is below the stored one or NULL where
-- one was stored. An equal fence passes: a holder writes several times.
-- Safe to re-run (CREATE OR REPLACE, DROP TRIGGER IF EXISTS), in one
-- transaction.
CREATE OR REPLACE FUNCTION {{guard_fn}}() RETURNS trigger
LANGUAGE plpgsql AS $fn$
BEGIN
  IF OLD.{{column}} IS NOT NULL AND (NEW.{{column}} IS NULL OR NEW.{{column}} < OLD.{{column}}) THEN
    RAISE EXCEPTION USING ERRCODE = 'SG002',
      MESSAGE = format('syncguard: stale fence: %s.%s %s is below the stored %s', TG_TABLE_NAME, {{column_lit}}, COALESCE(NEW.{{column}}::text, 'NULL'), OLD.{{column}}),
      HINT = 'a newer lock holder wrote this row: roll the transaction back',
      TABLE = TG_TABLE_NAME, COLUMN = {{column_lit}};
  END IF;
  RETURN NEW;
END
$fn$;

DROP TRIGGER IF EXISTS {{trigger}} ON {{table}};

CREATE TRIGGER {{trigger}} BEFORE UPDATE ON {{table}}
  FOR EACH ROW EXECUTE FUNCTION {{guard_fn}}();
