package semaphore

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"embed"
	"encoding/hex"

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
		"sem": keys, "slots": slots, "waiters": waiters, "leases": slots,
		"slots_id_index":    "idx_" + table + "_ssid",
		"waiters_id_index":  "idx_" + table + "_swid",
		"waiters_key_index": "idx_" + table + "_swkey",
	}
}

// schema is the semaphore's SQL.
var schema = &kit.Schema{Kind: "semaphore", Files: sqlFiles, Names: names, DDL: []string{"schema.sql"},
	Channel: channelPrefix, LockID: 0x73656d6170686f72} // "semaphor"

// The statement functions follow the tables.
func init() {
	schema.Funcs = func(table string) []stmtfunc.Func { a, r := funcs(table); return []stmtfunc.Func{a, r} }
}

// funcs are the statement functions of lock table table (see
// internal/stmtfunc): acquire.sql and release.sql, each run by a PL/pgSQL
// function planned once per server session, whatever the driver sends
// (lib/pq parses and plans an unnamed statement at every execution: 2-5 ms
// of server time for acquire.sql, more than its execution). Named after
// funcPrefix(table); the first line of each file lists its column types.
func funcs(table string) (acquire, release stmtfunc.Func) {
	return schema.Func(funcPrefix(table), "", "acquire.sql", table, nil), schema.Func(funcPrefix(table), "", "release.sql", table, nil)
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

// SchemaSQL returns the DDL that SetupSchema runs, for migration tools:
// the semaphore's three tables (Tables) and their indexes, idempotent,
// and its statement functions (created when missing), which roles that
// use it may EXECUTE (PUBLIC's by default; else the statements are sent
// themselves). cfg may be nil for the defaults; only TableName is read.
func SchemaSQL(cfg *syncguard.Config) (string, error) { return schema.SQL("semaphore.schemaSQL", cfg) }

// SetupSchema creates the semaphore's tables, indexes and functions
// (kit.Schema.Setup: idempotent, safe to call concurrently, one query
// when all exist). Roles that use the semaphore need SELECT, INSERT,
// UPDATE and DELETE on the three tables.
func SetupSchema(ctx context.Context, db *sql.DB, cfg *syncguard.Config) error {
	return schema.Setup(ctx, db, cfg)
}

// TableName reports the lock table name (syncguard.Config.TableName,
// resolved) that s's tables are named from (Tables).
func (s *Semaphore) TableName() string { return s.k.Table }
