package kit

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"
	"regexp"
	"strings"

	"github.com/syncguard/syncguard-go/driver"
	"github.com/syncguard/syncguard-go/internal/deploy"
	"github.com/syncguard/syncguard-go/internal/errwrap"
	"github.com/syncguard/syncguard-go/internal/rules"
	"github.com/syncguard/syncguard-go/internal/stmtfunc"
	"github.com/syncguard/syncguard-go/internal/waiting"
	"github.com/syncguard/syncguard-go/syncguard"
)

// Schema is one lock kind's SQL: its embedded statement files, the names
// they use, and how they are set up.
type Schema struct {
	Kind  string // "semaphore": the kind's ops ("semaphore.setupSchema") and panics
	Files fs.FS  // the kind's sql/*.sql
	// Names returns the kind's tables, indexes and functions for a lock
	// table, unquoted, by their placeholder in the files.
	Names func(table string) map[string]string
	// Values are SQL fragments by placeholder, inserted as they are.
	Values map[string]string
	// Channel returns the notification channel prefix of a lock table's
	// locks of this kind ({{wake_channel(expr)}} in the files).
	Channel func(table string) string
	DDL     []string // the files that make SchemaSQL, in order
	LockID  int64    // the advisory lock that serializes setups
	// More, if set, returns DDL to append for a lock table (statement
	// functions: internal/stmtfunc) and the condition that it is in place.
	More func(table string) (ddl, exists string)
	// With, if set, returns more values for the DDL of a lock table.
	With func(table string) map[string]string
	// Funcs, if set, returns the statement functions of a lock table
	// (internal/stmtfunc), created after the DDL files.
	Funcs func(table string) []stmtfunc.Func
}

// The values every kind's statement files may use: now_us, the
// statement's server time in µs (a waiter's place); waiter_gc, how long
// (ms) a waiter's row stays dead before its key's next operation removes
// it (the mutex's value); rank_cap, up to where a waiter's rank is
// counted.
var queueValues = map[string]string{"now_us": "floor(extract(epoch FROM statement_timestamp()) * 1000000)::bigint", "waiter_gc": "60000", "rank_cap": "64"}

// Render expands the statement file name for lock table table: quoted
// names, values, and the {{sql(file)}}, {{wake_channel(expr)}} and
// {{wake_payload(expr)}} calls.
func (s *Schema) Render(name, table string) string { return s.RenderWith(name, table, nil) }

// RenderWith is Render with more values, by placeholder.
func (s *Schema) RenderWith(name, table string, values map[string]string) string {
	b, err := fs.ReadFile(s.Files, "sql/"+name)
	if err != nil {
		panic(err) // embedded at build time
	}
	text := replaceCalls(string(b), "sql", s.fragment)
	if s.Channel != nil {
		prefix := s.Channel(table)
		text = replaceCalls(text, "wake_channel", func(arg string) string { return waiting.ChannelSQL(prefix, arg) })
	}
	text = replaceCalls(text, "wake_payload", waiting.PayloadSQL)
	n := s.Names(table)
	for k, v := range n {
		n[k] = rules.QuoteIdent(v)
	}
	for k, v := range queueValues {
		n[k] = v
	}
	for k, v := range s.Values {
		n[k] = v
	}
	for k, v := range values {
		n[k] = v
	}
	out, err := rules.Render(text, n)
	if err != nil {
		panic(s.Kind + ": sql/" + name + ": " + err.Error()) // embedded; each kind's TestRender renders every file
	}
	return out
}

// kitFiles are the parts of statement files that the kinds share
// ({{sql(kit/name)}}).
//
//go:embed sql/*.sql
var kitFiles embed.FS

// fragment is the statement file name (kit/name: the kit's) as
// {{sql(name)}} inserts it: a part that several statements share, from
// its first line that is not a comment, without its last newline.
func (s *Schema) fragment(name string) string {
	files := s.Files
	if n, ok := strings.CutPrefix(name, "kit/"); ok {
		files, name = kitFiles, n
	}
	b, err := fs.ReadFile(files, "sql/"+name)
	if err != nil {
		panic(s.Kind + ": {{sql(" + name + ")}}: " + err.Error()) // embedded; each kind's TestRender renders every file
	}
	text := string(b)
	for strings.HasPrefix(text, "--") {
		_, text, _ = strings.Cut(text, "\n")
	}
	return strings.TrimSuffix(text, "\n")
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
		text = text[:i] + f(text[i+len(open):i+j]) + text[i+j+3:]
	}
}

// SQL returns the kind's DDL for cfg's lock table (cfg checked by
// syncguard's rules; op names the call in an error).
func (s *Schema) SQL(op string, cfg *syncguard.Config) (string, error) {
	table, err := TableName(op, cfg)
	if err != nil {
		return "", err
	}
	var parts []string
	var with map[string]string
	if s.With != nil {
		with = s.With(table)
	}
	for _, f := range s.DDL {
		parts = append(parts, s.RenderWith(f, table, with))
	}
	if s.More != nil {
		if more, _ := s.More(table); more != "" {
			parts = append(parts, more)
		}
	}
	if s.Funcs != nil {
		parts = append(parts, stmtfunc.DDL(s.Funcs(table)))
	}
	return strings.Join(parts, "\n"), nil
}

