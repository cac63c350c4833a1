// Package classify is the one home of syncguard's error policy: which
// syncguard code an error from database/sql, a driver or a context stands
// for. Dialects (package driver) only report what an error looks like;
// every decision is made here, and docs/errors.md explains each one.
//
// It is internal so that package syncguard and the packages built on it
// (advisory, the CLI) classify their errors identically without exporting
// the classifier. Codes are the spec's LockError names as strings;
// package syncguard turns them into its Code type.
package classify

import (
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"regexp"
	"strings"
	"syscall"

	"github.com/syncguard/syncguard-go/driver"
)

// The codes, as syncguard.Code spells them.
const (
	ServiceUnavailable = "ServiceUnavailable"
	AuthFailed         = "AuthFailed"
	InvalidArgument    = "InvalidArgument"
	RateLimited        = "RateLimited"
	NetworkTimeout     = "NetworkTimeout"
	Aborted            = "Aborted"
	Internal           = "Internal"
)

// Result is the classification of one error.
type Result struct {
	Code     string
	SQLState string // as the dialect read it, "" if none
	Msg      string // what went wrong, in words
	Err      error  // the cause to wrap
}

// Context classifies a done ctx: Aborted when cancelled, NetworkTimeout
// when its deadline passed. cause, if not ctx's own error, is kept beside
// the context's cause. It returns false when ctx is not done.
func Context(ctx context.Context, cause error) (Result, bool) {
	if ctx.Err() == nil {
		return Result{}, false
	}
	r := Result{Code: Aborted, Msg: "context cancelled"}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		r.Code, r.Msg = NetworkTimeout, "context deadline exceeded"
	}
	ctxe := context.Cause(ctx)
	if cause != nil && !errors.Is(cause, ctx.Err()) {
		r.Err = fmt.Errorf("%w (driver: %w)", ctxe, CauseFirst(cause))
	} else {
		r.Err = ctxe
	}
	return r, true
}

// Error classifies err, an error from a database/sql call made with ctx,
// read through d (nil: only generic shapes are recognised). The context is
// checked first: lib/pq reports our own cancellation as SQLSTATE 57014,
// which would otherwise read as a server-side statement timeout. Result.Err
// is err, or an error that unwraps to it with the real cause first in its
// text (CauseFirst).
func Error(ctx context.Context, d driver.Dialect, err error) Result {
	if r, done := Context(ctx, err); done {
		return r
	}
	var info driver.ErrorInfo
	if d != nil {
		info = d.Inspect(err)
	}
	if info.SQLState == "" && badConnString(d, err) {
		return Result{Code: InvalidArgument, Msg: badConnStringMsg, Err: CauseFirst(err)}
	}
	code, msg := classify(err, info)
	return Result{Code: code, SQLState: info.SQLState, Msg: msg, Err: CauseFirst(err)}
}

// ConnStringReader is implemented by a dialect that can tell, among its
// driver's errors, those of a malformed connection string: lib/pq and pgx
// parse it only when the pool opens its first connection, not in
// sql.Open, so it surfaces at the first operation. (driver.ErrorInfo has
// no field for it; the adapters implement this method instead.)
type ConnStringReader interface {
	MalformedConnString(err error) bool
}

const badConnStringMsg = "malformed connection string: the driver could not parse the DSN the *sql.DB was opened with (a configuration error, not an outage)"

// badConnString reports whether err says the connection string could not
// be parsed: by d's reading, or a URL that net/url could not parse (a
// *url.Error is also a net.Error, which would otherwise read as an
// unreachable server).
func badConnString(d driver.Dialect, err error) bool {
	var ue *url.Error
	if errors.As(err, &ue) && ue.Op == "parse" {
		return true
	}
	r, ok := d.(ConnStringReader)
	return ok && r.MalformedConnString(err)
}

// classify maps a driver error onto a code. The order is the policy (see
// docs/errors.md): what the server said (its SQLSTATE, then its severity),
// then what the dialect saw on the client side, then the generic shapes of
// the standard library.
func classify(err error, info driver.ErrorInfo) (string, string) {
	if s := info.SQLState; s != "" {
		// PgBouncer reports its own authentication failures as 08P01
		// (protocol_violation, its code for every pooler error); only the
		// message tells them apart. There is no typed check for it.
		if s == "08P01" && strings.Contains(info.Message, "authentication failed") {
			return AuthFailed, "the pooler rejected the credentials"
		}
		// Likewise a database the pooler has no entry for (PgBouncer:
		// "no such database: x"): a configuration error, as 3D000 is.
		if s == "08P01" && strings.Contains(info.Message, "no such database") {
			return InvalidArgument, noDatabaseMsg + " (the pooler has no such database)"
		}
		if s == "42501" {
			return AuthFailed, privilegeMsg(info.Message, err)
		}
		// A standby reading an UNLOGGED table (the waiters' queues): "cannot
		// access temporary or unlogged relations during recovery". It is
		// 25006's case, a node that is or just became a standby (a client
		// that reached a demoted primary through HAProxy before its health
		// check moved), and comes before 25006 when a statement reads the
		// queue before it writes.
		if s == "0A000" && strings.Contains(info.Message, "during recovery") {
			return bySQLState["25006"].code, bySQLState["25006"].msg
		}
		if code, msg, ok := classifySQLState(s); ok {
			return code, msg
		}
	}
	switch info.Severity {
	case "FATAL", "PANIC":
		// The server ended the session for a reason not mapped above.
		return ServiceUnavailable, "the server ended the session"
	}
	switch {
	case info.Timeout:
		return NetworkTimeout, "timed out talking to PostgreSQL"
	case info.ConnBroken:
		return ServiceUnavailable, "connection to PostgreSQL failed"
	}
	var ne net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return NetworkTimeout, "timed out talking to PostgreSQL"
	case errors.Is(err, context.Canceled):
		return Aborted, "operation cancelled"
	case errors.Is(err, sqldriver.ErrBadConn), errors.Is(err, sql.ErrConnDone),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.EPIPE), errors.Is(err, net.ErrClosed):
		return ServiceUnavailable, "connection to PostgreSQL failed"
	case errors.As(err, &ne):
		return ServiceUnavailable, "network error"
	case errors.Is(err, sql.ErrTxDone):
		return InvalidArgument, "the transaction is already committed or rolled back"
	case err.Error() == "sql: database is closed": // database/sql has no exported sentinel
		return Internal, "the *sql.DB was closed (use after Close)"
	}
	return Internal, "unexpected error"
}

