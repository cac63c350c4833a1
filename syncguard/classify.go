package syncguard

import (
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/syncguard/syncguard-go/driver"
)

type classifier struct {
	dialect driver.Dialect
}

// ctxErr returns Aborted (cancelled) or NetworkTimeout (deadline) when ctx
// is already done, before any I/O.
func ctxErr(ctx context.Context, op string) *Error {
	if ctx.Err() == nil {
		return nil
	}
	return fromContext(ctx, op, nil)
}

func fromContext(ctx context.Context, op string, cause error) *Error {
	e := &Error{Op: op, Code: CodeAborted, Msg: "context cancelled"}
	ctxe := context.Cause(ctx)
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		e.Code, e.Msg = CodeNetworkTimeout, "context deadline exceeded"
	}
	if cause != nil && !errors.Is(cause, ctx.Err()) {
		e.Err = fmt.Errorf("%w (driver: %w)", ctxe, cause)
	} else {
		e.Err = ctxe
	}
	return e
}

// wrap turns any error from database/sql into a *Error. The context is
// checked first: lib/pq reports our own cancellation as SQLSTATE 57014,
// which would otherwise read as a server-side statement timeout.
func (c classifier) wrap(ctx context.Context, op string, err error) *Error {
	if err == nil {
		return nil
	}
	var se *Error
	if errors.As(err, &se) {
		return se
	}
	if ctx.Err() != nil {
		return fromContext(ctx, op, err)
	}
	info := driver.ErrorInfo{}
	if c.dialect != nil {
		info = c.dialect.Inspect(err)
	}
	code, msg := classify(err, info)
	return &Error{Op: op, Code: code, SQLState: info.SQLState, Msg: msg, Err: err}
}

// classify maps a driver error onto a Code. See docs/errors.md.
func classify(err error, info driver.ErrorInfo) (Code, string) {
	// PgBouncer reports its own authentication failures as 08P01
	// (protocol_violation, its code for every pooler error).
	if info.SQLState == "08P01" && strings.Contains(err.Error(), "authentication failed") {
		return CodeAuthFailed, "the pooler rejected the credentials"
	}
	if s := info.SQLState; len(s) >= 2 {
		if code, msg, ok := classifySQLState(s); ok {
			return code, msg
		}
	}
	switch info.Kind {
	case driver.KindUnavailable:
		return CodeServiceUnavailable, "connection to PostgreSQL failed"
	case driver.KindTimeout:
		return CodeNetworkTimeout, "timed out talking to PostgreSQL"
	case driver.KindAuth:
		return CodeAuthFailed, "authentication failed"
	case driver.KindCanceled:
		return CodeAborted, "operation cancelled"
	case driver.KindPoolExhausted:
		return CodeRateLimited, "connection limit reached"
	}
	var ne net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return CodeNetworkTimeout, "timed out talking to PostgreSQL"
	case errors.Is(err, context.Canceled):
		return CodeAborted, "operation cancelled"
	case errors.Is(err, sqldriver.ErrBadConn), errors.Is(err, sql.ErrConnDone),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.EPIPE), errors.Is(err, net.ErrClosed):
		return CodeServiceUnavailable, "connection to PostgreSQL failed"
	case errors.As(err, &ne):
		return CodeServiceUnavailable, "network error"
	case errors.Is(err, sql.ErrTxDone):
		return CodeInvalidArgument, "the transaction is already committed or rolled back"
	case err.Error() == "sql: database is closed": // database/sql has no exported sentinel
		return CodeInternal, "the *sql.DB was closed (use after Close)"
	}
	return CodeInternal, "unexpected error"
}

func classifySQLState(s string) (Code, string, bool) {
	switch s {
	case "28000", "28P01":
		return CodeAuthFailed, "PostgreSQL rejected the credentials", true
	case "42501":
		return CodeAuthFailed, "insufficient privilege on the lock tables", true
	case "53300":
		return CodeRateLimited, "too many connections", true
	case "57014":
		return CodeNetworkTimeout, "statement cancelled by the server (statement_timeout)", true
	case "55P03":
		return CodeNetworkTimeout, "lock wait timed out (lock_timeout)", true
	case "57P01", "57P02", "57P03":
		return CodeServiceUnavailable, "server shutting down, restarting or terminated the connection", true
	case "40001", "40P01":
		return CodeServiceUnavailable, "transaction conflict (serialization failure or deadlock)", true
	case "25006":
		return CodeServiceUnavailable, "read-only transaction (connected to a standby?)", true
	case "25P02":
		return CodeInternal, "the caller's transaction is aborted; roll it back", true
	case "42P01":
		return CodeInternal, "lock table missing: run syncguard.SetupSchema (or apply syncguard.SchemaSQL) first", true
	case "42703":
		return CodeInternal, "lock table has the wrong columns: it was not created by syncguard.SetupSchema", true
	}
	switch s[:2] {
	case "08":
		return CodeServiceUnavailable, "connection exception", true
	case "53":
		return CodeServiceUnavailable, "server out of resources", true
	case "22":
		return CodeInvalidArgument, "data exception", true
	case "23":
		return CodeInvalidArgument, "integrity constraint violation", true
	case "28":
		return CodeAuthFailed, "invalid authorization", true
	}
	return CodeInternal, "", false
}
