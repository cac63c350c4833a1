package semaphore

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"embed"
	"encoding/hex"
	"strconv"
	"strings"

	"github.com/syncguard/syncguard-go/internal/kit"
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

// names are the semaphore's tables and indexes for lock table table,
// unquoted, by their placeholder in the statement files.
func names(table string) map[string]string {
	keys, slots, waiters := Tables(table)
	return map[string]string{
		"sem": keys, "slots": slots, "waiters": waiters,
		"slots_id_index":    "idx_" + table + "_ssid",
		"waiters_id_index":  "idx_" + table + "_swid",
		"waiters_key_index": "idx_" + table + "_swkey",
	}
}

// waiterGCMs: a waiter's row dead this long goes at its key's next
// attempt. rankCap: a waiter's rank is counted up to it.
const (
	waiterGCMs = 60_000
	rankCap    = 64
)

// schema is the semaphore's SQL.
var schema = &kit.Schema{Kind: "semaphore", Files: sqlFiles, Names: names, DDL: []string{"schema.sql"},
	Values:  map[string]string{"now_us": kit.NowUS, "waiter_gc": strconv.Itoa(waiterGCMs), "rank_cap": strconv.Itoa(rankCap)},
	Channel: channelPrefix, LockID: 0x73656d6170686f72} // "semaphor"

// The statement functions follow the tables.
func init() {
	schema.More = func(table string) (string, string) {
		a, r := funcs(table)
		fns := []stmtfunc.Func{a, r}
		return stmtfunc.DDL(fns), stmtfunc.Exist(fns)
	}
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

// channelPrefix is the notification channel prefix of the semaphores of
// lock table table: not the mutex's (waiting.Prefix(table)).
func channelPrefix(table string) string { return waiting.Prefix(table + "_sem") }

func render(name, table string) string { return schema.Render(name, table) }

var (
	stripComments = kit.StripComments
	tableName     = kit.TableName
	invalidArg    = kit.InvalidArg
)

// SchemaSQL returns the DDL that SetupSchema runs, for migration tools:
// the semaphore's three tables (see Tables) and their indexes, idempotent
// (IF NOT EXISTS), with quoted identifiers, and its statement functions
// (each created when missing; statements end at a line ending in ";").
// Roles that use the semaphore need EXECUTE on them (PUBLIC has it by
// default; without it the statements are sent themselves). cfg may be nil for the
// defaults; only TableName is read. It does not create syncguard's own
// tables (syncguard.SchemaSQL).
func SchemaSQL(cfg *syncguard.Config) (string, error) {
	return schema.SQL("semaphore.schemaSQL", cfg)
}

// SetupSchema creates the semaphore's tables and indexes that do not
// exist, in one transaction under an advisory lock: idempotent and safe to
// call concurrently; when all exist, one query and no lock. Roles that use
// the semaphore need SELECT, INSERT, UPDATE and DELETE on the three tables.
func SetupSchema(ctx context.Context, db *sql.DB, cfg *syncguard.Config) error {
	return schema.Setup(ctx, db, cfg)
}
