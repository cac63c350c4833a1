package cli

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"

	"github.com/syncguard/syncguard-go/internal/rules"
	"github.com/syncguard/syncguard-go/multilock"
	"github.com/syncguard/syncguard-go/rwlock"
	"github.com/syncguard/syncguard-go/semaphore"
	"github.com/syncguard/syncguard-go/syncguard"
)

const allUsage = "also the tables of semaphores, read-write locks and sets of keys (run's --permits, -s/-x, several --key), named from --table"

func (a *app) cmdSchema(args []string) error {
	fs := a.flagSet("schema")
	all := fs.Bool("all", false, allUsage)
	if err := a.parseNoArgs(fs, args, `
Prints the DDL that 'syncguard setup' runs (syncguard.SchemaSQL), for
migration tools such as goose, golang-migrate or atlas. It is idempotent
(IF NOT EXISTS) and uses the names given by --table and --fence-table.
Needs no database connection. With --all, also the DDL of the other kinds
of lock (semaphore.SchemaSQL, rwlock.SchemaSQL, multilock.SchemaSQL).`); err != nil {
		return err
	}
	ddl, err := a.schemaSQL(*all)
	if err != nil {
		return err
	}
	if a.json {
		locks, fences := a.tableNames()
		return writeJSON(a.stdout, map[string]string{"table": locks, "fenceTable": fences, "sql": ddl})
	}
	_, err = fmt.Fprint(a.stdout, ddl)
	return err
}

// schemaSQL is the DDL of the lock tables; with all, of every kind's too.
func (a *app) schemaSQL(all bool) (string, error) {
	ddl, err := syncguard.SchemaSQL(a.config())
	for _, f := range []func(*syncguard.Config) (string, error){semaphore.SchemaSQL, rwlock.SchemaSQL, multilock.SchemaSQL}[:map[bool]int{true: 3}[all]] {
		more, e := f(a.config())
		ddl, err = ddl+"\n"+more, cmp.Or(err, e)
	}
	return ddl, err
}

func (a *app) cmdSetup(args []string) error {
	fs := a.flagSet("setup")
	all := fs.Bool("all", false, allUsage)
	if err := a.parseNoArgs(fs, args, `
Creates the lock table, its indexes and the fence counter table if they do
not exist (syncguard.SetupSchema): idempotent, and safe to run from many
deploys at once. Needs CREATE privilege on the schema; the role that takes
locks needs only SELECT, INSERT, UPDATE, DELETE on the lock table and
SELECT, INSERT, UPDATE on the fence table ('syncguard doctor' checks).
With --all, also the tables (and rwlock's functions) that run --permits,
-s/-x and several --key use; their roles need SELECT, INSERT, UPDATE,
DELETE on them.`); err != nil {
		return err
	}
	if _, err := a.schemaSQL(*all); err != nil {
		return err
	}
	db, err := a.open()
	if err != nil {
		return err
	}
	defer db.Close()
	ctx, cancel := a.ctx()
	defer cancel()
	if err := syncguard.SetupSchema(ctx, db, a.config()); err != nil {
		return err
	}
	for _, f := range []func(context.Context, *sql.DB, *syncguard.Config) error{semaphore.SetupSchema, rwlock.SetupSchema, multilock.SetupSchema}[:map[bool]int{true: 3}[*all]] {
		if err := f(ctx, db, a.config()); err != nil {
			return err
		}
	}
	locks, fences := a.tableNames()
	if a.json {
		return writeJSON(a.stdout, map[string]any{"ok": true, "table": locks, "fenceTable": fences})
	}
	fmt.Fprintf(a.stdout, "schema ready: lock table %s, fence table %s\n", rules.QuoteIdent(locks), rules.QuoteIdent(fences))
	return nil
}