const noDatabaseMsg = "the database does not exist: the connection string names a database this server does not have (a configuration error, not an outage)"

// mapping is a code and the words for it.
type mapping struct{ code, msg string }

// bySQLState maps a SQLSTATE (five characters) or a class of them (its
// first two) onto a code; an exact SQLSTATE wins over its class.
// docs/errors.md says why each is what a caller acts on.
var bySQLState = map[string]mapping{
	"28000": {AuthFailed, "PostgreSQL rejected the credentials"},
	"28P01": {AuthFailed, "PostgreSQL rejected the credentials"},
	"42501": {AuthFailed, "insufficient privilege"}, // classify names the object (privilegeMsg)
	"53300": {RateLimited, "too many connections"},
	// out_of_memory: "out of shared memory", almost always the shared
	// lock table (every session's locks and advisory locks) being full.
	"53200": {ServiceUnavailable, "server out of shared memory: its lock table is full; raise max_locks_per_transaction (it sizes the table for every session) or find the sessions holding many locks (pg_locks)"},
	"57014": {NetworkTimeout, "statement cancelled by the server (statement_timeout)"},
	"55P03": {NetworkTimeout, "lock wait timed out (lock_timeout)"},
	"57P01": {ServiceUnavailable, "server shutting down, restarting or terminated the connection"},
	"57P02": {ServiceUnavailable, "server shutting down, restarting or terminated the connection"},
	"57P03": {ServiceUnavailable, "server shutting down, restarting or terminated the connection"},
	"40001": {ServiceUnavailable, "transaction conflict (serialization failure or deadlock)"},
	"40P01": {ServiceUnavailable, "transaction conflict (serialization failure or deadlock)"},
	// A node that is, or is becoming, a standby: after a failover, or
	// while the failover manager holds a node read-only during a
	// switchover. The next connection to the new primary succeeds.
	"25006": {ServiceUnavailable, "read-only transaction: the server is a standby or read-only during a failover; " +
		"retryable once connected to the new primary (use target_session_attrs=read-write in the DSN)"},
	// invalid_catalog_name: the DSN names a database the server does not
	// have. Retrying the same settings fails the same way: a configuration
	// error, not an outage.
	"3D000": {InvalidArgument, noDatabaseMsg},
	"25P02": {Internal, "the caller's transaction is aborted; roll it back"},
	"42P01": {Internal, "lock table missing: run syncguard.SetupSchema (or apply syncguard.SchemaSQL) first; if it exists, the role lacks USAGE on its schema (search_path skips such schemas) or search_path does not include it"},
	"42703": {Internal, "lock table has the wrong columns: it was not created by syncguard.SetupSchema"},
	"08":    {ServiceUnavailable, "connection exception"},
	"53":    {ServiceUnavailable, "server out of resources"},
	"22":    {InvalidArgument, "data exception"},
	"23":    {InvalidArgument, "integrity constraint violation"},
	"28":    {AuthFailed, "invalid authorization"},
}

// classifySQLState looks s up, then its class; ok is false for a SQLSTATE
// the table does not map (or a string that is not one).
func classifySQLState(s string) (code, msg string, ok bool) {
	if len(s) != 5 {
		return Internal, "", false
	}
	m, ok := bySQLState[s]
	if !ok {
		m, ok = bySQLState[s[:2]]
	}
	return m.code, m.msg, ok
}

// deniedRE finds the object in PostgreSQL's privilege errors: "permission
// denied for table x", "permission denied for schema y", "must be owner of
// table z".
var deniedRE = regexp.MustCompile(`(permission denied for|must be owner of) (table|relation|schema|sequence|function|database|view) ("(?:[^"]|"")+"|[^\s()]+)`)

// privilegeMsg says which object the role lacks a privilege on (42501),
// from the server's message; the caller adds what its operation needs.
func privilegeMsg(serverMsg string, err error) string {
	if serverMsg == "" {
		serverMsg = err.Error()
	}
	m := deniedRE.FindStringSubmatch(serverMsg)
	if m == nil {
		return "insufficient privilege"
	}
	if m[1] == "must be owner of" {
		return fmt.Sprintf("insufficient privilege: the role does not own %s %s", m[2], m[3])
	}
	return fmt.Sprintf("insufficient privilege: the role lacks a privilege on %s %s", m[2], m[3])
}
