package txguard

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"regexp"
	"strings"

	"github.com/syncguard/syncguard-go/driver"
	"github.com/syncguard/syncguard-go/internal/kit"
	"github.com/syncguard/syncguard-go/internal/rules"
	"github.com/syncguard/syncguard-go/multilock"
	"github.com/syncguard/syncguard-go/rwlock"
	"github.com/syncguard/syncguard-go/semaphore"
	"github.com/syncguard/syncguard-go/syncguard"
)

//go:embed sql/*.sql
var sqlFiles embed.FS

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

// schema is txguard's SQL: the hold statements and the SQL functions
// that run them (functions.sql).
var schema = &kit.Schema{Kind: "txguard", Files: sqlFiles, DDL: []string{"functions.sql"}, LockID: 0x7478677561726431, // "txguard1"
	Names: func(table string) map[string]string { // and the SQL functions, one per kind
		n := kindTables(table)
		n["hold_fn"], n["sem_hold_fn"], n["rw_hold_fn"], n["ml_hold_fn"] = table+"_hold", table+"_sem_hold", table+"_rw_hold", table+"_ml_hold"
		return n
	},
	// The former mutex function, which took the lockId alone, must be gone
	// too: it trusted a bare lockId.
	More: func(table string) (string, string) {
		return "", "to_regprocedure(quote_ident(current_schema()) || '.' || '" + rules.QuoteIdent(table+"_hold") + "(text)') IS NULL"
	},
}

// The functions run the hold statements.
func init() {
	schema.With = func(table string) map[string]string {
		one := func(k kind, fn, args, what string) string { // hold_one.sql
			text := schema.RenderWith("hold_one.sql", table, map[string]string{"one_fn": rules.QuoteIdent(fn), "one_args": args, "one_hold": hold(k, table), "one_what": what})
			return kit.StripComments(rules.Variant(text, "key", k == kindMutex))
		}
		return map[string]string{"hold_ml": hold(kindMultiLock, table),
			"hold_def": one(kindMutex, table+"_hold", "p_lock_id text, p_key text", "lock"),
			"sem_def":  one(kindSemaphore, table+"_sem_hold", "p_lock_id text", "permit"),
			"rw_def":   one(kindRWLock, table+"_rw_hold", "p_lock_id text", "reader or writer")}
	}
}

// hold is the hold statement of kind k for lock table table (holdFiles;
// rows: the table of a one-row lease, hold_row.sql's).
func hold(k kind, table string) string {
	rows := kindTables(table)[map[kind]string{kindSemaphore: "sem_slots", kindRWLock: "rw_holders"}[k]]
	return kit.StripComments(schema.RenderWith(holdFiles[k], table, map[string]string{"rows": rules.QuoteIdent(rows)}))
}

// SchemaSQL returns the DDL that Setup runs: the SQL functions, one per
// kind of lock, for callers who write SQL, all RETURNS bigint:
// <TableName>_hold(lock_id text, key text) (a mutex lease on key; a
// lockId of another key is refused), <TableName>_sem_hold(lock_id text)
// (a semaphore permit), <TableName>_rw_hold(lock_id text) (an rwlock
// reader or writer) and <TableName>_ml_hold(lock_id text, key text) (a
// multilock set: every key is checked and locked; key's fence returned).
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
// signature, <TableName>_hold(lock_id text)); a function is created
// whether or not its kind's tables exist (called without them, it fails
// with 42P01). cfg may be nil for the defaults.
func SchemaSQL(cfg *syncguard.Config) (string, error) { return schema.SQL("txguard.schemaSQL", cfg) }

// Setup creates or updates the SQL functions of SchemaSQL in the current
// schema (kit.Schema.Setup: safe to call concurrently, one query when all
// exist with the same bodies). Using a function needs only the privileges
// of its kind's holder table (SELECT and UPDATE, for FOR KEY SHARE and
// FOR SHARE).
func Setup(ctx context.Context, db *sql.DB, cfg *syncguard.Config) error {
	return schema.Setup(ctx, db, cfg)
}

// identRE is a plain SQL identifier, as syncguard.Config's table names.
var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// fenceTrigger is the fence guard's trigger name on every table.
const fenceTrigger = "syncguard_fence_guard"

// FenceGuardSQL returns the DDL that installs a fence guard on a resource
// table that keeps its writer's fence in column: a BEFORE UPDATE trigger
// (INSERT ... ON CONFLICT DO UPDATE fires it too) that rejects a row
// whose column is below the stored value, or NULL where a value was
// stored, with SQLSTATE SG002 (SQLStateStaleFence) and a message naming
// the table, the column and both fences. An equal fence passes. A plain
// INSERT of a new row and a DELETE carry no stored fence to compare:
// check the lease (Guard.Hold) in their transaction. The column may be
// bigint or the 15-digit text fence (both compare in fence order).
//
// table is a plain identifier, optionally schema-qualified
// ("billing.accounts"); column a plain identifier. The DDL creates the
// function <table>_fence_guard (in the table's schema) and the trigger
// syncguard_fence_guard, and is safe to re-run. Bad names are
// InvalidArgument.
func FenceGuardSQL(table, column string) (string, error) {
	const op = "txguard.fenceGuard"
	parts := strings.Split(table, ".")
	if len(parts) > 2 {
		return "", kit.InvalidArg(op, fmt.Sprintf("table %q: want name or schema.name", table))
	}
	for _, p := range append(parts, column) {
		if !identRE.MatchString(p) || len(p) > 63 {
			return "", kit.InvalidArg(op, fmt.Sprintf("%q is not a plain SQL identifier (want ^[A-Za-z_][A-Za-z0-9_]*$, at most 63 bytes)", p))
		}
	}
	fn := parts[len(parts)-1] + "_fence_guard"
	if len(fn) > 63 {
		return "", kit.InvalidArg(op, fmt.Sprintf("table name %q is too long for the function name %q (at most 63 bytes)", parts[len(parts)-1], fn))
	}
	quoted := make([]string, len(parts))
	for i, p := range parts {
		quoted[i] = rules.QuoteIdent(p)
	}
	quoted[len(quoted)-1] = rules.QuoteIdent(fn)
	return schema.RenderWith("fence_guard.sql", rules.DefaultTable, map[string]string{
		"table":      quoteQualified(parts),
		"guard_fn":   strings.Join(quoted, "."),
		"column":     rules.QuoteIdent(column),
		"column_lit": "'" + column + "'",
		"trigger":    rules.QuoteIdent(fenceTrigger),
	}), nil
}

func quoteQualified(parts []string) string {
	q := make([]string, len(parts))
	for i, p := range parts {
		q[i] = rules.QuoteIdent(p)
	}
	return strings.Join(q, ".")
}

// SetupFenceGuard runs FenceGuardSQL(table, column) in one transaction.
// It needs CREATE on the table's schema and the TRIGGER privilege on the
// table (its owner has both); writers need nothing more than their own
// privileges on the table.
func SetupFenceGuard(ctx context.Context, db *sql.DB, table, column string) error {
	ddl, err := FenceGuardSQL(table, column)
	if err != nil {
		return err
	}
	if db == nil {
		return kit.InvalidArg("txguard.fenceGuard", "db must not be nil")
	}
	d, _ := driver.Lookup(db.Driver())
	return kit.RunDDL(ctx, "txguard.fenceGuard", db, d, schema.LockID, ddl)
}
