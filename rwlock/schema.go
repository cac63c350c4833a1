package rwlock

import (
	"context"
	"database/sql"
	"embed"
	"strconv"

	"github.com/syncguard/syncguard-go/internal/kit"
	"github.com/syncguard/syncguard-go/internal/waiting"
	"github.com/syncguard/syncguard-go/syncguard"
)

//go:embed sql/*.sql
var sqlFiles embed.FS

// waiterGCMs: a waiter's row dead this long goes at its key's next
// operation (the mutex's value).
const waiterGCMs = 60_000

// Names returns the tables, indexes and functions of the read-write lock
// of lock table table, by their placeholder in the statement files,
// unquoted: "<table>_rw" (leases), "<table>_rw_keys" (writer fences),
// "<table>_rw_waiters" (the queue) and the functions "<table>_rw_*".
func names(table string) map[string]string {
	return map[string]string{
		"holders":           table + "_rw",
		"holders_id_index":  "idx_" + table + "_rwid",
		"holders_key_index": "idx_" + table + "_rwkey",
		"keys":              table + "_rw_keys",
		"keys_index":        "idx_" + table + "_rwfkey",
		"waiters":           table + "_rw_waiters",
		"waiters_id_index":  "idx_" + table + "_rwwid",
		"waiters_key_index": "idx_" + table + "_rwwkey",
		"grant_fn":          table + "_rw_grant",
		"hint_fn":           table + "_rw_hint",
		"lock_fn":           table + "_rw_lock",
		"acquire_fn":        table + "_rw_acquire",
		"release_fn":        table + "_rw_release",
	}
}

// schema is the read-write lock's SQL.
var schema = &kit.Schema{Kind: "rwlock", Files: sqlFiles, Names: names, DDL: []string{"schema.sql", "functions.sql"},
	Values: map[string]string{"waiter_gc": strconv.Itoa(waiterGCMs)}, Channel: channelPrefix,
	LockID: 0x72776c6f636b3031} // "rwlock01"

// channelPrefix is the notification prefix of the read-write locks of
// lock table table: never the mutex's channels.
func channelPrefix(table string) string { return waiting.Prefix(table + "_rw") }

func render(file, table string) string { return schema.Render(file, table) }

var (
	stripComments = kit.StripComments
	tableName     = kit.TableName
)

// SchemaSQL returns the DDL that SetupSchema runs, for migration tools:
// the read-write lock's tables ("<TableName>_rw", "<TableName>_rw_keys",
// "<TableName>_rw_waiters") with their indexes, and its SQL functions
// ("<TableName>_rw_acquire", "_rw_release", "_rw_grant", "_rw_hint",
// "_rw_lock").
// Idempotent (IF NOT EXISTS, CREATE OR REPLACE); statements are separated
// by a line ending in ";" followed by a blank line. cfg may be nil for the
// defaults; only TableName is read. The mutex's tables are not touched:
// run syncguard.SetupSchema for those.
func SchemaSQL(cfg *syncguard.Config) (string, error) { return schema.SQL("rwlock.schema", cfg) }

// SetupSchema creates the read-write lock's tables and functions,
// idempotent and safe to call concurrently. When all exist with the same
// function bodies it returns nil after one query, so a role without
// CREATE on the schema may call it then. Using the lock needs SELECT,
// INSERT, UPDATE and DELETE on the three tables and EXECUTE on the
// functions (PostgreSQL grants EXECUTE to PUBLIC by default).
func SetupSchema(ctx context.Context, db *sql.DB, cfg *syncguard.Config) error {
	return schema.Setup(ctx, db, cfg)
}
