// Package driver is the seam between syncguard's driver-free core and the
// database/sql drivers it runs on.
//
// The core speaks only database/sql. What differs between drivers is how their
// errors look: lib/pq reports a cancelled statement as SQLSTATE 57014 and a
// FATAL server error as driver.ErrBadConn, pgx wraps refused connections in
// *pgconn.ConnectError, and so on. A Dialect reads those shapes into an
// ErrorInfo (SQLSTATE, severity, server message, broken connection,
// timeout) and decides nothing: the core maps every ErrorInfo onto
// syncguard error codes in one place.
//
// Adapter packages (github.com/syncguard/syncguard-go/pq and .../pgxstd)
// register their Dialect in an init function, keyed by the type of the
// database/sql driver they serve, the way database/sql drivers register
// themselves. syncguard.New finds the dialect from db.Driver(); a dialect can
// also be passed explicitly in syncguard.Config, which is what a program that
// wraps the driver (for tracing, say) does.
package driver

import (
	sqldriver "database/sql/driver"
	"fmt"
	"reflect"
	"sort"
	"sync"
)

// ErrorInfo is a dialect's reading of one error: what it looks like, never
// what it means. The core (its classifier, see docs/errors.md) decides the
// syncguard code from these facts, so every adapter classifies alike.
//
// Authentication failures need no field of their own: PostgreSQL reports
// them as SQLSTATE class 28 (and PgBouncer as 08P01 with its message), in
// every driver.
type ErrorInfo struct {
	// SQLState is the five-character SQLSTATE the server sent, or "" when
	// the error did not come from the server.
	SQLState string
	// Severity is the server's severity, not localized: "ERROR", "FATAL"
	// or "PANIC" ("" when the error did not come from the server). FATAL
	// and PANIC end the session.
	Severity string
	// Message is the server's primary message ("" when the error did not
	// come from the server).
	Message string
	// ConnBroken is true when the driver says the connection failed or can
	// no longer be used, without a server error: refused, unreachable,
	// reset, closed, or driver.ErrBadConn.
	ConnBroken bool
	// Timeout is true when one of the driver's own deadlines (connect, read,
	// write) passed.
	Timeout bool
}

// Dialect describes one database/sql driver for PostgreSQL.
type Dialect interface {
	// Name is a short name for logs and messages, such as "lib/pq".
	Name() string
	// Inspect reads a driver error. It must not panic on any input and must
	// return the zero ErrorInfo for errors it does not recognise. It
	// reports facts only; it never maps an error onto a code.
	Inspect(err error) ErrorInfo
}

// OneShot is implemented by a Dialect whose driver sends a parameterized
// statement unprepared as one Parse/Bind/Execute/Sync batch (one round trip,
// no named statement left on the server) when the arguments start with
// OneShotArgs. syncguard runs its statements that way when prepared
// statements are off (Config.DisablePrepare, or a transaction-mode pooler
// detected); a pooler such as PgBouncer cannot split such a batch across
// server connections. Without OneShot, syncguard inlines the arguments as
// escaped SQL literals and sends the statement without arguments (the
// simple query protocol, also one round trip).
type OneShot interface {
	OneShotArgs() []any
}

// BackendPIDReader is implemented by a Dialect that can read, from a raw
// driver connection (the argument of sql.Conn.Raw's function), the backend
// process id announced at connection start (BackendKeyData). Behind a
// connection pooler such as PgBouncer that id is the pooler's own, not the
// server's pg_backend_pid(): syncguard compares the two once per Backend to
// detect a pooler before it relies on prepared statements. ok is false when
// the connection is not the driver's (a wrapped driver, say).
type BackendPIDReader interface {
	BackendPID(driverConn any) (pid int, ok bool)
}

var (
	mu       sync.RWMutex
	registry = map[reflect.Type]Dialect{}
)

// Register makes d the dialect for every *sql.DB whose Driver() has the same
// dynamic type as drv. It is meant to be called from an adapter's init
// function. Registering a second dialect for the same type panics, as
// sql.Register does for duplicate names.
func Register(drv sqldriver.Driver, d Dialect) {
	if drv == nil || d == nil {
		panic("syncguard/driver: Register with nil driver or dialect")
	}
	t := reflect.TypeOf(drv)
	mu.Lock()
	defer mu.Unlock()
	if old, dup := registry[t]; dup {
		panic(fmt.Sprintf("syncguard/driver: Register called twice for %v (%s and %s)", t, old.Name(), d.Name()))
	}
	registry[t] = d
}

// Lookup returns the dialect registered for drv's type.
func Lookup(drv sqldriver.Driver) (Dialect, bool) {
	if drv == nil {
		return nil, false
	}
	mu.RLock()
	defer mu.RUnlock()
	d, ok := registry[reflect.TypeOf(drv)]
	return d, ok
}

// Registered lists the names of the registered dialects, sorted.
func Registered() []string {
	mu.RLock()
	defer mu.RUnlock()
	names := make([]string, 0, len(registry))
	for _, d := range registry {
		names = append(names, d.Name())
	}
	sort.Strings(names)
	return names
}
