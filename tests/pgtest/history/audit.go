package history

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/syncguard/syncguard-go/syncguard"
)

// The audit: an append-only record of every committed change to a lock
// table and its fence-counter table, written by triggers in the changing
// transaction itself (so a change and its audit row commit, or vanish in a
// crash or failover, together). Test runs only: InstallAudit adds it to a
// run's own tables, DropAudit removes it. The linearizability checker
// resolves operations of unknown outcome with it.

// AuditRow is one committed change.
type AuditRow struct {
	ID   int64  // insertion order; for one key's row, the commit order
	TxID string // pg_current_xact_id()
	AtMs int64  // clock_timestamp() in the trigger, server ms
	// Table is "locks" or "fences"; Op is INSERT, UPDATE or DELETE.
	Table, Op string
	Key       string // the user key (user_key, or the counter's key_debug)
	// OldLock and NewLock are HashKey of the row's lockId before and after
	// ("" when there is no such row version).
	OldLock, NewLock       string
	OldExpires, NewExpires int64
	AcquiredAt             int64
	Fence                  int64 // the new version's fence (the old one's for a DELETE)
}

func auditNames(locks string) (table, fn string) {
	return locks + "_audit", locks + "_audit_fn"
}

// AuditSQL is the DDL InstallAudit runs for the lock table locks and the
// counter table fences (unquoted names).
func AuditSQL(locks, fences string) string {
	at, fn := auditNames(locks)
	q := func(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }
	return fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %[1]s (
  "id" bigserial PRIMARY KEY,
  "txid" xid8 NOT NULL DEFAULT pg_current_xact_id(),
  "at_ms" bigint NOT NULL DEFAULT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint,
  "tbl" text NOT NULL, "op" text NOT NULL, "key" text,
  "old_lock" text, "new_lock" text, "old_expires" bigint, "new_expires" bigint,
  "acquired_at" bigint, "fence" bigint);
CREATE OR REPLACE FUNCTION %[2]s() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
  IF TG_ARGV[0] = 'fences' THEN
    IF TG_OP = 'DELETE' THEN
      INSERT INTO %[1]s ("tbl", "op", "key", "fence") VALUES ('fences', TG_OP, OLD."key_debug", OLD."fence");
    ELSE
      INSERT INTO %[1]s ("tbl", "op", "key", "fence") VALUES ('fences', TG_OP, NEW."key_debug", NEW."fence");
    END IF;
  ELSIF TG_OP = 'INSERT' THEN
    INSERT INTO %[1]s ("tbl", "op", "key", "new_lock", "new_expires", "acquired_at", "fence")
    VALUES ('locks', TG_OP, NEW."user_key", NEW."lock_id", NEW."expires_at_ms", NEW."acquired_at_ms", NEW."fence"::bigint);
  ELSIF TG_OP = 'UPDATE' THEN
    INSERT INTO %[1]s ("tbl", "op", "key", "old_lock", "new_lock", "old_expires", "new_expires", "acquired_at", "fence")
    VALUES ('locks', TG_OP, NEW."user_key", OLD."lock_id", NEW."lock_id", OLD."expires_at_ms", NEW."expires_at_ms", NEW."acquired_at_ms", NEW."fence"::bigint);
  ELSE
    INSERT INTO %[1]s ("tbl", "op", "key", "old_lock", "old_expires", "acquired_at", "fence")
    VALUES ('locks', TG_OP, OLD."user_key", OLD."lock_id", OLD."expires_at_ms", OLD."acquired_at_ms", OLD."fence"::bigint);
  END IF;
  RETURN NULL;
END $f$;
DROP TRIGGER IF EXISTS "audit" ON %[3]s;
CREATE TRIGGER "audit" AFTER INSERT OR UPDATE OR DELETE ON %[3]s FOR EACH ROW EXECUTE FUNCTION %[2]s('locks');
DROP TRIGGER IF EXISTS "audit" ON %[4]s;
CREATE TRIGGER "audit" AFTER INSERT OR UPDATE OR DELETE ON %[4]s FOR EACH ROW EXECUTE FUNCTION %[2]s('fences');`,
		q(at), q(fn), q(locks), q(fences))
}

// InstallAudit adds the audit to the tables locks and fences (unquoted
// names) of db's database. Run it as a role that may create triggers on
// them; safe to re-run.
func InstallAudit(ctx context.Context, db *sql.DB, locks, fences string) error {
	if _, err := db.ExecContext(ctx, AuditSQL(locks, fences)); err != nil {
		return fmt.Errorf("install audit: %w", err)
	}
	return nil
}

// DropAudit removes the audit table and function (the triggers go with
// them); the lock tables stay.
func DropAudit(ctx context.Context, db *sql.DB, locks string) error {
	at, fn := auditNames(locks)
	q := func(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }
	_, err := db.ExecContext(ctx, `DROP TABLE IF EXISTS `+q(at)+`; DROP FUNCTION IF EXISTS `+q(fn)+`() CASCADE`)
	return err
}

// ReadAudit returns the audit of the lock table locks in insertion order,
// lockIds hashed.
func ReadAudit(ctx context.Context, db *sql.DB, locks string) ([]AuditRow, error) {
	at, _ := auditNames(locks)
	rows, err := db.QueryContext(ctx, `SELECT "id", "txid"::text, "at_ms", "tbl", "op", COALESCE("key", ''), COALESCE("old_lock", ''), COALESCE("new_lock", ''),
  COALESCE("old_expires", 0), COALESCE("new_expires", 0), COALESCE("acquired_at", 0), COALESCE("fence", 0)
FROM "`+strings.ReplaceAll(at, `"`, `""`)+`" ORDER BY "id"`)
	if err != nil {
		return nil, fmt.Errorf("read audit: %w", err)
	}
	defer rows.Close()
	var out []AuditRow
	for rows.Next() {
		var a AuditRow
		if err := rows.Scan(&a.ID, &a.TxID, &a.AtMs, &a.Table, &a.Op, &a.Key, &a.OldLock, &a.NewLock,
			&a.OldExpires, &a.NewExpires, &a.AcquiredAt, &a.Fence); err != nil {
			return nil, fmt.Errorf("read audit: %w", err)
		}
		for _, l := range []*string{&a.OldLock, &a.NewLock} {
			if *l != "" {
				*l = syncguard.HashKey(*l)
			}
		}
		out = append(out, a)
	}
	return out, rows.Err()
}
