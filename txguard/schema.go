package txguard

import (
	"context"
	"database/sql"
	"embed"
	"strings"

	"github.com/syncguard/syncguard-go/driver"
	"github.com/syncguard/syncguard-go/internal/deploy"
	"github.com/syncguard/syncguard-go/internal/errwrap"
	"github.com/syncguard/syncguard-go/internal/kit"
	"github.com/syncguard/syncguard-go/internal/rules"
	"github.com/syncguard/syncguard-go/multilock"
	"github.com/syncguard/syncguard-go/rwlock"
	"github.com/syncguard/syncguard-go/semaphore"
	"github.com/syncguard/syncguard-go/syncguard"
)

//go:embed sql/*.sql
var sqlFiles embed.FS

// tableName is cfg's lock table, checked by syncguard's own rules.
func tableName(cfg *syncguard.Config) (string, error) { return kit.TableName("txguard.new", cfg) }

// holdFunc is the name of the SQL function of lock table table.
func holdFunc(table string) string { return table + "_hold" }

// holdFuncs are the names of the SQL functions of lock table table, one
// per kind of lock, by placeholder, and their signatures.
func holdFuncs(table string) map[string]string {
	return map[string]string{
		"hold_fn":     holdFunc(table) + "(text,text)",
		"sem_hold_fn": table + "_sem_hold(text)",
		"rw_hold_fn":  table + "_rw_hold(text)",
		"ml_hold_fn":  table + "_ml_hold(text,text)",
	}
}

// kindTables are the tables that hold the leases of each kind of lock of
// lock table table, by placeholder: the mutex's lock table, multilock's
// lock rows, the semaphore's slots, the read-write lock's holders (each
// kind names its own; see TablesOf and Tables there).
func kindTables(table string) map[string]string {
	ml, err := multilock.TablesOf(&syncguard.Config{TableName: table})
	if err != nil {
		panic("txguard: multilock.TablesOf of a checked table name: " + err.Error())
	}
	_, slots, _ := semaphore.Tables(table)
	holders, _, _ := rwlock.Tables(table)
	return map[string]string{"locks": table, "ml_locks": ml.Locks, "sem_slots": slots, "rw_holders": holders}
}

// render expands an embedded statement file for lock table table, with
// extra names (quoted by the caller).
func render(name, table string, extra map[string]string) string {
	b, err := sqlFiles.ReadFile("sql/" + name)
	if err != nil {
		panic(err) // embedded at build time
	}
	names := map[string]string{}
	for k, v := range kindTables(table) {
		names[k] = rules.QuoteIdent(v)
	}
	for k, v := range holdFuncs(table) {
		names[k] = rules.QuoteIdent(strings.SplitN(v, "(", 2)[0])
	}
	for k, v := range extra {
		names[k] = v
	}
	out, err := rules.Render(string(b), names)
	if err != nil {
		panic("txguard: sql/" + name + ": " + err.Error()) // embedded; TestRender renders every file
	}
	return out
}

var stripComments = kit.StripComments

// SchemaSQL returns the DDL that Setup runs: the SQL functions, one per
// kind of lock, for callers who write SQL: <TableName>_hold(lock_id text,
// key text) (a mutex lease on key; a lockId of another key is refused), <TableName>_sem_hold(lock_id text) (a semaphore
// permit), <TableName>_rw_hold(lock_id text) (an rwlock reader or writer)
// and <TableName>_ml_hold(lock_id text, key text) (a multilock set: every
// key is checked and locked, key's fence is returned), all RETURNS bigint.
// Called in a statement of the caller's transaction, each checks and
// locks the lease as Guard.HoldLease does and returns its fence, or raises
// SQLSTATE SG001 (SQLStateLeaseLost), which fails the statement:
//
//	UPDATE accounts SET balance = $1, fence = "syncguard_locks_hold"($2, $3)
//	WHERE id = $4
//
// The function runs wherever the statement evaluates it (once per row
// written here); a statement that writes no row checks nothing, and one
// that does not evaluate the call (an unreferenced CTE) neither. The DDL
// is idempotent (CREATE OR REPLACE; it drops the mutex function's former
// signature, <TableName>_hold(lock_id text)); a function is created whether or not
// its kind's tables exist (called without them, it fails with 42P01). cfg
// may be nil for the defaults.
func SchemaSQL(cfg *syncguard.Config) (string, error) {
	table, err := tableName(cfg)
	if err != nil {
		return "", err
	}
	return render("functions.sql", table, map[string]string{
		"hold":     stripComments(render(holdFiles[kindMutex], table, nil)),
		"hold_sem": stripComments(render(holdFiles[kindSemaphore], table, nil)),
		"hold_rw":  stripComments(render(holdFiles[kindRWLock], table, nil)),
		"hold_ml":  stripComments(render(holdFiles[kindMultiLock], table, nil)),
	}), nil
}

