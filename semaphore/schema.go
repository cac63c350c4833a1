package semaphore

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"embed"
	"encoding/hex"
	"fmt"
	"regexp"
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

// Tables returns the names of the semaphore's tables for the lock table
// table (syncguard.Config.TableName): keys, slots and waiters. They are a
// namespace of their own: a key used as a semaphore shares no row and no
// fence counter with the mutex of the same name.
func Tables(table string) (keys, slots, waiters string) {
	return table + "_sem", table + "_sem_slots", table + "_sem_waiters"
}

// names are the quoted table and index names of lock table table, by
// their placeholder in the statement files.
func names(table string) map[string]string {
	keys, slots, waiters := Tables(table)
	m := map[string]string{
		"sem": keys, "slots": slots, "waiters": waiters,
		"slots_id_index":    "idx_" + table + "_ssid",
		"waiters_id_index":  "idx_" + table + "_swid",
		"waiters_key_index": "idx_" + table + "_swkey",
	}
	for k, v := range m {
		m[k] = rules.QuoteIdent(v)
	}
	m["now_us"] = "floor(extract(epoch FROM statement_timestamp()) * 1000000)::bigint"
	m["waiter_gc"] = strconv.Itoa(waiterGCMs)
	m["rank_cap"] = strconv.Itoa(rankCap)
	return m
}

// waiterGCMs: a waiter's row dead this long goes at its key's next
// attempt. rankCap: a waiter's rank is counted up to it.
const (
	waiterGCMs = 60_000
	rankCap    = 64
)

var (
	wakeChannelRE = regexp.MustCompile(`\{\{wake_channel\(([^()]*)\)\}\}`)
	wakePayloadRE = regexp.MustCompile(`\{\{wake_payload\(([^()]*)\)\}\}`)
)

// channelPrefix is the notification channel prefix of the semaphores of
// lock table table: not the mutex's (waiting.Prefix(table)).
func channelPrefix(table string) string { return waiting.Prefix(table + "_sem") }

// render expands an embedded statement file for lock table table.
func render(name, table string) string {
	b, err := sqlFiles.ReadFile("sql/" + name)
	if err != nil {
		panic(err) // embedded at build time
	}
	text := wakeChannelRE.ReplaceAllStringFunc(string(b), func(m string) string {
		return waiting.ChannelSQL(channelPrefix(table), wakeChannelRE.FindStringSubmatch(m)[1])
	})
	text = wakePayloadRE.ReplaceAllString(text, waiting.PayloadSQL("$1"))
	out, err := rules.Render(text, names(table))
	if err != nil {
		panic("semaphore: sql/" + name + ": " + err.Error()) // embedded; TestRender renders every file
	}
	return out
}

// stripComments drops a statement's "--" lines and blank lines.
func stripComments(s string) string {
	var keep []string
	for _, line := range strings.Split(s, "\n") {
		if t := strings.TrimSpace(line); t != "" && !strings.HasPrefix(t, "--") {
			keep = append(keep, line)
		}
	}
	return strings.Join(keep, "\n")
}

// tableName is cfg's lock table, checked by syncguard's own rules
// (syncguard.SchemaSQL validates the configuration and does no I/O).
func tableName(op string, cfg *syncguard.Config) (string, error) {
	if _, err := syncguard.SchemaSQL(cfg); err != nil {
		if e, ok := err.(*syncguard.Error); ok {
			e.Op = op
		}
		return "", err
	}
	if cfg == nil || cfg.TableName == "" {
		return rules.DefaultTable, nil
	}
	return cfg.TableName, nil
}

// funcs are the statement functions of lock table table (see
// internal/stmtfunc): acquire.sql and release.sql, each run by a PL/pgSQL
// function planned once per server session, whatever the driver sends
// (lib/pq parses and plans an unnamed statement at every execution: 2-5 ms
// of server time for acquire.sql, more than its execution). Named after
// funcPrefix(table); the first line of each file lists its column types.
func funcs(table string) (acquire, release stmtfunc.Func) {
	mk := func(name string) stmtfunc.Func {
		returns, _ := strings.CutPrefix(strings.SplitN(render(name, table), "\n", 2)[0], "--returns ")
		f, err := stmtfunc.New(funcPrefix(table), returns, stripComments(render(name, table)))
		if err != nil {
			panic("semaphore: sql/" + name + ": " + err.Error()) // embedded; TestRender renders them
		}
		return f
	}
	return mk("acquire.sql"), mk("release.sql")
}

// funcPrefix names the statement functions of lock table table: "sem_"
// and a hash of the table's name (the longest table name leaves no room
// for it in PostgreSQL's 63 bytes).
func funcPrefix(table string) string {
	sum := sha256.Sum256([]byte(table))
	return "sem_" + hex.EncodeToString(sum[:8])
}

// SchemaSQL returns the DDL that SetupSchema runs, for migration tools:
// the semaphore's three tables (see Tables) and their indexes, idempotent
// (IF NOT EXISTS), with quoted identifiers, and its statement functions
// (each created when missing; statements end at a line ending in ";").
// Roles that use the semaphore need EXECUTE on them (PUBLIC has it by
// default; without it the statements are sent themselves). cfg may be nil for the
// defaults; only TableName is read. It does not create syncguard's own
// tables (syncguard.SchemaSQL).
func SchemaSQL(cfg *syncguard.Config) (string, error) {
	table, err := tableName("semaphore.schemaSQL", cfg)
	if err != nil {
		return "", err
	}
	a, r := funcs(table)
	return render("schema.sql", table) + stmtfunc.DDL([]stmtfunc.Func{a, r}), nil
}

// setupLockID serializes concurrent SetupSchema calls.
const setupLockID = 0x73656d6170686f72 // "semaphor"

// SetupSchema creates the semaphore's tables and indexes that do not
// exist, in one transaction under an advisory lock: idempotent and safe to
// call concurrently. Roles that use the semaphore need SELECT, INSERT,
// UPDATE and DELETE on the three tables.
func SetupSchema(ctx context.Context, db *sql.DB, cfg *syncguard.Config) error {
	const op = "semaphore.setupSchema"
	table, err := tableName(op, cfg)
	if err != nil {
		return err
	}
	ddl := render("schema.sql", table)
	a, r := funcs(table)
	if db == nil {
		return invalidArg(op, "db must not be nil")
	}
	var d driver.Dialect
	if cfg != nil {
		d = cfg.Dialect
	}
	if d == nil {
		d, _ = driver.Lookup(db.Driver())
	}
	if err := ctx.Err(); err != nil {
		return errwrap.Wrap(ctx, op, d, err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return errwrap.Wrap(ctx, op, d, err)
	}
	defer tx.Rollback() //nolint:errcheck // no-op after Commit
	if _, err := tx.ExecContext(ctx, fmt.Sprintf("SELECT pg_advisory_xact_lock(%d)", int64(setupLockID))); err != nil {
		return errwrap.Wrap(ctx, op, d, err)
	}
	stmts := strings.Split(stripComments(ddl), ";")
	for _, f := range []stmtfunc.Func{a, r} {
		stmts = append(stmts, f.DDL)
	}
	for _, stmt := range stmts {
		if stmt = strings.TrimSpace(stmt); stmt == "" {
			continue
		}
		if _, err := tx.ExecContext(ctx, stmt); err != nil {
			return errwrap.Wrap(ctx, op, d, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return errwrap.Wrap(ctx, op, d, err)
	}
	return nil
}

func invalidArg(op, msg string) *syncguard.Error {
	return &syncguard.Error{Op: op, Code: syncguard.CodeInvalidArgument, Msg: msg}
}
