package syncguard

import (
	"context"
	"database/sql"
	"embed"
	"log/slog"
	"regexp"
	"strconv"
	"strings"

	"github.com/syncguard/syncguard-go/driver"
	"github.com/syncguard/syncguard-go/internal/deploy"
	"github.com/syncguard/syncguard-go/internal/rules"
	"github.com/syncguard/syncguard-go/internal/stmtfunc"
	"github.com/syncguard/syncguard-go/internal/waiting"
)

//go:embed sql/*.sql
var sqlFiles embed.FS

// The operations' statements (statements.ops). The "Holders" variants,
// and the lookups without "Plain", keep the holders table (Config.Identity).
const (
	stmtAcquire = iota
	stmtAcquireWait
	stmtAcquireHolders
	stmtAcquireWaitHolders
	stmtRelease // with the queue and the holders table
	stmtReleaseQueue
	stmtReleasePlain
	stmtExtend
	stmtLookupKey
	stmtLookupID
	stmtLookupKeyPlain
	stmtLookupIDPlain
	stmtPlaceholder // an expired row for an acquire to take over (acquire.sql's absent)
	stmtReleaseKeep // a release that keeps the row, expired (release_keep.sql)
	stmtReleaseKeepPlain
	numStmts
)

// acquireStmts picks the acquire's variant: [queued][holders].
var acquireStmts = [2][2]int{{stmtAcquire, stmtAcquireHolders}, {stmtAcquireWait, stmtAcquireWaitHolders}}

// lookupStmts picks a lookup's variant: [byID][holders].
var lookupStmts = [2][2]int{{stmtLookupKeyPlain, stmtLookupKey}, {stmtLookupIDPlain, stmtLookupID}}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// statements holds the SQL of one Backend, rendered once.
type statements struct {
	ops                        [numStmts]string // by stmtAcquire...
	cleanup                    string
	list, listPlain, lastFence string           // inspections (inspect.go)
	releaseOrphans             [2]string        // background release (orphans.go): [with the queue]
	funcs                      [numStmts]string // calls of the statement functions (exec.go's oneShotOp)
	fns                        []stmtfunc.Func  // the statement functions, for SchemaSQL and SetupSchema
}

// funcSources are the statements that run through a statement function
// when sent unprepared (exec.go's oneShotOp), by their file, whose first
// line is "--returns" and the types of its columns.
var funcSources = map[int]string{
	stmtAcquire: "acquire.sql", stmtAcquireWait: "acquire.sql", stmtAcquireHolders: "acquire.sql", stmtAcquireWaitHolders: "acquire.sql",
	stmtRelease: "release.sql", stmtReleaseQueue: "release.sql", stmtReleasePlain: "release.sql", stmtExtend: "extend.sql",
}

// renderFuncs makes the statement functions of st for table, in statement
// order, and their unprepared calls.
func renderFuncs(table string, st *statements) {
	for i := 0; i < numStmts; i++ {
		file, ok := funcSources[i]
		if !ok {
			continue
		}
		returns, _ := strings.CutPrefix(strings.SplitN(mustRead(file), "\n", 2)[0], "--returns ")
		f, err := stmtfunc.New(table, returns, st.ops[i])
		if err != nil {
			panic("syncguard: sql/" + file + ": " + err.Error()) // embedded at build time; TestSchemaSQLQuotesAndNames renders them
		}
		st.funcs[i] = f.Call
		st.fns = append(st.fns, f)
	}
}

// render expands a statement file: the rules' SQL fragments (see
// internal/rules) and one configuration's quoted table and index names.
func render(name, table, fenceTable string) string {
	return renderVariant(name, table, fenceTable, true, true)
}

// renderVariant renders a statement file with or without the lines between
// "--if queue" and "--end" ("--if !queue": the other way round), and "holders".
func renderVariant(name, table, fenceTable string, queue, holders bool) string {
	text := rules.Variant(rules.Variant(mustRead(name), "queue", queue), "holders", holders)
	text = strings.ReplaceAll(text, "{{identity_arg}}", map[bool]string{false: "$6", true: "$8"}[queue])
	out, err := renderText(text, table, fenceTable)
	if err != nil {
		panic("syncguard: sql/" + name + ": " + err.Error()) // embedded at build time; TestStatementsRender renders every file
	}
	return out
}

func renderText(text, table, fenceTable string) (string, error) {
	names := schemaNames(table, fenceTable)
	for k, v := range names {
		names[k] = rules.QuoteIdent(v)
	}
	names["now_us"] = "floor(extract(epoch FROM statement_timestamp()) * 1000000)::bigint"
	names["waiter_gc"] = strconv.FormatInt(waiterGCMs, 10)
	names["tomb_place"] = "(" + names["now_us"] + " - 4611686018427387904)"
	names["rank_cap"] = strconv.Itoa(rankCap)
	names["listen_rank"] = strconv.Itoa(listenRank)
	prefix := waiting.Prefix(table)
	text = wakeChannelRE.ReplaceAllStringFunc(text, func(m string) string {
		return waiting.ChannelSQL(prefix, wakeChannelRE.FindStringSubmatch(m)[1])
	})
	text = wakePayloadRE.ReplaceAllString(text, waiting.PayloadSQL("$1"))
	text = grantPayloadRE.ReplaceAllStringFunc(text, func(m string) string {
		a := strings.Split(grantPayloadRE.FindStringSubmatch(m)[1], ", ")
		return waiting.GrantPayloadSQL(a[0], a[1], a[2], a[3])
	})
	return rules.Render(text, names)
}

