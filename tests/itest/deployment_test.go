package itest_test

import (
	"context"
	"database/sql"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/syncguard/syncguard-go/doctor"
	"github.com/syncguard/syncguard-go/syncguard"
	"github.com/syncguard/syncguard-go/tests/pgtest"
)

// TestCheckDeploymentAsLeastPrivilegedRole: the tables are created by their
// owner; the service's role has exactly the grants the operations need and
// no CREATE. doctor.Check, run as that role, reports every check ok
// (except fsync, off in this throwaway cluster), creates nothing, and
// names what is wrong once a grant or an index goes missing.
func TestCheckDeploymentAsLeastPrivilegedRole(t *testing.T) {
	srv := roleServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin := open(t, srv.DSN)
	cfg := &syncguard.Config{TableName: "deploy_locks", FenceTableName: "deploy_fences"}
	mustExec(ctx, t, admin, `DROP TABLE IF EXISTS deploy_locks, deploy_fences, deploy_locks_waiters, deploy_locks_holders`)
	if err := syncguard.SetupSchema(ctx, admin, cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = admin.Exec(`DROP TABLE IF EXISTS deploy_locks, deploy_fences, deploy_locks_waiters, deploy_locks_holders`)
	})
	const role = "sg_service"
	roleDSN := roleWithoutCreate(ctx, t, srv, admin, role, "sg-service-pw")
	mustExec(ctx, t, admin, `GRANT SELECT, INSERT, UPDATE, DELETE ON deploy_locks TO `+role)
	mustExec(ctx, t, admin, `GRANT SELECT, INSERT, UPDATE ON deploy_fences TO `+role)
	mustExec(ctx, t, admin, `GRANT SELECT, INSERT, UPDATE, DELETE ON deploy_locks_waiters TO `+role)
	mustExec(ctx, t, admin, `GRANT SELECT, INSERT, UPDATE, DELETE ON deploy_locks_holders TO `+role)

	svc := open(t, roleDSN)
	objects := func() int {
		var n int
		if err := admin.QueryRowContext(ctx, `SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg_toast%'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := objects()
	report, err := doctor.Check(ctx, svc, cfg)
	if err != nil {
		t.Fatalf("doctor.Check as %s: %v", role, err)
	}
	byCheck := map[string]doctor.Finding{}
	for _, f := range report.Findings {
		byCheck[f.Check] = f
		t.Logf("%-22s %-4s %s", f.Check, f.Status, f.Detail)
		want := "ok"
		switch f.Check {
		case "fsync":
			want = "fail" // pgtest runs its throwaway cluster with fsync=off
		}
		if f.Status != want {
			t.Errorf("as a role with exactly the needed grants, check %q is %s, want %s: %s (fix: %s)", f.Check, f.Status, want, f.Detail, f.Fix)
		}
	}
	for _, c := range []string{"connection", "primary", "replication", "lock table", "primary key", "lock_id index", "expiry index",
		"lock table privileges", "lock rows", "fence table", "fence primary key", "fence table privileges", "fence counters",
		"waiters table", "holders table", "statement functions", "synchronous_commit", "fsync", "clock", "pooler", "prepared statements", "notifications"} {
		if _, ok := byCheck[c]; !ok {
			t.Errorf("check %q did not run", c)
		}
	}
	if after := objects(); after != before {
		t.Errorf("doctor.Check created something: %d relations before, %d after", before, after)
	}
	// The role's operations work: the grants doctor.Check asks for are
	// enough (and it asked for no more).
	b, err := syncguard.New(svc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if r, err := b.Acquire(ctx, "deploy:smoke", time.Minute); err != nil || !r.OK {
		t.Fatalf("acquire as %s: %+v, %v", role, r, err)
	} else if rel, err := b.Release(ctx, r.LockID); err != nil || !rel.OK {
		t.Fatalf("release as %s: %+v, %v", role, rel, err)
	}

	// A missing grant and a missing index are named, with the fix.
	mustExec(ctx, t, admin, `REVOKE DELETE ON deploy_locks FROM `+role)
	mustExec(ctx, t, admin, `DROP INDEX idx_deploy_locks_expires`)
	mustExec(ctx, t, admin, `REVOKE DELETE ON deploy_locks_waiters FROM `+role)
	t.Cleanup(func() { _, _ = admin.Exec(`GRANT DELETE ON deploy_locks TO ` + role) })
	var fn string
	if err := admin.QueryRowContext(ctx, `SELECT p.oid::regprocedure::text FROM pg_proc AS p WHERE p.proname LIKE 'deploy\_locks\_op\_%' LIMIT 1`).Scan(&fn); err != nil {
		t.Fatal(err)
	}
	mustExec(ctx, t, admin, `REVOKE EXECUTE ON FUNCTION `+fn+` FROM PUBLIC`)
	t.Cleanup(func() { _, _ = admin.Exec(`GRANT EXECUTE ON FUNCTION ` + fn + ` TO PUBLIC`) })
	report, err = doctor.Check(ctx, svc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	failed := map[string]doctor.Finding{}
	for _, f := range report.Failed() {
		failed[f.Check] = f
	}
	if f, ok := failed["lock table privileges"]; !ok || !strings.Contains(f.Detail, "lacks DELETE") ||
		f.Fix != `GRANT SELECT, INSERT, UPDATE, DELETE ON "deploy_locks" TO "sg_service";` {
		t.Errorf("a missing DELETE grant is reported with the GRANT that fixes it; got %+v", f)
	}
	sawFuncs := false
	for _, f := range report.Findings {
		if f.Check == "statement functions" {
			sawFuncs = true
			if f.Status != "warn" || !strings.HasPrefix(f.Detail, "1 of this version's 8") || !strings.Contains(f.Fix, "GRANT EXECUTE") {
				t.Errorf("a statement function the role may not run is a warning that says so; got %+v", f)
			}
		}
		if f.Check == "waiters table" && (f.Status != "warn" || f.Fix != `GRANT SELECT, INSERT, UPDATE, DELETE ON "deploy_locks_waiters" TO "sg_service";`) {
			t.Errorf("a missing grant on the waiters table is a warning with the GRANT that fixes it (the role quoted once); got %+v", f)
		}
	}
	if !sawFuncs {
		t.Error("no statement functions finding")
	}
	if f, ok := failed["expiry index"]; !ok || !strings.Contains(f.Fix, `CREATE INDEX IF NOT EXISTS "idx_deploy_locks_expires" ON "deploy_locks" ("expires_at_ms");`) {
		t.Errorf("a missing index is reported with its DDL; got %+v", f)
	}
	if err := report.Err(); err == nil || !strings.Contains(err.Error(), "lock table privileges") {
		t.Errorf("Report.Err names the failed checks; got %v", err)
	}

	// Missing tables: named, with how to create them.
	report, err = doctor.Check(ctx, svc, &syncguard.Config{TableName: "nope_locks", FenceTableName: "nope_fences"})
	if err != nil {
		t.Fatal(err)
	}
	if f := report.Failed(); len(f) < 2 || f[0].Check != "lock table" || !strings.Contains(f[0].Detail, "does not exist") || !strings.Contains(f[0].Fix, "SetupSchema") {
		t.Errorf("missing tables are reported as such; got %+v", f)
	}
}

// TestCheckDeploymentUnreachable: no database, an error, and the failed
// connection finding.
func TestCheckDeploymentUnreachable(t *testing.T) {
	if os.Getenv(helperEnv) != "" {
		t.Skip("helper run")
	}
	srv := pgtest.Require(t)
	db := open(t, srv.RefusedDSN())
	report, err := doctor.Check(context.Background(), db, nil)
	if !errorsIsUnavailable(err) || len(report.Findings) != 1 || report.Findings[0].Check != "connection" || report.Findings[0].Status != "fail" {
		t.Errorf("an unreachable database gives ServiceUnavailable and one failed connection finding; got %v, %+v", err, report)
	}
}

// TestCheckDeploymentSeesTransactionPooler: through PgBouncer in
// transaction mode the pooler check warns.
func TestCheckDeploymentSeesTransactionPooler(t *testing.T) {
	if os.Getenv(helperEnv) != "" {
		t.Skip("helper run")
	}
	srv := pgtest.Require(t)
	if srv.Kind == pgtest.KindEnv {
		t.Skip("PgBouncer is started in front of a local or docker server only")
	}
	bouncer := pgtest.RequirePgBouncer(t, srv, pgtest.PgBouncerOptions{PoolMode: "transaction", DefaultPoolSize: 4})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin := open(t, srv.DSN)
	if err := syncguard.SetupSchema(ctx, admin, nil); err != nil {
		t.Fatal(err)
	}
	db := open(t, bouncer.DSN+"&default_query_exec_mode=exec")
	report, err := doctor.Check(ctx, db, &syncguard.Config{DisablePrepare: true})
	if err != nil {
		t.Fatal(err)
	}
	byCheck := map[string]doctor.Finding{}
	for _, f := range report.Findings {
		byCheck[f.Check] = f
	}
	if f, ok := byCheck["pooler"]; !ok || f.Status != "warn" || !strings.Contains(f.Detail, "pooler in transaction or statement mode") {
		t.Errorf("through PgBouncer in transaction mode the pooler check warns; got %+v", f)
	}
	// Notifications do not come through: waiting polls, and doctor says so.
	if f, ok := byCheck["notifications"]; !ok || f.Status != "warn" || !strings.Contains(f.Detail, "falls back to polling") || !strings.Contains(f.Fix, "session-mode pool") {
		t.Errorf("through PgBouncer in transaction mode the notifications check warns that waiting polls; got %+v", f)
	}
}

// TestCheckDeploymentPgxCacheBehindTransactionPooler: pgx's default
// statement cache behind PgBouncer in transaction mode. Two server sessions
// already hold the statement doctor.Check starts with (prepared there by
// another client). The checks send their statements unprepared, as a
// Backend does (internal/pooler), so every one of them runs; the statement
// that the "prepared statements" check prepares on purpose is lost (26000)
// or clashes (42P05): a deployment finding, not an error of the call, with
// its fix.
func TestCheckDeploymentPgxCacheBehindTransactionPooler(t *testing.T) {
	if os.Getenv(helperEnv) != "" {
		t.Skip("helper run")
	}
	srv := pgtest.Require(t)
	if srv.Kind == pgtest.KindEnv {
		t.Skip("PgBouncer is started in front of a local or docker server only")
	}
	bouncer := pgtest.RequirePgBouncer(t, srv, pgtest.PgBouncerOptions{PoolMode: "transaction", DefaultPoolSize: 2})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin := open(t, srv.DSN)
	if err := syncguard.SetupSchema(ctx, admin, nil); err != nil {
		t.Fatal(err)
	}
	// Another client prepares doctor.Check's first statement in both
	// server sessions: two transactions open at once hold both.
	other := open(t, bouncer.DSN)
	var txs []*sql.Tx
	for range 2 {
		tx, err := other.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		var v, u, db string
		if err := tx.QueryRowContext(ctx, `SELECT current_setting('server_version'), current_user::text, current_database()::text`).Scan(&v, &u, &db); err != nil {
			t.Fatal(err)
		}
		txs = append(txs, tx)
	}
	for _, tx := range txs {
		_ = tx.Rollback()
	}

	db := open(t, bouncer.DSN) // pgx's default: the statement cache
	report, err := doctor.Check(ctx, db, nil)
	if err != nil {
		t.Fatalf("rule: doctor.Check's error is only for checks that could not run at all; a prepared-statement clash behind a pooler is a finding; got %v", err)
	}
	var prepared *doctor.Finding
	for i, f := range report.Findings {
		t.Logf("%-22s %-4s %s", f.Check, f.Status, f.Detail)
		if f.Check == "prepared statements" {
			if prepared != nil {
				t.Errorf("two prepared statements findings: %+v and %+v", *prepared, f)
			}
			prepared = &report.Findings[i]
		}
		if strings.Contains(f.Detail, "could not check") || (f.Check == "connection" && strings.Contains(f.Detail, "SQLSTATE")) {
			t.Errorf("rule: the checks run their statements unprepared, which another client's prepared statements cannot fail; %s: %s", f.Check, f.Detail)
		}
	}
	if prepared == nil || prepared.Status != "fail" || !(strings.Contains(prepared.Detail, "SQLSTATE 26000") || strings.Contains(prepared.Detail, "SQLSTATE 42P05")) ||
		!strings.Contains(prepared.Fix, "DisablePrepare") || !strings.Contains(prepared.Fix, "default_query_exec_mode=exec") {
		t.Errorf("rule: a prepared statement lost or clashing behind a pooler fails the prepared statements check with its fix; got %+v", prepared)
	}
	for _, f := range report.Findings {
		if f.Check == "pooler" && f.Status != "warn" {
			t.Errorf("rule: through PgBouncer in transaction mode the pooler check warns (a prepared-statement clash is a sign of it); got %+v", f)
		}
	}
	// SetupSchema sends no prepared statement: through the same pooler,
	// with pgx's statement cache, from several client connections, it
	// works whatever another client prepared.
	for i := range 4 {
		if err := syncguard.SetupSchema(ctx, db, nil); err != nil {
			t.Errorf("rule: SetupSchema works behind a transaction-mode pooler whatever the driver's settings; call %d: %v", i+1, err)
		}
		if err := syncguard.SetupSchema(ctx, other, nil); err != nil {
			t.Errorf("rule: SetupSchema works behind a transaction-mode pooler whatever the driver's settings; other client, call %d: %v", i+1, err)
		}
	}
}

func errorsIsUnavailable(err error) bool {
	return syncguard.CodeOf(err) == syncguard.ErrServiceUnavailable
}
