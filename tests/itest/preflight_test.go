package itest_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/syncguard/syncguard-go/conformance"
	_ "github.com/syncguard/syncguard-go/pgxstd"
	"github.com/syncguard/syncguard-go/syncguard"
	"github.com/syncguard/syncguard-go/tests/pgtest"
)

const helperEnv = "SYNCGUARD_ITEST_HELPER"

// TestConformancePreflightNamesTheGrant runs the suite as a role without
// CREATE on the schema (PostgreSQL 15's default for non-owners): the run
// must fail once, before any case, with the GRANT that fixes it, and not
// report every case as an authentication failure.
func TestConformancePreflightNamesTheGrant(t *testing.T) {
	srv := roleServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := open(t, srv.DSN)
	roleDSN := roleWithoutCreate(ctx, t, srv, db, "sgc_nocreate", "sgc-nocreate-pw")

	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperRestrictedRole$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), helperEnv+"=restricted", pgtest.EnvDSN+"="+srv.DSN,
		"SYNCGUARD_ITEST_ROLE_DSN="+roleDSN)
	out, err := cmd.CombinedOutput()
	s := string(out)
	want := `may not create tables in schema "public"`
	grant := `GRANT CREATE ON SCHEMA "public" TO "sgc_nocreate";`
	if err == nil || !strings.Contains(s, want) || !strings.Contains(s, grant) {
		t.Fatalf("the preflight must fail the run with the missing GRANT (%q); exit %v, output:\n%s", grant, err, s)
	}
	t.Logf("restricted run:\n%s", s)
	if n := strings.Count(s, "--- FAIL"); n != 1 || strings.Contains(s, "AuthFailed") || strings.Contains(s, "/Backend/") {
		t.Errorf("the preflight fails once, before any case, and says nothing of AuthFailed; %d failures, output:\n%s", n, s)
	}
}

func TestHelperRestrictedRole(t *testing.T) {
	if os.Getenv(helperEnv) != "restricted" {
		t.Skip("helper: run by TestConformancePreflightNamesTheGrant")
	}
	conformance.Run(t, conformance.Harness{DriverName: "pgx", DSN: os.Getenv("SYNCGUARD_ITEST_ROLE_DSN")})
}

// TestConformanceDropsLeftoverTables: tables (and trigger functions) of
// the suite older than an hour (a crashed run's) are dropped before the
// cases run; recent ones (a run going on right now) are kept.
func TestConformanceDropsLeftoverTables(t *testing.T) {
	if os.Getenv(helperEnv) != "" {
		t.Skip("helper run")
	}
	srv := pgtest.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := open(t, srv.DSN)
	old := fmt.Sprintf("sgc_%08x_0badc0_locks", time.Now().Add(-2*time.Hour).Unix())
	recent := fmt.Sprintf("sgc_%08x_0badc0_locks", time.Now().Add(-10*time.Minute).Unix())
	oldFn := fmt.Sprintf("sgc_%08x_0badc0_scfn", time.Now().Add(-2*time.Hour).Unix())
	for _, name := range []string{old, recent} {
		mustExec(ctx, t, db, `CREATE TABLE IF NOT EXISTS "`+name+`" (x int)`)
	}
	mustExec(ctx, t, db, `CREATE OR REPLACE FUNCTION "`+oldFn+`"() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$`)
	t.Cleanup(func() { _, _ = db.Exec(`DROP TABLE IF EXISTS "` + recent + `"`) })
	conformance.Run(t, conformance.Harness{DriverName: "pgx", DSN: srv.DSN, Groups: []string{"Lifecycle"}})
	exists := func(name string) bool {
		var ok bool
		if err := db.QueryRowContext(ctx, `SELECT to_regclass($1) IS NOT NULL`, `"`+name+`"`).Scan(&ok); err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if exists(old) {
		t.Errorf("a suite table created two hours ago (%s) survives the preflight", old)
	}
	var fnLeft bool
	if err := db.QueryRowContext(ctx, `SELECT to_regproc($1) IS NOT NULL`, `"`+oldFn+`"`).Scan(&fnLeft); err != nil {
		t.Fatal(err)
	}
	if fnLeft {
		t.Errorf("a suite trigger function created two hours ago (%s) survives the preflight", oldFn)
	}
	if !exists(recent) {
		t.Errorf("a suite table created ten minutes ago (%s) was dropped; it may belong to a run going on now", recent)
	}
}

func open(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// roleServer is the server of a test that creates roles: a local or docker
// one (skipped for SYNCGUARD_TEST_DSN's server, and in a helper run).
func roleServer(t *testing.T) *pgtest.Server {
	t.Helper()
	if os.Getenv(helperEnv) != "" {
		t.Skip("helper run")
	}
	srv := pgtest.Require(t)
	if srv.Kind == pgtest.KindEnv {
		t.Skip("creates a role: local or docker server only")
	}
	return srv
}

// roleWithoutCreate makes login role (or reuses it) with password pw and
// takes CREATE on schema public from PUBLIC, as PostgreSQL 15 does for
// non-owners; it returns the role's DSN.
func roleWithoutCreate(ctx context.Context, t *testing.T, srv *pgtest.Server, admin *sql.DB, role, pw string) string {
	t.Helper()
	mustExec(ctx, t, admin, fmt.Sprintf(`DO $$ BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '%[1]s') THEN CREATE ROLE %[1]s LOGIN; END IF;
END $$`, role))
	mustExec(ctx, t, admin, fmt.Sprintf(`SET password_encryption = 'scram-sha-256'; ALTER ROLE %s LOGIN PASSWORD '%s'`, role, pw))
	mustExec(ctx, t, admin, `REVOKE CREATE ON SCHEMA public FROM PUBLIC`)
	return srv.DSNFor(role, pw, "")
}

func mustExec(ctx context.Context, t *testing.T, db *sql.DB, q string) {
	t.Helper()
	if _, err := db.ExecContext(ctx, q); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

// TestSetupSchemaWithoutCreatePrivilege: SetupSchema as a role that may not
// create in the schema says that CREATE on the schema is missing, not that
// something is wrong with the lock tables.
func TestSetupSchemaWithoutCreatePrivilege(t *testing.T) {
	srv := roleServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin := open(t, srv.DSN)
	roleDSN := roleWithoutCreate(ctx, t, srv, admin, "sgc_nocreate", "sgc-nocreate-pw")
	err := syncguard.SetupSchema(ctx, open(t, roleDSN), &syncguard.Config{TableName: "nocreate_locks", FenceTableName: "nocreate_fences"})
	if !errors.Is(err, syncguard.ErrAuthFailed) || !strings.Contains(err.Error(), `GRANT CREATE ON SCHEMA "public" TO "sgc_nocreate";`) {
		t.Errorf("SetupSchema without CREATE on the schema: %v", err)
	}
}