// Setup creates the kind's tables, indexes and functions, idempotent and
// safe to call concurrently. When all exist (the functions with the same
// bodies) it returns after that one query, whoever holds the setup's
// advisory lock, so a role without CREATE may call it then. Otherwise it
// runs the DDL in one transaction under the advisory lock, waiting at
// most lockTimeout for it.
func (s *Schema) Setup(ctx context.Context, db *sql.DB, cfg *syncguard.Config) error {
	op := s.Kind + ".setupSchema"
	ddl, err := s.SQL(op, cfg)
	if err != nil {
		return err
	}
	if db == nil {
		return InvalidArg(op, "db must not be nil")
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
	if err := ctx.Err(); err != nil {
		return wrap(err)
	}
	var objects, conds []string
	for _, m := range createdRE.FindAllStringSubmatch(ddl, -1) {
		name := strings.ReplaceAll(strings.Trim(m[2], `"`), `""`, `"`)
		if m[1] != "OR REPLACE FUNCTION" {
			objects = append(objects, name)
			continue
		}
		conds = append(conds, fmt.Sprintf(` AND EXISTS (SELECT 1 FROM pg_catalog.pg_proc AS p JOIN pg_catalog.pg_namespace AS s ON s.oid = p.pronamespace
  WHERE s.nspname = current_schema() AND p.proname = %s AND strpos(%s, p.prosrc) > 0)`, quoteLiteral(name), quoteLiteral(ddl)))
	}
	table, _ := TableName(op, cfg)
	if s.More != nil {
		if _, exists := s.More(table); exists != "" {
			conds = append(conds, " AND "+exists)
		}
	}
	if s.Funcs != nil {
		if exists := stmtfunc.Exist(s.Funcs(table)); exists != "" {
			conds = append(conds, " AND "+exists)
		}
	}
	res, err := db.ExecContext(ctx, strings.TrimSuffix(deploy.ExistsQuery(objects), " AND ")+strings.Join(conds, ""))
	if err != nil {
		return wrap(err)
	}
	if k, err := res.RowsAffected(); err == nil && k == 1 {
		return nil
	}
	return RunDDL(ctx, op, db, d, s.LockID, ddl)
}

// RunDDL runs the statements of ddl (Statements) in one transaction under
// the advisory lock lockID, waiting at most lockTimeout for it; errors
// are op's, read by d.
func RunDDL(ctx context.Context, op string, db *sql.DB, d driver.Dialect, lockID int64, ddl string) error {
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
	if err := deploy.SetupLock(ctx, tx, lockID, lockTimeout); err != nil {
		e := errwrap.Wrap(ctx, op, d, err)
		if who := deploy.SetupLockHolders(ctx, db, err); who != "" {
			e.Msg += ": " + who
		}
		return e
	}
	for _, stmt := range Statements(ddl) {
		if _, err := tx.ExecContext(ctx, stmt); err != nil {
			return wrap(err)
		}
	}
	return wrap(tx.Commit())
}

// createdRE finds what the DDL creates: tables, indexes and functions.
var createdRE = regexp.MustCompile(`(?m)^CREATE (?:UNIQUE |UNLOGGED )?(TABLE|INDEX|OR REPLACE FUNCTION) (?:IF NOT EXISTS )?("(?:[^"]|"")+")`)

// lockTimeout bounds a setup's wait for its advisory lock and the
// catalog's locks (another setup, or a session holding the id).
const lockTimeout = deploy.SetupLockTimeout

// Statements splits DDL into its statements, without comments: a
// statement ends with a line ending in ";" outside a $fn$ body.
func Statements(ddl string) []string {
	var out, cur []string
	body := false
	for _, line := range strings.Split(ddl, "\n") {
		t := strings.TrimSpace(line)
		if !body && (t == "" || strings.HasPrefix(t, "--")) {
			continue // (a function's body is kept whole: setup compares it)
		}
		cur = append(cur, line)
		if strings.Count(line, "$fn$")%2 == 1 {
			body = !body
		}
		if i := strings.Index(t, "--"); i >= 0 {
			t = strings.TrimSpace(t[:i]) // a comment after the code
		}
		if !body && strings.HasSuffix(t, ";") {
			out = append(out, strings.Join(cur, "\n"))
			cur = nil
		}
	}
	if len(cur) > 0 {
		out = append(out, strings.Join(cur, "\n"))
	}
	return out
}

// StripComments drops a statement's "--" lines and blank lines (inlined
// arguments must not meet a quote in a comment).
func StripComments(s string) string {
	var keep []string
	for _, line := range strings.Split(s, "\n") {
		if t := strings.TrimSpace(line); t != "" && !strings.HasPrefix(t, "--") {
			keep = append(keep, line)
		}
	}
	return strings.Join(keep, "\n")
}

func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// TableName is cfg's lock table (nil: the default), checked by
// syncguard's own rules (syncguard.SchemaSQL validates the configuration
// and does no I/O); op names the call in an error.
func TableName(op string, cfg *syncguard.Config) (string, error) {
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

// Func is the statement function named after prefix (stmtfunc.NewLocked,
// with lock: "" for none) of the statement file name rendered for table
// with values, whose first line lists its column types ("--returns text,
// bigint").
func (s *Schema) Func(prefix, lock, name, table string, values map[string]string) stmtfunc.Func {
	text := s.RenderWith(name, table, values)
	returns, _ := strings.CutPrefix(strings.SplitN(text, "\n", 2)[0], "--returns ")
	f, err := stmtfunc.NewLocked(prefix, returns, lock, StripComments(text))
	if err != nil {
		panic(s.Kind + ": sql/" + name + ": " + err.Error()) // embedded; each kind's TestRender renders every file
	}
	return f
}
