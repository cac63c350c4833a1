// Package pgxstd adapts syncguard to github.com/jackc/pgx/v5/stdlib, pgx
// used through database/sql.
//
// Importing it registers the dialect, so syncguard.New finds it from
// db.Driver() for any *sql.DB opened with sql.Open("pgx", dsn),
// stdlib.OpenDB or stdlib.OpenDBFromPool:
//
//	import _ "github.com/syncguard/syncguard-go/pgxstd"
//
// Dialect is also exported for Config.Dialect, for programs that wrap the
// driver.
package pgxstd

import (
	sqldriver "database/sql/driver"
	"errors"
	"net"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/syncguard/syncguard-go/driver"
)

func init() {
	driver.Register(stdlib.GetDefaultDriver(), Dialect)
}

// Dialect is pgx's syncguard dialect.
var Dialect driver.Dialect = dialect{}

type dialect struct{}

func (dialect) Name() string { return "pgx/v5/stdlib" }

// OneShotArgs makes pgx send a statement as one unnamed
// Parse/Bind/Describe/Execute/Sync batch (pgx.QueryExecModeExec), whatever
// the DSN's default_query_exec_mode: pgx's default, cache_statement, would
// prepare a named statement, which a transaction-mode pooler cannot route.
func (dialect) OneShotArgs() []any { return []any{pgx.QueryExecModeExec} }

// BackendPID returns the process id pgx read from the server's (or the
// pooler's) BackendKeyData.
func (dialect) BackendPID(driverConn any) (int, bool) {
	c, ok := driverConn.(*stdlib.Conn)
	if !ok || c.Conn() == nil || c.Conn().PgConn() == nil {
		return 0, false
	}
	return int(c.Conn().PgConn().PID()), true
}

// Inspect reads pgx's error shapes: *pgconn.PgError (SQLSTATE, severity,
// message), *pgconn.ConnectError (dial or startup failed; it may wrap a
// PgError such as 28P01, read first), pgconn.Timeout (a deadline or
// cancelled context ended the read), and pgconn.ErrConnClosed /
// SafeToRetry errors of a broken connection.
func (dialect) Inspect(err error) driver.ErrorInfo {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		sev := pe.SeverityUnlocalized // empty before PostgreSQL 9.6
		if sev == "" {
			sev = pe.Severity
		}
		return driver.ErrorInfo{SQLState: pe.Code, Severity: sev, Message: pe.Message}
	}
	var info driver.ErrorInfo
	var ce *pgconn.ConnectError
	var ne net.Error
	switch {
	case pgconn.Timeout(err), errors.As(err, &ne) && ne.Timeout():
		info.Timeout = true
	case errors.As(err, &ce), errors.Is(err, pgconn.ErrConnClosed), pgconn.SafeToRetry(err),
		errors.Is(err, sqldriver.ErrBadConn), errors.As(err, &ne):
		info.ConnBroken = true
	}
	return info
}

// MalformedConnString reports whether err is pgx's error for a connection
// string it could not parse (*pgconn.ParseConfigError). pgx parses the DSN
// of sql.Open("pgx", dsn) only when the pool opens its first connection,
// so the error arrives with the first operation; syncguard reports it as
// InvalidArgument, not as an unexpected (Internal) error.
func (dialect) MalformedConnString(err error) bool {
	var pe *pgconn.ParseConfigError
	return errors.As(err, &pe)
}
