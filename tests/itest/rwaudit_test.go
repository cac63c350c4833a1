package itest_test

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"

	"github.com/syncguard/syncguard-go/internal/rules"
)

// rwAudit records, from triggers, every insert and delete of a read-write
// lock's leases and every change of its keys' writer fences, with the
// transaction, the backend and the server's clock: the evidence a
// violation of rwMix prints.
type rwAudit struct {
	db    *sql.DB
	table string // the audit table
}

func newRWAudit(t testing.TB, db *sql.DB, base string) *rwAudit {
	t.Helper()
	a := &rwAudit{db: db, table: rules.QuoteIdent(base + "_rw_audit")}
	fn := rules.QuoteIdent(base + "_rw_audit_fn")
	stmts := []string{
		fmt.Sprintf(`CREATE TABLE %s (id bigserial, at_us bigint, xid bigint, pid int, op text, lock_id text, excl boolean, fence bigint, acq bigint, exp bigint, q text)`, a.table),
		fmt.Sprintf(`CREATE FUNCTION %s() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_TABLE_NAME LIKE '%%_keys' THEN
    INSERT INTO %s (at_us, xid, pid, op, fence, q) VALUES (floor(extract(epoch FROM clock_timestamp())*1000000)::bigint, txid_current(), pg_backend_pid(), 'fence', NEW."fence", left(current_query(), 60));
    RETURN NULL;
  END IF;
  IF TG_OP = 'INSERT' THEN
    INSERT INTO %s (at_us, xid, pid, op, lock_id, excl, fence, acq, exp, q) VALUES (floor(extract(epoch FROM clock_timestamp())*1000000)::bigint, txid_current(), pg_backend_pid(), 'ins', NEW."lock_id", NEW."exclusive", NEW."fence", NEW."acquired_at_ms", NEW."expires_at_ms", left(current_query(), 60));
  ELSE
    INSERT INTO %s (at_us, xid, pid, op, lock_id, excl, fence, acq, exp, q) VALUES (floor(extract(epoch FROM clock_timestamp())*1000000)::bigint, txid_current(), pg_backend_pid(), TG_OP, OLD."lock_id", OLD."exclusive", OLD."fence", OLD."acquired_at_ms", OLD."expires_at_ms", left(current_query(), 60));
  END IF;
  RETURN NULL;
END $$`, fn, a.table, a.table, a.table),
		fmt.Sprintf(`CREATE TRIGGER audit AFTER INSERT OR DELETE OR UPDATE ON %s FOR EACH ROW EXECUTE FUNCTION %s()`, rules.QuoteIdent(base+"_rw"), fn),
		fmt.Sprintf(`CREATE TRIGGER audit AFTER UPDATE ON %s FOR EACH ROW EXECUTE FUNCTION %s()`, rules.QuoteIdent(base+"_rw_keys"), fn),
	}
	for _, s := range stmts {
		if _, err := db.Exec(s); err != nil {
			t.Fatalf("audit: %v\n%s", err, s)
		}
	}
	t.Cleanup(func() {
		_, _ = db.Exec(fmt.Sprintf(`DROP TABLE IF EXISTS %s`, a.table))
		_, _ = db.Exec(fmt.Sprintf(`DROP FUNCTION IF EXISTS %s CASCADE`, fn))
	})
	return a
}

// dump returns the audit rows between from and to (server ms), and every
// row of the given lockIds.
func (a *rwAudit) dump(ctx context.Context, from, to int64, ids ...string) string {
	rows, err := a.db.QueryContext(ctx, fmt.Sprintf(`SELECT id, at_us, xid, pid, op, coalesce(lock_id, ''), coalesce(excl, false), coalesce(fence, -1), coalesce(acq, -1), coalesce(exp, -1), q,
  coalesce((SELECT floor(extract(epoch FROM pg_xact_commit_timestamp(xid::text::xid))*1000000)::bigint WHERE current_setting('track_commit_timestamp') = 'on'), -1)
FROM %s WHERE at_us BETWEEN $1 AND $2 OR lock_id = ANY($3) ORDER BY id`, a.table), from*1000, to*1000, "{"+strings.Join(ids, ",")+"}")
	if err != nil {
		return "audit: " + err.Error()
	}
	defer rows.Close()
	var b strings.Builder
	for rows.Next() {
		var id, at, xid, fence, acq, exp, commit int64
		var pid int
		var op, lockID, q string
		var excl bool
		if err := rows.Scan(&id, &at, &xid, &pid, &op, &lockID, &excl, &fence, &acq, &exp, &q, &commit); err != nil {
			return "audit: " + err.Error()
		}
		fmt.Fprintf(&b, "%d at=%d xid=%d commit=%d pid=%d %s %s excl=%v fence=%d acq=%d exp=%d q=%q\n", id, at, xid, commit, pid, op, lockID, excl, fence, acq, exp, q)
	}
	return b.String()
}
