package multilock

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"strconv"
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

// waiterGCMs: a waiter's row dead this long goes at its keys' next
// attempt. rankCap: a waiter's rank is counted up to it.
const (
	waiterGCMs = 60_000
	rankCap    = 64
)

// tablesOf returns the tables of cfg (nil: the defaults), checking cfg by
// syncguard's own rules (syncguard.SchemaSQL does no I/O) and that no
// name of ours is cfg's fence table.
func tablesOf(op string, cfg *syncguard.Config) (Tables, error) {
	if _, err := syncguard.SchemaSQL(cfg); err != nil {
		if e, ok := err.(*syncguard.Error); ok {
			e.Op = op
		}
		return Tables{}, err
	}
	table, fences := rules.DefaultTable, rules.DefaultFenceTable
	if cfg != nil && cfg.TableName != "" {
		table = cfg.TableName
	}
	if cfg != nil && cfg.FenceTableName != "" {
		fences = cfg.FenceTableName
	}
	t := tablesFor(table)
	for _, n := range names(table) {
		if strings.EqualFold(n, fences) {
			return Tables{}, &syncguard.Error{Op: op, Code: syncguard.CodeInvalidArgument,
				Msg: fmt.Sprintf("FenceTableName %q is the name of one of multilock's tables or indexes for TableName %q: choose another name", fences, table)}
		}
	}
	return t, nil
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
	Values:  map[string]string{"now_us": kit.NowUS, "waiter_gc": strconv.Itoa(waiterGCMs), "rank_cap": strconv.Itoa(rankCap), "nowait": ""},
	Channel: func(table string) string { return waiting.Prefix(table + "_ml") }, LockID: 0x6d756c74696c6b31} // "multilk1"

// The statement functions (funcs.go) follow the tables.
func init() {
	schema.More = func(table string) (string, string) {
		fns := tablesFor(table).statements().fns
		return stmtfunc.DDL(fns), stmtfunc.Exist(fns)
	}
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

// raw is an embedded statement file.
func (t Tables) raw(name string) string {
	b, err := sqlFiles.ReadFile("sql/" + name)
	if err != nil {
		panic(err) // embedded at build time
	}
	return string(b)
}

// render expands an embedded statement file for the tables t.
func (t Tables) render(name string) string { return t.renderWith(name, "") }

// renderWith is render with the counters' lock taken with nowait ("" or
// "NOWAIT": a statement function's second step, funcs.go).
func (t Tables) renderWith(name, nowait string) string {
	return schema.RenderWith(name, t.table(), map[string]string{"nowait": nowait})
}

var stripComments = kit.StripComments

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

// SetupSchema creates the tables of SchemaSQL and their indexes that do
// not exist, in one transaction, safe to call concurrently; when all
// exist, one query and no lock. cfg may be nil for the defaults. The
// tables need the privileges of the lock table: SELECT, INSERT, UPDATE,
// DELETE on all three.
func SetupSchema(ctx context.Context, db *sql.DB, cfg *syncguard.Config) error {
	if _, err := tablesOf("multilock.setupSchema", cfg); err != nil {
		return err
	}
	return schema.Setup(ctx, db, cfg)
}
