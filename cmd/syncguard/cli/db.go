package cli

import (
	"cmp"
	"context"
	"database/sql"
	"log/slog"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/syncguard/syncguard-go/internal/rules"
	"github.com/syncguard/syncguard-go/pgxstd"
	"github.com/syncguard/syncguard-go/syncguard"
)

// applicationName is what pg_stat_activity shows for the command's
// sessions, unless the DSN or PGAPPNAME sets one.
const applicationName = "syncguard-cli"

// connSource says where the connection settings came from, for messages.
func (a *app) connSource() (dsn, source string) {
	if a.dsn != "" {
		return a.dsn, "--dsn"
	}
	if v := a.getenv("DATABASE_URL"); v != "" {
		return v, "DATABASE_URL"
	}
	return "", "PG* environment variables"
}

// open returns a *sql.DB on pgx. It does no I/O. An unparsable DSN is a
// usage error. By default (--no-prepare) pgx sends every statement
// unprepared, in one round trip all the same, instead of caching named
// prepared statements that a pooler in transaction mode routes to sessions
// that never saw them (26000, 42P05): a few statements per command gain
// nothing worth that. So does a default_query_exec_mode without named
// statements in the connection string.
func (a *app) open() (*sql.DB, error) { return a.openMode(a.noPrepare) }

func (a *app) openMode(unnamed bool) (*sql.DB, error) {
	dsn, source := a.connSource()
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, usageErr("invalid connection settings (from %s): %v", source, err)
	}
	if _, err := pgx.ParseConfig(a.getenv("SYNCGUARD_NOTIFY_DSN")); err != nil {
		return nil, usageErr("invalid SYNCGUARD_NOTIFY_DSN: %v", err)
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = a.timeout
	}
	if _, ok := cfg.RuntimeParams["application_name"]; !ok {
		cfg.RuntimeParams["application_name"] = applicationName
	}
	named := cfg.DefaultQueryExecMode == pgx.QueryExecModeCacheStatement || cfg.DefaultQueryExecMode == pgx.QueryExecModeCacheDescribe
	switch {
	case unnamed && named:
		cfg.DefaultQueryExecMode = pgx.QueryExecModeExec
	case !named:
		a.dsnNoPrepare = true
	}
	db := stdlib.OpenDB(*cfg)
	db.SetMaxOpenConns(4)
	db.SetMaxIdleConns(4)
	return db, nil
}

// prepares reports whether the command uses named prepared statements:
// only with --no-prepare=false and a connection string that leaves pgx's
// statement cache on.
func (a *app) prepares() bool { return !a.noPrepare && !a.dsnNoPrepare }

// config is the syncguard configuration from the global flags, and
// SYNCGUARD_NOTIFY_DSN's pool for notifications (checked by open).
func (a *app) config() *syncguard.Config {
	c := &syncguard.Config{
		TableName: a.table, FenceTableName: a.fenceTable,
		DisablePrepare: !a.prepares(),
		Dialect:        pgxstd.Dialect,
		Logger:         slog.New(&lineHandler{a: a}),
	}
	if dsn := a.getenv("SYNCGUARD_NOTIFY_DSN"); dsn != "" {
		if n, err := pgx.ParseConfig(dsn); err == nil { // a bad one is open's usage error
			c.NotifyDB = stdlib.OpenDB(*n)
		}
	}
	return c
}

// session opens the backend for a command that runs a few operations: ctx
// is bounded by --timeout, and done closes both.
func (a *app) session() (ctx context.Context, b *syncguard.Backend, done func(), err error) {
	db, b, err := a.backend()
	if err != nil {
		return nil, nil, nil, err
	}
	ctx, cancel := a.ctx()
	return ctx, b, func() { cancel(); db.Close() }, nil
}

// backend opens the database and a Backend on it. Bad table names are
// usage errors, before any I/O.
func (a *app) backend() (*sql.DB, *syncguard.Backend, error) {
	if _, err := syncguard.SchemaSQL(a.config()); err != nil {
		return nil, nil, err
	}
	db, err := a.open()
	if err != nil {
		return nil, nil, err
	}
	b, err := syncguard.New(db, a.config())
	if err != nil {
		db.Close()
		return nil, nil, err
	}
	a.db = db
	return db, b, nil
}

// lineHandler is a slog.Handler printing the library's warnings on stderr,
// one line each: "syncguard: CMD: msg (k=v ...)".
type lineHandler struct {
	a     *app
	attrs []slog.Attr
}

func (h *lineHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }

// waitFallbackMsg begins the library's warning that waiting polls, as run
// expects behind PgBouncer in transaction mode: not worth a line in every
// cron mail (TestThroughPgBouncer).
const waitFallbackMsg = "syncguard: waiting falls back to polling"

func (h *lineHandler) Handle(_ context.Context, r slog.Record) error {
	if strings.HasPrefix(r.Message, waitFallbackMsg) {
		return nil
	}
	msg := strings.TrimPrefix(r.Message, "syncguard: ")
	code, cause := strings.ToLower(r.Level.String()), ""
	var kv []string
	add := func(at slog.Attr) bool {
		switch at.Key {
		case "keyHash": // the user gave the key on the command line
		case "code":
			code = at.Value.String()
		case "error":
			// "syncguard: extend lock#... Code: cause": keep the cause.
			cause = at.Value.String()
			if _, c, ok := strings.Cut(cause, " "+code+": "); ok {
				cause = c
			}
		default:
			kv = append(kv, at.Key+"="+at.Value.String())
		}
		return true
	}
	for _, at := range h.attrs {
		add(at)
	}
	r.Attrs(add)
	if len(kv) > 0 {
		msg += " (" + strings.Join(kv, " ") + ")"
	}
	if cause != "" {
		msg += ": " + cause
	}
	h.a.errorf(code, "%s", msg)
	return nil
}

func (h *lineHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &lineHandler{a: h.a, attrs: append(append([]slog.Attr(nil), h.attrs...), as...)}
}

func (h *lineHandler) WithGroup(string) slog.Handler { return h }

// tableNames returns the resolved table names.
func (a *app) tableNames() (locks, fences string) {
	return cmp.Or(a.table, rules.DefaultTable), cmp.Or(a.fenceTable, rules.DefaultFenceTable)
}
