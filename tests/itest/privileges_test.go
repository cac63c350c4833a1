package itest_test

import (
	"context"
	"database/sql"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/syncguard/syncguard-go/syncguard"
	"github.com/syncguard/syncguard-go/tests/pgtest"
	"github.com/syncguard/syncguard-go/tests/pgtest/suite"
)

// TestPrivilegeErrorsNameTheObject checks, against the server's real
// messages through each driver, that a privilege error (42501) says what
// lacks which privilege: the schema (SetupSchema without CREATE on it), a
// table (no table privileges), and that a schema without USAGE (which
// search_path silently skips) is named as a possible cause of "missing".
func TestPrivilegeErrorsNameTheObject(t *testing.T) {
	srv, ctx, admin, exec := asAdmin(t, "creates a role and schemas")
	cleanup := func() {
		_, _ = admin.Exec(`DROP SCHEMA IF EXISTS sg_priv, sg_priv_empty CASCADE`)
		_, _ = admin.Exec(`DROP ROLE IF EXISTS sg_priv_user`)
	}
	cleanup()
	t.Cleanup(cleanup)
	exec(`CREATE SCHEMA sg_priv`)
	exec(`CREATE SCHEMA sg_priv_empty`)
	exec(`CREATE ROLE sg_priv_user LOGIN PASSWORD 'sg-priv-pw'`)
	ddl, err := syncguard.SchemaSQL(nil)
	if err != nil {
		t.Fatal(err)
	}
	exec(`SET search_path = sg_priv; ` + ddl + `; RESET search_path`)

	for _, d := range []suite.Driver{pqDriver, pgxDriver} {
		t.Run(d.Name, func(t *testing.T) {
			// open returns a pool as sg_priv_user, whose sessions use
			// searchPath, and a Backend on it.
			open := func(searchPath string) (*sql.DB, *syncguard.Backend) {
				exec(`ALTER ROLE sg_priv_user SET search_path = ` + searchPath)
				db, err := sql.Open(d.Name, srv.DSNFor("sg_priv_user", "sg-priv-pw", ""))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { db.Close() })
				b, err := syncguard.New(db, &syncguard.Config{Dialect: d.Dialect})
				if err != nil {
					t.Fatal(err)
				}
				return db, b
			}
			check := func(stage string, err error, code syncguard.Code, want ...string) {
				t.Helper()
				if syncguard.CodeOf(err) != code {
					t.Fatalf("%s: want %s, got %v", stage, code, err)
				}
				for _, w := range want {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("rule: a privilege error says what lacks which privilege; %s: want %q in %v", stage, w, err)
					}
				}
			}

			// USAGE but no CREATE on the schema SetupSchema creates in.
			exec(`GRANT USAGE ON SCHEMA sg_priv_empty TO sg_priv_user`)
			db, _ := open("sg_priv_empty")
			check("SetupSchema without CREATE on the schema", syncguard.SetupSchema(ctx, db, &syncguard.Config{Dialect: d.Dialect}),
				syncguard.ErrAuthFailed, `role "sg_priv_user" needs CREATE on schema "sg_priv_empty"`,
				`GRANT CREATE ON SCHEMA "sg_priv_empty" TO "sg_priv_user";`)

			// No USAGE on the schema holding the tables: search_path skips it.
			exec(`REVOKE ALL ON SCHEMA sg_priv FROM sg_priv_user`)
			_, b := open("sg_priv")
			_, err := b.Acquire(ctx, "priv:k", time.Minute)
			check("no USAGE on the tables' schema", err, syncguard.ErrInternal, "lacks USAGE on its schema")

			// USAGE on the schema, nothing on the tables.
			exec(`GRANT USAGE ON SCHEMA sg_priv TO sg_priv_user`)
			_, b = open("sg_priv")
			_, err = b.Acquire(ctx, "priv:k", time.Minute)
			check("USAGE on the schema, no table privileges", err, syncguard.ErrAuthFailed,
				"privilege on table syncguard_", "acquire needs USAGE on the schema of", "SELECT, INSERT, UPDATE on both")
			exec(`REVOKE ALL ON SCHEMA sg_priv, sg_priv_empty FROM sg_priv_user`)
		})
	}
}

