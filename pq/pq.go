// Package pq adapts syncguard to github.com/lib/pq.
//
// Open the pool with this package's NewConnector, which gives syncguard the
// DSN once:
//
//	import sgpq "github.com/syncguard/syncguard-go/pq"
//
//	connector, err := sgpq.NewConnector(dsn)
//	...
//	db := sql.OpenDB(connector)
//	locks, err := syncguard.New(db, nil)
//
// syncguard.New finds the dialect from db.Driver(), and with a Connector's
// pool it is one that can LISTEN: callers of Lock and WithLock waiting for a
// contended key are woken the moment it is released.
//
// Importing the package also registers lib/pq's plain Dialect, which
// syncguard.New finds for a *sql.DB opened with sql.Open("postgres", dsn)
// or sql.OpenDB of lib/pq's own connector. lib/pq gives no way to learn
// such a pool's DSN, so its waiters poll (correct, slower hand-offs) unless
// Config.Dialect is ListenDialect(dsn).
//
// Dialect and ListenDialect are exported for Config.Dialect, for programs
// that wrap the driver.
package pq

import (
	sqldriver "database/sql/driver"
	"errors"
	"net"
	"reflect"
	"strings"

	"github.com/lib/pq"

	"github.com/syncguard/syncguard-go/driver"
)

func init() {
	driver.Register(&pq.Driver{}, Dialect)
}

// Dialect is lib/pq's syncguard dialect.
var Dialect driver.Dialect = dialect{}

type dialect struct{}

func (dialect) Name() string { return "lib/pq" }

// BackendPID returns the process id lib/pq read from the server's (or the
// pooler's) BackendKeyData. lib/pq keeps it unexported (conn.pid), so it is
// read by reflection; ok is false when the field is not there (another
// lib/pq version, a wrapped driver), and pooler detection then relies on
// the errors a pooler causes.
func (dialect) BackendPID(driverConn any) (pid int, ok bool) {
	v := reflect.ValueOf(driverConn)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct ||
		v.Elem().Type().PkgPath() != reflect.TypeOf(pq.Driver{}).PkgPath() {
		return 0, false
	}
	f := v.Elem().FieldByName("pid")
	if !f.IsValid() || f.Kind() != reflect.Int {
		return 0, false
	}
	return int(f.Int()), true
}

// Inspect reads lib/pq's error shapes:
//   - *pq.Error carries the SQLSTATE, severity and message (lib/pq keeps
//     only the localized severity; with lc_messages other than English a
//     FATAL reads differently, and the core then falls back to the
//     SQLSTATE and the broken connection that follows). Our own context
//     cancellation also arrives as 57014; syncguard checks the context
//     before the SQLSTATE.
//   - after a FATAL error or a broken socket, lib/pq marks the connection bad
//     and later calls return driver.ErrBadConn.
//   - dial failures are *net.OpError (refused, unreachable) or timeouts.
//   - with target_session_attrs, a host that is no primary is refused with a
//     plain error ("server is in hot standby mode", "session is
//     read-only"), joined under "could not connect to any of the hosts"
//     when no host qualifies, as during a failover: no connection to a
//     primary, like a refused dial.
func (dialect) Inspect(err error) driver.ErrorInfo {
	var pe *pq.Error
	if errors.As(err, &pe) {
		return driver.ErrorInfo{SQLState: string(pe.Code), Severity: pe.Severity, Message: pe.Message}
	}
	var info driver.ErrorInfo
	var ne net.Error
	switch {
	case errors.As(err, &ne) && ne.Timeout():
		info.Timeout = true
	case errors.Is(err, sqldriver.ErrBadConn), errors.As(err, &ne):
		info.ConnBroken = true
	case strings.Contains(err.Error(), "server is in hot standby mode"), strings.Contains(err.Error(), "session is read-only"):
		info.ConnBroken = true
	}
	return info
}

// connStringErrors are in lib/pq's errors for a connection string it
// could not parse (its parser returns plain errors, nothing typed, so they
// are found by their text); a URL that net/url cannot parse is a
// *url.Error, which syncguard recognises itself.
var connStringErrors = []string{
	`missing "=" after `,
	"missing character after backslash",
	"unterminated quoted string literal in connection string",
	"invalid connection protocol: ",
	"pq: wrong value for ",
	"pq: could not match ",
	"pq: unsupported client_encoding ",
	"pq: unsupported datestyle ",
	"pq: min_protocol_version ",
	"pq: environment variable $",
	"pq: unknown setting ",
}

// MalformedConnString reports whether err is lib/pq's error for a
// connection string it could not parse. lib/pq parses the DSN of
// sql.Open("postgres", dsn) only when the pool opens its first connection,
// so the error arrives with the first operation; syncguard reports it as
// InvalidArgument, not as an unexpected (Internal) error. lib/pq's parser
// returns untyped errors, so they are told by the beginning of their text.
func (dialect) MalformedConnString(err error) bool {
	var pe *pq.Error
	var ne net.Error
	if err == nil || errors.As(err, &pe) || errors.As(err, &ne) {
		return false
	}
	msg := err.Error()
	for _, p := range connStringErrors {
		if strings.Contains(msg, p) {
			return true
		}
	}
	return false
}