// {{wake_channel(key)}} and {{wake_payload(lockID)}}: waiting.Channel and
// waiting.Payload in SQL.
var (
	wakeChannelRE = regexp.MustCompile(`\{\{wake_channel\(([^()]*)\)\}\}`)
	wakePayloadRE = regexp.MustCompile(`\{\{wake_payload\(([^()]*)\)\}\}`)
	// {{grant_payload(lockID, fence, nowMs, ttlMs)}}: waiting.GrantPayloadSQL.
	grantPayloadRE = regexp.MustCompile(`\{\{grant_payload\(([^()]*, [^()]*, [^()]*, [^()]*)\)\}\}`)
)

// waiterGCMs: a waiter's row dead this long goes at a new waiter's or the first
// waiter's next attempt. rankCap: a waiter's rank is counted up to it. listenRank:
// within it of the head a waiter listens and attends (wait.go).
const (
	waiterGCMs = 60_000
	rankCap    = 64
	listenRank = 3
)

// schemaNames are the table and index names of one configuration, by
// their placeholder in the statement files, unquoted.
func schemaNames(table, fenceTable string) map[string]string {
	return map[string]string{
		"locks":         table,
		"fences":        fenceTable,
		"lock_id_index": "idx_" + table + "_lock_id",
		"expires_index": "idx_" + table + "_expires",

		"waiters":           waitersTable(table),
		"waiters_id_index":  "idx_" + table + "_wid",
		"waiters_key_index": "idx_" + table + "_wkey",
		"holders":           holdersTable(table),
		"holders_key_index": "idx_" + table + "_hkey",
	}
}

func mustRead(name string) string {
	b, err := sqlFiles.ReadFile("sql/" + name)
	if err != nil {
		panic(err) // embedded at build time; cannot happen
	}
	return string(b)
}

func renderStatements(table, fenceTable string) statements {
	v := func(name string, queue, holders bool) string {
		return stripComments(renderVariant(name, table, fenceTable, queue, holders))
	}
	st := statements{
		ops: [numStmts]string{
			stmtAcquire: v("acquire.sql", false, false), stmtAcquireWait: v("acquire.sql", true, false),
			stmtAcquireHolders: v("acquire.sql", false, true), stmtAcquireWaitHolders: v("acquire.sql", true, true),
			stmtRelease: v("release.sql", true, true), stmtReleaseQueue: v("release.sql", true, false),
			stmtReleasePlain: v("release.sql", false, false), stmtExtend: v("extend.sql", true, true),
			stmtLookupKey: v("lookup_key.sql", true, true), stmtLookupID: v("lookup_id.sql", true, true),
			stmtLookupKeyPlain: v("lookup_key.sql", true, false), stmtLookupIDPlain: v("lookup_id.sql", true, false),
			stmtPlaceholder: v("placeholder.sql", true, true),
			stmtReleaseKeep: v("release_keep.sql", true, true), stmtReleaseKeepPlain: v("release_keep.sql", false, true),
		},
		cleanup:   v("cleanup.sql", true, true),
		list:      v("list.sql", true, true),
		listPlain: v("list.sql", true, false),
		lastFence: v("last_fence.sql", true, true),

		releaseOrphans: [2]string{v("release_orphans.sql", false, true), v("release_orphans.sql", true, true)},
	}
	renderFuncs(table, &st)
	return st
}

// stripComments drops a statement's "--" lines, which would fill
// pg_stat_activity's query text (1024 bytes) before the statement starts.
func stripComments(s string) string {
	var b strings.Builder
	for _, line := range strings.Split(s, "\n") {
		if t := strings.TrimSpace(line); t == "" || strings.HasPrefix(t, "--") {
			continue
		}
		b.WriteString(line)
		b.WriteByte('\n')
	}
	return strings.TrimSpace(b.String())
}

// SchemaSQL returns the DDL that SetupSchema runs, for migration tools
// (goose, golang-migrate, atlas, ...): idempotent (IF NOT EXISTS), the
// spec's schema exactly (the lock table with its primary key and indexes
// on lock_id and expires_at_ms, the fence counter table with key_debug),
// the waiters and holders tables, and the statement functions (each
// created when missing, named by a hash of their definition, so apply it
// again with each version; each function is one statement, a DO block
// with dollar-quoted bodies: a tool that splits a file at every ';', such
// as golang-migrate's x-multi-statement, must not). cfg may be nil for the
// defaults.
func SchemaSQL(cfg *Config) (string, error) {
	r, err := cfg.resolve()
	if err != nil {
		return "", err
	}
	ddl, _ := schemaDDL(r)
	return ddl, nil
}