// TestSetupSchemaWithoutCreateWhenTablesExist: PostgreSQL checks CREATE on
// the schema before IF NOT EXISTS, so SetupSchema (and `syncguard setup`)
// run by a service role without CREATE must look first: with every table
// and index there it succeeds and changes nothing; with one index missing
// it fails naming the real schema and role in the GRANT.
func TestSetupSchemaWithoutCreateWhenTablesExist(t *testing.T) {
	srv, ctx, admin, exec := asAdmin(t, "creates a role and a schema")
	cleanup := func() {
		_, _ = admin.Exec(`DROP SCHEMA IF EXISTS sg_nocreate CASCADE`)
		_, _ = admin.Exec(`DROP ROLE IF EXISTS sg_nocreate_user`)
	}
	cleanup()
	t.Cleanup(cleanup)
	exec(`CREATE SCHEMA sg_nocreate`)
	exec(`CREATE ROLE sg_nocreate_user LOGIN PASSWORD 'sg-nc-pw'`)
	ddl, err := syncguard.SchemaSQL(nil)
	if err != nil {
		t.Fatal(err)
	}
	exec(`SET search_path = sg_nocreate; ` + ddl + `; RESET search_path`)
	exec(`GRANT USAGE ON SCHEMA sg_nocreate TO sg_nocreate_user`)
	exec(`GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA sg_nocreate TO sg_nocreate_user`)
	exec(`ALTER ROLE sg_nocreate_user SET search_path = sg_nocreate`)

	for _, d := range []suite.Driver{pqDriver, pgxDriver} {
		t.Run(d.Name, func(t *testing.T) {
			db, err := sql.Open(d.Name, srv.DSNFor("sg_nocreate_user", "sg-nc-pw", ""))
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			cfg := &syncguard.Config{Dialect: d.Dialect}
			if err := syncguard.SetupSchema(ctx, db, cfg); err != nil {
				t.Fatalf("rule: SetupSchema with every table and index in place needs no CREATE; got %v", err)
			}
			b, err := syncguard.New(db, cfg)
			if err != nil {
				t.Fatal(err)
			}
			if r, err := b.Acquire(ctx, "nocreate:"+d.Name, time.Minute); err != nil || !r.OK {
				t.Fatalf("acquire after SetupSchema: %+v, %v", r, err)
			}
		})
	}

	// An upgrade whose statement functions are missing: SetupSchema by a
	// role without CREATE warns and returns nil (the tables are there),
	// and a Backend sending statements unprepared works without them.
	exec(`DO $$ DECLARE f regprocedure; BEGIN FOR f IN SELECT p.oid FROM pg_proc AS p WHERE p.pronamespace = 'sg_nocreate'::regnamespace AND p.proname LIKE 'syncguard\_locks\_op\_%' LOOP EXECUTE 'DROP FUNCTION ' || f; END LOOP; END $$`)
	{
		db, err := sql.Open("pgx", srv.DSNFor("sg_nocreate_user", "sg-nc-pw", ""))
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		var logs pgtest.Buffer
		cfg := &syncguard.Config{DisablePrepare: true, Logger: slog.New(slog.NewTextHandler(&logs, nil))}
		if err := syncguard.SetupSchema(ctx, db, cfg); err != nil || !strings.Contains(logs.String(), "could not create this version's statement functions") {
			t.Fatalf("rule: SetupSchema with only the statement functions to create and no CREATE warns and returns nil; got %v, log %q", err, logs.String())
		}
		b, err := syncguard.New(db, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if r, err := b.Acquire(ctx, "nocreate:nofuncs", time.Minute); err != nil || !r.OK {
			t.Fatalf("acquire without the statement functions: %+v, %v", r, err)
		}
	}

	exec(`DROP INDEX sg_nocreate.idx_syncguard_locks_expires`)
	t.Cleanup(func() { _, _ = admin.Exec(`SET search_path = sg_nocreate; ` + ddl + `; RESET search_path`) })
	db, err := sql.Open("pgx", srv.DSNFor("sg_nocreate_user", "sg-nc-pw", ""))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = syncguard.SetupSchema(ctx, db, nil)
	if syncguard.CodeOf(err) != syncguard.ErrAuthFailed ||
		!strings.Contains(err.Error(), `GRANT CREATE ON SCHEMA "sg_nocreate" TO "sg_nocreate_user";`) {
		t.Errorf("rule: SetupSchema with an index to create and no CREATE names the schema and role in the GRANT; got %v", err)
	}
}

// asAdmin is the set-up of the tests that create roles and schemas: the
// throwaway server (skipped on one given by pgtest.EnvDSN, named in what),
// a one-minute context, a superuser pool and an exec that fails the test.
func asAdmin(t *testing.T, what string) (*pgtest.Server, context.Context, *sql.DB, func(q string)) {
	t.Helper()
	srv := pgtest.Require(t)
	if srv.Kind == pgtest.KindEnv {
		t.Skip(what + "; not on a server given by " + pgtest.EnvDSN)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	admin, err := sql.Open("pgx", srv.DSN)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close() })
	return srv, ctx, admin, func(q string) {
		t.Helper()
		if _, err := admin.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}
