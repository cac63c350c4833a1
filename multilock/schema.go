package multilock

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"strings"

	"github.com/syncguard/syncguard-go/internal/kit"
	"github.com/syncguard/syncguard-go/internal/rules"
	"github.com/syncguard/syncguard-go/internal/stmtfunc"
	"github.com/syncguard/syncguard-go/internal/waiting"
	"github.com/syncguard/syncguard-go/syncguard"
)

//go:embed sql/*.sql
var sqlFiles embed.FS

// Tables names the tables of a configuration: the lock table's name
// (syncguard.Config.TableName) with a suffix of their own, so that a key
// locked as part of a set is independent of the mutex of the same name.
type Tables struct {
	Locks   string // <TableName>_ml: a row per key of each held set
	Fences  string // <TableName>_ml_fences: a fence counter per key
	Waiters string // <TableName>_ml_waiters: the queue, a row per key of each waiter
}

// tablesOf returns the tables of cfg (nil: the defaults), checking cfg by
// syncguard's own rules (syncguard.SchemaSQL does no I/O) and that no
// name of ours is cfg's fence table.
func tablesOf(op string, cfg *syncguard.Config) (Tables, error) {
	table, err := kit.TableName(op, cfg)
	if err != nil {
		return Tables{}, err
	}
	fences := rules.DefaultFenceTable
	if cfg != nil && cfg.FenceTableName != "" {
		fences = cfg.FenceTableName
	}
	for _, n := range names(table) {
		if strings.EqualFold(n, fences) {
			return Tables{}, &syncguard.Error{Op: op, Code: syncguard.ErrInvalidArgument,
				Msg: fmt.Sprintf("FenceTableName %q is the name of one of multilock's tables or indexes for TableName %q: choose another name", fences, table)}
		}
	}
	return tablesFor(table), nil
}

// names are multilock's tables and indexes for lock table table,
// unquoted, by their placeholder in the statement files.
func names(table string) map[string]string {
	return map[string]string{
		"locks": table + "_ml", "fences": table + "_ml_fences", "waiters": table + "_ml_waiters",
		"lock_id_index": "idx_" + table + "_mlid", "waiters_key_index": "idx_" + table + "_mlwk",
	}
}

// schema is multilock's SQL.
var schema = &kit.Schema{Kind: "multilock", Files: sqlFiles, Names: names, DDL: []string{"schema.sql"},
	Values:  map[string]string{"nowait": ""},
	Channel: func(table string) string { return waiting.Prefix(table + "_ml") }, LockID: 0x6d756c74696c6b31} // "multilk1"

// The statement functions (funcs.go) follow the tables.
func init() {
	schema.Funcs = func(table string) []stmtfunc.Func { return tablesFor(table).statements().fns }
}

// tablesFor are the tables of lock table table (checked).
func tablesFor(table string) Tables {
	n := names(table)
	return Tables{Locks: n["locks"], Fences: n["fences"], Waiters: n["waiters"]}
}

// channelPrefix is the notification channel prefix of the tables: that
// of the core's waiting, over multilock's own lock table, so that no
// mutex waiter is woken by a set's release, nor the reverse.
func (t Tables) channelPrefix() string { return schema.Channel(t.table()) }

// table is the lock table the tables are named from.
func (t Tables) table() string { return strings.TrimSuffix(t.Locks, "_ml") }

// render expands an embedded statement file for the tables t.
func (t Tables) render(name string) string { return t.renderWith(name, "") }

// renderWith is render with the counters' lock taken with nowait ("" or
// "NOWAIT": a statement function's second step, funcs.go).
func (t Tables) renderWith(name, nowait string) string {
	return schema.RenderWith(name, t.table(), map[string]string{"nowait": nowait})
}

// SchemaSQL returns the DDL that SetupSchema runs, for migration tools:
// the tables of Tables (lock rows, fence counters, the UNLOGGED queue)
// and their indexes, idempotent (IF NOT EXISTS). cfg may be nil for the
// defaults; its TableName names the tables (TablesOf).
func SchemaSQL(cfg *syncguard.Config) (string, error) {
	if _, err := tablesOf("multilock.schemaSQL", cfg); err != nil {
		return "", err
	}
	return schema.SQL("multilock.schemaSQL", cfg)
}

// TablesOf returns the names of multilock's tables for cfg (nil: the
// defaults), or an InvalidArgument *syncguard.Error for a bad cfg.
func TablesOf(cfg *syncguard.Config) (Tables, error) { return tablesOf("multilock.tables", cfg) }

// SetupSchema creates the tables, indexes and functions of SchemaSQL
// (kit.Schema.Setup: idempotent, safe to call concurrently, one query
// when all exist). The tables need the lock table's privileges.
func SetupSchema(ctx context.Context, db *sql.DB, cfg *syncguard.Config) error {
	if _, err := tablesOf("multilock.setupSchema", cfg); err != nil {
		return err
	}
	return schema.Setup(ctx, db, cfg)
}

// The statements that run through a statement function (funcs), by index.
const (
	opAcquire = iota
	opRelease
	opExtend
	numOps
)

var opFiles = [numOps]string{"acquire.sql", "release.sql", "extend.sql"}

// statements are a Locker's statements: each sent as itself (plain), and
// the call of its statement function (call; "" when the table's name is
// too long for one).
type statements struct {
	plain [numOps]string
	call  [numOps]string
	fns   []stmtfunc.Func
}

// maxFuncPrefix: a function's name is the prefix, "_op_" and 8 hex
// digits, within PostgreSQL's 63 bytes.
const maxFuncPrefix = 63 - 12

// statements renders the statements of t and their functions. A function
// runs its statement with the counter rows locked NOWAIT; only when another
// transaction holds one (55P03, that run undone) does it take the
// statement's lock alone (its CTEs up to g: the counter rows of every key
// it involves, in the one order, waiting) and run the statement again,
// with a snapshot taken once those rows are locked, so that its fresh
// check holds (no rerun after the wait) and its own lock, on rows it holds
// already, waits for none (a key that joined between the two steps,
// locked by another statement, is a 55P03 for the caller to run again
// from the start: never a wait out of the one order).
func (t Tables) statements() statements {
	var s statements
	prefix := t.Locks
	for i, file := range opFiles {
		plain := kit.StripComments(t.renderWith(file, ""))
		s.plain[i] = plain
		if len(prefix) > maxFuncPrefix {
			continue
		}
		f := schema.Func(prefix, lockStep(plain), file, t.table(), map[string]string{"nowait": "NOWAIT"})
		s.call[i] = f.Call
		s.fns = append(s.fns, f)
	}
	return s
}

// lockStep is a statement's lock alone: its CTEs up to g (the counter
// rows, FOR UPDATE in the one order), which every statement of the package
// declares just before chk.
func lockStep(stmt string) string {
	i := strings.Index(stmt, "\nchk AS MATERIALIZED (")
	if i < 0 || !strings.HasPrefix(stmt, "WITH\n") {
		panic("multilock: a statement without its lock (g) before chk")
	}
	return "SELECT 1 FROM (" + strings.TrimSuffix(strings.TrimSpace(stmt[:i]), ",") + "\nSELECT 1 FROM g) AS lk"
}

// runOp runs statement op through its function while the function serves,
// else the statement itself (kit.Base.Call).
func (l *Locker) runOp(ctx context.Context, op int, args []any, dest ...any) error {
	return l.k.Call(ctx, l.sql.call[op], l.sql.plain[op], args, dest...)
}
