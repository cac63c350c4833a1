package rwlock

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/syncguard/syncguard-go/driver"
	"github.com/syncguard/syncguard-go/internal/deploy"
	"github.com/syncguard/syncguard-go/internal/errwrap"
	"github.com/syncguard/syncguard-go/internal/rules"
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

// channelPrefix is the notification prefix of the read-write locks of
// lock table table: never the mutex's channels.
func channelPrefix(table string) string { return waiting.Prefix(table + "_rw") }

var (
	wakeChannelRE = regexp.MustCompile(`\{\{wake_channel\(([^()]*)\)\}\}`)
	wakePayloadRE = regexp.MustCompile(`\{\{wake_payload\(([^()]*)\)\}\}`)
)

// render expands an embedded statement file for lock table table.
func render(file, table string) string {
	b, err := sqlFiles.ReadFile("sql/" + file)
	if err != nil {
		panic(err) // embedded at build time
	}
	text := wakeChannelRE.ReplaceAllStringFunc(string(b), func(m string) string {
		return waiting.ChannelSQL(channelPrefix(table), wakeChannelRE.FindStringSubmatch(m)[1])
	})
	text = wakePayloadRE.ReplaceAllString(text, waiting.PayloadSQL("$1"))
	n := names(table)
	for k, v := range n {
		n[k] = rules.QuoteIdent(v)
	}
	n["waiter_gc"] = strconv.Itoa(waiterGCMs)
	out, err := rules.Render(text, n)
	if err != nil {
		panic("rwlock: sql/" + file + ": " + err.Error()) // embedded; TestRender renders every file
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

// SchemaSQL returns the DDL that SetupSchema runs, for migration tools:
// the read-write lock's tables ("<TableName>_rw", "<TableName>_rw_keys",
// "<TableName>_rw_waiters") with their indexes, and its SQL functions
// ("<TableName>_rw_acquire", "_rw_release", "_rw_grant", "_rw_hint",
// "_rw_lock").
// Idempotent (IF NOT EXISTS, CREATE OR REPLACE); statements are separated
// by a line ending in ";" followed by a blank line. cfg may be nil for the
// defaults; only TableName is read. The mutex's tables are not touched:
// run syncguard.SetupSchema for those.
func SchemaSQL(cfg *syncguard.Config) (string, error) {
	table, err := tableName("rwlock.schema", cfg)
	if err != nil {
		return "", err
	}
	return render("schema.sql", table) + "\n" + render("functions.sql", table), nil
}

// setupLockID serializes concurrent setups (CREATE ... races on the
// catalog otherwise).
const setupLockID = 0x72776c6f636b3031 // "rwlock01"

// SetupSchema creates the read-write lock's tables and functions,
// idempotent and safe to call concurrently. When all exist with the same
// function bodies it returns nil after one query, so a role without
// CREATE on the schema may call it then. Using the lock needs SELECT,
// INSERT, UPDATE and DELETE on the three tables and EXECUTE on the
// functions (PostgreSQL grants EXECUTE to PUBLIC by default).
func SetupSchema(ctx context.Context, db *sql.DB, cfg *syncguard.Config) error {
	const op = "rwlock.setupSchema"
	ddl, err := SchemaSQL(cfg)
	if err != nil {
		return err
	}
	if db == nil {
		return invalidArg(op, "db must not be nil")
	}
	if err := ctx.Err(); err != nil {
		return wrapSetup(ctx, op, db, cfg, err)
	}
	table, _ := tableName(op, cfg)
	n := names(table)
	var objects []string
	for _, k := range []string{"holders", "holders_id_index", "holders_key_index", "keys", "keys_index", "waiters", "waiters_id_index", "waiters_key_index"} {
		objects = append(objects, n[k])
	}
	var conds []string
	for _, f := range []string{"grant_fn", "hint_fn", "lock_fn", "acquire_fn", "release_fn"} {
		conds = append(conds, fmt.Sprintf(`EXISTS (SELECT 1 FROM pg_catalog.pg_proc AS p JOIN pg_catalog.pg_namespace AS s ON s.oid = p.pronamespace
  WHERE s.nspname = current_schema() AND p.proname = '%s' AND strpos(%s, p.prosrc) > 0)`, n[f], quoteLiteral(ddl)))
	}
	res, err := db.ExecContext(ctx, deploy.ExistsQuery(objects)+" AND "+strings.Join(conds, " AND "))
	if err != nil {
		return wrapSetup(ctx, op, db, cfg, err)
	}
	if k, err := res.RowsAffected(); err == nil && k == 1 {
		return nil
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return wrapSetup(ctx, op, db, cfg, err)
	}
	defer tx.Rollback() //nolint:errcheck // no-op after Commit
	if _, err := tx.ExecContext(ctx, fmt.Sprintf("SELECT pg_advisory_xact_lock(%d)", int64(setupLockID))); err != nil {
		return wrapSetup(ctx, op, db, cfg, err)
	}
	for _, stmt := range strings.Split(ddl, ";\n\n") {
		if strings.TrimSpace(stripComments(stmt)) == "" {
			continue
		}
		if _, err := tx.ExecContext(ctx, stmt); err != nil {
			return wrapSetup(ctx, op, db, cfg, err)
		}
	}
	return wrapSetup(ctx, op, db, cfg, tx.Commit())
}

func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

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