// schemaDDL is SchemaSQL of r, and the statement functions in it.
func schemaDDL(r resolved) (string, []stmtfunc.Func) {
	fns := renderStatements(r.TableName, r.FenceTableName).fns
	return render("schema.sql", r.TableName, r.FenceTableName) + stmtfunc.DDL(fns), fns
}

// schemaLockID serializes concurrent SetupSchema calls (CREATE ... IF NOT
// EXISTS races on the catalog otherwise).
const schemaLockID = 0x73796e6367756172 // "syncguar"

// SetupSchema creates the tables, their indexes and the statement
// functions that do not exist, idempotent and safe to call concurrently;
// cfg may be nil for the default names. When all exist in the current
// schema it returns nil after one query, so a role without CREATE on the
// schema may call it then; when only this version's statement functions
// are missing (after an upgrade) and the role may not create them, it
// logs a warning (Config.Logger) and returns nil.
func SetupSchema(ctx context.Context, db *sql.DB, cfg *Config) error {
	const op = "setupSchema"
	r, err := cfg.resolve()
	if err != nil {
		err.(*Error).Op = op
		return err
	}
	if db == nil {
		return invalidArg(op, "db must not be nil")
	}
	if err := ctxErr(ctx, op); err != nil {
		return err
	}
	cl := classifier{dialect: r.Dialect, table: r.TableName, fenceTable: r.FenceTableName}
	if cl.dialect == nil {
		cl.dialect, _ = driver.Lookup(db.Driver())
	}
	// PostgreSQL checks CREATE on the schema before IF NOT EXISTS: look
	// first. No arguments here and below: the simple query protocol, which
	// prepares nothing, so this works behind a transaction-mode pooler.
	names := schemaNames(r.TableName, r.FenceTableName)
	var objects []string
	for _, k := range []string{"locks", "fences", "lock_id_index", "expires_index", "waiters", "waiters_id_index", "waiters_key_index", "holders", "holders_key_index"} {
		objects = append(objects, names[k])
	}
	ddl, fns := schemaDDL(r)
	tables := deploy.ExistsQuery(objects) + " AND " + deploy.ColumnCond(names["waiters"], "near")
	exists := func(q string) (bool, error) {
		res, err := db.ExecContext(ctx, q)
		if err != nil {
			return false, err
		}
		n, err := res.RowsAffected()
		return err == nil && n == 1, nil
	}
	all, err := exists(tables + " AND " + stmtfunc.Exist(fns))
	if err != nil || all {
		return wrapNil(cl, ctx, op, err)
	}
	// Only this version's statement functions missing (an upgrade): create
	// them alone, and a role that may not (42501) goes on without them,
	// warned (its statements sent unprepared are planned each time).
	only, err := exists(tables)
	if err != nil {
		return cl.wrap(ctx, op, err)
	}
	if only {
		ddl = stmtfunc.DDL(fns)
	}
	err = runDDL(ctx, db, ddl)
	if err == nil {
		return nil
	}
	e := cl.wrap(ctx, op, err)
	if who := deploy.SetupLockHolders(ctx, db, err); who != "" {
		e.Msg += ": " + who
	}
	switch {
	case e.SQLState == "42501" && only:
		r.Logger.Warn("syncguard: SetupSchema could not create this version's statement functions (the role lacks CREATE on the schema): statements sent unprepared (behind a transaction-mode pooler) are planned at each execution until a role that may runs SetupSchema (or applies SchemaSQL)",
			slog.String("table", r.TableName))
		return nil
	case e.SQLState == "42501":
		e.Msg = "insufficient privilege to create the lock tables: " + deploy.CreateGrantHint(ctx, db) +
			", or let the schema's owner run SetupSchema (or apply SchemaSQL in a migration)"
	}
	return e
}

// wrapNil is cl.wrap(err), or nil.
func wrapNil(cl classifier, ctx context.Context, op string, err error) error {
	if err == nil {
		return nil
	}
	return cl.wrap(ctx, op, err)
}

// runDDL runs ddl's statements in one transaction, serialized with other
// SetupSchema calls.
func runDDL(ctx context.Context, db *sql.DB, ddl string) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // no-op after Commit
	// The advisory lock waits at most deploy.SetupLockTimeout (another
	// setup, or any session holding the id: the error names it).
	if err := deploy.SetupLock(ctx, tx, int64(schemaLockID), deploy.SetupLockTimeout); err != nil {
		return err
	}
	// A table lock (adding a column to a waiters table in use) waits at
	// most this long: the fleet's statements on that table queue behind
	// the waiting ALTER. A timeout (55P03) is an error; run it again.
	if _, err := tx.ExecContext(ctx, "SET LOCAL lock_timeout = '10s'"); err != nil {
		return err
	}
	for _, stmt := range deploy.SplitStatements(ddl) {
		if _, err := tx.ExecContext(ctx, stmt); err != nil {
			return err
		}
	}
	return tx.Commit()
}

//go:generate go run ../tools/genschema ../schema.sql

// funcSigs are the signatures of fs, for doctor.Check.
func funcSigs(fs []stmtfunc.Func) []string {
	var out []string
	for _, f := range fs {
		out = append(out, f.Sig())
	}
	return out
}
