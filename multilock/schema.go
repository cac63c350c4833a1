package multilock

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"strconv"
	"strings"

	"github.com/syncguard/syncguard-go/driver"
	"github.com/syncguard/syncguard-go/internal/errwrap"
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
	t := Tables{Locks: table + "_ml", Fences: table + "_ml_fences", Waiters: table + "_ml_waiters"}
	for _, n := range []string{t.Locks, t.Fences, t.Waiters, "idx_" + table + "_mlid", "idx_" + table + "_mlwk"} {
		if strings.EqualFold(n, fences) {
			return Tables{}, &syncguard.Error{Op: op, Code: syncguard.CodeInvalidArgument,
				Msg: fmt.Sprintf("FenceTableName %q is the name of one of multilock's tables or indexes for TableName %q: choose another name", fences, table)}
		}
	}
	return t, nil
}

// names are the placeholders of the statement files, quoted.
func (t Tables) names() map[string]string {
	base := strings.TrimSuffix(t.Locks, "_ml")
	n := map[string]string{
		"locks": t.Locks, "fences": t.Fences, "waiters": t.Waiters,
		"lock_id_index": "idx_" + base + "_mlid", "waiters_key_index": "idx_" + base + "_mlwk",
	}
	for k, v := range n {
		n[k] = rules.QuoteIdent(v)
	}
	n["now_us"] = "floor(extract(epoch FROM statement_timestamp()) * 1000000)::bigint"
	n["waiter_gc"] = strconv.Itoa(waiterGCMs)
	n["rank_cap"] = strconv.Itoa(rankCap)
	n["nowait"] = ""
	return n
}

// channelPrefix is the notification channel prefix of the tables: that
// of the core's waiting, over multilock's own lock table, so that no
// mutex waiter is woken by a set's release, nor the reverse.
func (t Tables) channelPrefix() string { return waiting.Prefix(t.Locks) }

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
	text := t.raw(name)
	prefix := t.channelPrefix()
	text = replaceCalls(text, "wake_channel", func(arg string) string { return waiting.ChannelSQL(prefix, arg) })
	text = replaceCalls(text, "wake_payload", waiting.PayloadSQL)
	names := t.names()
	names["nowait"] = nowait
	out, err := rules.Render(text, names)
	if err != nil {
		panic("multilock: sql/" + name + ": " + err.Error()) // embedded; TestRender renders every file
	}
	return out
}

// replaceCalls expands {{name(arg)}} with f(arg).
func replaceCalls(text, name string, f func(string) string) string {
	open := "{{" + name + "("
	for {
		i := strings.Index(text, open)
		if i < 0 {
			return text
		}
		j := strings.Index(text[i:], ")}}")
		if j < 0 {
			return text // rules.Render reports it
		}
		arg := text[i+len(open) : i+j]
		text = text[:i] + f(arg) + text[i+j+3:]
	}
}

// stripComments drops a statement's "--" lines and blank lines (inlined
// arguments must not meet a quote in a comment).
func stripComments(s string) string {
	var keep []string
	for _, line := range strings.Split(s, "\n") {
		if t := strings.TrimSpace(line); t != "" && !strings.HasPrefix(t, "--") {
			keep = append(keep, line)
		}
	}
	return strings.Join(keep, "\n")
}

// SchemaSQL returns the DDL that SetupSchema runs, for migration tools:
// the tables of Tables (lock rows, fence counters, the UNLOGGED queue)
// and their indexes, idempotent (IF NOT EXISTS). cfg may be nil for the
// defaults; its TableName names the tables (TablesOf).
func SchemaSQL(cfg *syncguard.Config) (string, error) {
	t, err := tablesOf("multilock.schemaSQL", cfg)
	if err != nil {
		return "", err
	}
	st := t.statements()
	return t.render("schema.sql") + stmtfunc.DDL(st.fns), nil
}

// TablesOf returns the names of multilock's tables for cfg (nil: the
// defaults), or an InvalidArgument *syncguard.Error for a bad cfg.
func TablesOf(cfg *syncguard.Config) (Tables, error) { return tablesOf("multilock.tables", cfg) }

// setupLockID serializes concurrent SetupSchema calls.
const setupLockID = 0x6d756c74696c6b31 // "multilk1"

// SetupSchema creates the tables of SchemaSQL and their indexes that do
// not exist, in one transaction, safe to call concurrently; cfg may be nil
// for the defaults. The tables need the privileges of the lock table:
// SELECT, INSERT, UPDATE, DELETE on all three.
func SetupSchema(ctx context.Context, db *sql.DB, cfg *syncguard.Config) error {
	const op = "multilock.setupSchema"
	ddl, err := SchemaSQL(cfg)
	if err != nil {
		return err
	}
	if db == nil {
		return &syncguard.Error{Op: op, Code: syncguard.CodeInvalidArgument, Msg: "db must not be nil"}
	}
	var d driver.Dialect
	if cfg != nil {
		d = cfg.Dialect
	}
	if d == nil {
		d, _ = driver.Lookup(db.Driver())
	}
	wrap := func(err error) error {
		if err == nil {
			return nil
		}
		return errwrap.Wrap(ctx, op, d, err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return wrap(err)
	}
	defer tx.Rollback() //nolint:errcheck // no-op after Commit
	if _, err := tx.ExecContext(ctx, fmt.Sprintf("SELECT pg_advisory_xact_lock(%d)", int64(setupLockID))); err != nil {
		return wrap(err)
	}
	for _, stmt := range strings.Split(ddl, ";\n") {
		if stmt = strings.TrimSpace(stripComments(stmt)); stmt == "" {
			continue
		}
		if _, err := tx.ExecContext(ctx, stmt); err != nil {
			return wrap(err)
		}
	}
	return wrap(tx.Commit())
}
