package cli

import (
	"fmt"

	"github.com/syncguard/syncguard-go/internal/rules"
	"github.com/syncguard/syncguard-go/syncguard"
)

func (a *app) cmdSchema(args []string) error {
	if err := a.parseNoArgs(a.flagSet("schema"), args, `
Prints the DDL that 'syncguard setup' runs (syncguard.SchemaSQL), for
migration tools such as goose, golang-migrate or atlas. It is idempotent
(IF NOT EXISTS) and uses the names given by --table and --fence-table.
Needs no database connection.`); err != nil {
		return err
	}
	ddl, err := syncguard.SchemaSQL(a.config())
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

func (a *app) cmdSetup(args []string) error {
	if err := a.parseNoArgs(a.flagSet("setup"), args, `
Creates the lock table, its indexes and the fence counter table if they do
not exist (syncguard.SetupSchema): idempotent, and safe to run from many
deploys at once. Needs CREATE privilege on the schema; the role that takes
locks needs only SELECT, INSERT, UPDATE, DELETE on the lock table and
SELECT, INSERT, UPDATE on the fence table ('syncguard doctor' checks).`); err != nil {
		return err
	}
	if _, err := syncguard.SchemaSQL(a.config()); err != nil {
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
	locks, fences := a.tableNames()
	if a.json {
		return writeJSON(a.stdout, map[string]any{"ok": true, "table": locks, "fenceTable": fences})
	}
	fmt.Fprintf(a.stdout, "schema ready: lock table %s, fence table %s\n", rules.QuoteIdent(locks), rules.QuoteIdent(fences))
	return nil
}
