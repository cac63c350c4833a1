package itest_test

import (
	"database/sql"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/syncguard/syncguard-go/syncguard"
	"github.com/syncguard/syncguard-go/tests/pgtest"
)

// TestStatementFunctionsServeUnpreparedStatements: sent unprepared (as
// behind a transaction-mode pooler), the acquire, extend and release run
// through the statement functions SetupSchema created ("Planning" in
// docs/design.md): each function replaced by one that raises makes its
// operation fail with that error, on both adapters. With the functions
// dropped, a Backend sends the statements themselves, warning once, and
// every operation works.
func TestStatementFunctionsServeUnpreparedStatements(t *testing.T) {
	for _, drv := range []string{"postgres", "pgx"} {
		t.Run(drv, func(t *testing.T) {
			e := newWaitEnv(t, "stmtfn")
			// Functions of other versions' statements left by earlier runs
			// (dropping the tables leaves them): gone, so that those below
			// are exactly this version's.
			dropFuncs := `DO $$ DECLARE f regprocedure; BEGIN FOR f IN SELECT p.oid FROM pg_proc AS p WHERE p.proname LIKE 'stmtfn\_locks\_op\_%' AND p.pronamespace = current_schema()::regnamespace LOOP EXECUTE 'DROP FUNCTION ' || f; END LOOP; END $$`
			mustExec(e.ctx, t, e.admin, dropFuncs)
			if err := syncguard.SetupSchema(e.ctx, e.admin, e.cfg); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _, _ = e.admin.Exec(dropFuncs) })
			var logs pgtest.Buffer
			cfg := *e.cfg
			cfg.DisablePrepare = true
			cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
			db, err := sql.Open(drv, e.dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			b, err := syncguard.New(db, &cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			cycle := func(key string) error {
				res, err := b.Acquire(e.ctx, key, time.Minute)
				if err != nil {
					return fmt.Errorf("acquire: %w", err)
				}
				if !res.OK {
					return fmt.Errorf("acquire: %+v", res)
				}
				if r, err := b.Extend(e.ctx, res.LockID, time.Minute); err != nil || !r.OK {
					return fmt.Errorf("extend: %+v, %w", r, err)
				}
				if r, err := b.Release(e.ctx, res.LockID); err != nil || !r.OK {
					return fmt.Errorf("release: %+v, %w", r, err)
				}
				return nil
			}
			if err := cycle("fn:1"); err != nil {
				t.Fatal(err)
			}
			funcs := func() []string {
				rows, err := e.admin.QueryContext(e.ctx, `SELECT p.oid::regprocedure::text, pg_get_function_result(p.oid) FROM pg_proc AS p
					WHERE p.proname LIKE 'stmtfn\_locks\_op\_%' AND p.pronamespace = current_schema()::regnamespace`)
				if err != nil {
					t.Fatal(err)
				}
				defer rows.Close()
				var out []string
				for rows.Next() {
					var sig, res string
					if err := rows.Scan(&sig, &res); err != nil {
						t.Fatal(err)
					}
					out = append(out, sig+" RETURNS "+res)
				}
				return out
			}
			fs := funcs()
			if len(fs) != 8 {
				t.Fatalf("SetupSchema created %d statement functions, want 8: %v", len(fs), fs)
			}
			// One operation's functions at a time raise: release (6 columns),
			// extend (4), acquire (8 or more).
			for i, op := range []string{"release", "extend", "acquire"} {
				for _, f := range fs {
					cols := len(resultColRE.FindAllString(f, -1))
					if (op == "release") == (cols == 6) && (op == "extend") == (cols == 4) && (op == "acquire") == (cols >= 8) {
						mustExec(e.ctx, t, e.admin, `CREATE OR REPLACE FUNCTION `+f+` LANGUAGE plpgsql AS $$BEGIN RAISE EXCEPTION 'served by the function'; END$$`)
					}
				}
				err := cycle(fmt.Sprintf("fn:op%d", i))
				if err == nil || !strings.Contains(err.Error(), "served by the function") || !strings.HasPrefix(err.Error(), op) {
					t.Fatalf("rule: %s sent unprepared runs through its statement function; got %v", op, err)
				}
			}
			for _, f := range fs {
				mustExec(e.ctx, t, e.admin, `DROP FUNCTION `+f[:strings.Index(f, " RETURNS ")])
			}
			if err := cycle("fn:3"); err != nil {
				t.Fatalf("rule: without the statement functions the statements are sent themselves; got %v", err)
			}
			if err := cycle("fn:4"); err != nil {
				t.Fatal(err)
			}
			if n := strings.Count(logs.String(), "statement functions of this version are missing"); n != 1 {
				t.Errorf("want one warning about the missing functions; got %q", logs.String())
			}
			// SetupSchema creates them again, and a new Backend calls them:
			// one that raises makes its acquire fail.
			if err := syncguard.SetupSchema(e.ctx, e.admin, e.cfg); err != nil {
				t.Fatal(err)
			}
			fs = funcs()
			if len(fs) != 8 {
				t.Fatalf("SetupSchema created %d statement functions again, want 8", len(fs))
			}
			for _, f := range fs {
				if len(resultColRE.FindAllString(f, -1)) >= 8 { // the acquires
					mustExec(e.ctx, t, e.admin, `CREATE OR REPLACE FUNCTION `+f+` LANGUAGE plpgsql AS $$BEGIN RAISE EXCEPTION 'served by the function'; END$$`)
				}
			}
			b2, err := syncguard.New(db, &cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer b2.Close()
			if _, err := b2.Acquire(e.ctx, "fn:new", time.Minute); err == nil || !strings.Contains(err.Error(), "served by the function") {
				t.Fatalf("rule: a new Backend calls the functions SetupSchema created again; got %v", err)
			}
		})
	}
}

// resultColRE finds the columns of a statement function's result.
var resultColRE = regexp.MustCompile(`\br\d+ `)