// setupLockID serializes concurrent setups (CREATE OR REPLACE FUNCTION
// races on the catalog otherwise).
const setupLockID = 0x7478677561726431 // "txguard1"

// Setup creates or updates the SQL functions of SchemaSQL in the current
// schema, safe to call concurrently. When they all exist with the same
// bodies it returns nil after one query, so a role without CREATE on the
// schema may call it then. Using a function needs only the privileges of
// its kind's holder table (SELECT and UPDATE, which FOR KEY SHARE and FOR
// SHARE require).
func Setup(ctx context.Context, db *sql.DB, cfg *syncguard.Config) error {
	const op = "txguard.setup"
	ddl, err := SchemaSQL(cfg)
	if err != nil {
		return err
	}
	if db == nil {
		return invalidArg(op, "db must not be nil")
	}
	table, _ := tableName(cfg)
	var sigs []string
	for _, f := range holdFuncs(table) {
		name, args, _ := strings.Cut(f, "(")
		sigs = append(sigs, rules.QuoteIdent(name)+"("+args)
	}
	// (The former mutex function, which took the lockId alone, must be
	// gone too: it trusted a bare lockId.)
	var same int
	err = db.QueryRowContext(ctx, `SELECT count(*) FILTER (WHERE to_regprocedure(quote_ident(current_schema()) || '.' || $3) IS NULL)
		FROM unnest(string_to_array($1, E'\n')) AS f(sig)
		JOIN pg_catalog.pg_proc AS p ON p.oid = to_regprocedure(quote_ident(current_schema()) || '.' || f.sig)
		WHERE strpos($2, p.prosrc) > 0`,
		strings.Join(sigs, "\n"), ddl, rules.QuoteIdent(holdFunc(table))+"(text)").Scan(&same)
	if err != nil {
		return wrapSetup(ctx, op, db, cfg, err)
	}
	if same == len(sigs) {
		return nil
	}
	return runDDL(ctx, op, db, cfg, ddl)
}

// runDDL runs statements separated by ";" and a blank line, in one
// transaction under an advisory lock; no arguments (the simple query
// protocol: nothing prepared).
func runDDL(ctx context.Context, op string, db *sql.DB, cfg *syncguard.Config, ddl string) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return wrapSetup(ctx, op, db, cfg, err)
	}
	defer tx.Rollback() //nolint:errcheck // no-op after Commit
	if err := deploy.SetupLock(ctx, tx, int64(setupLockID), deploy.SetupLockTimeout); err != nil {
		e := wrapSetup(ctx, op, db, cfg, err).(*syncguard.Error)
		if who := deploy.SetupLockHolders(ctx, db, err); who != "" {
			e.Msg += ": " + who
		}
		return e
	}
	for _, stmt := range strings.Split(ddl, ";\n\n") {
		if stmt = strings.TrimSpace(stripComments(stmt)); stmt == "" {
			continue
		}
		if _, err := tx.ExecContext(ctx, stmt); err != nil {
			return wrapSetup(ctx, op, db, cfg, err)
		}
	}
	return wrapSetup(ctx, op, db, cfg, tx.Commit())
}

func wrapSetup(ctx context.Context, op string, db *sql.DB, cfg *syncguard.Config, err error) error {
	if err == nil {
		return nil
	}
	var d driver.Dialect
	if cfg != nil {
		d = cfg.Dialect
	}
	if d == nil && db != nil {
		d, _ = driver.Lookup(db.Driver())
	}
	return errwrap.Wrap(ctx, op, d, err)
}
