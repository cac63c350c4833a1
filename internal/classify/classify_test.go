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
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/syncguard/syncguard-go/driver"
)

// shape is a dialect that reports a fixed ErrorInfo, standing in for what
// pq and pgxstd read from their drivers' errors.
type shape driver.ErrorInfo

func (shape) Name() string                     { return "shape" }
func (s shape) Inspect(error) driver.ErrorInfo { return driver.ErrorInfo(s) }

// connShape is a shape whose dialect also tells malformed connection
// strings (ConnStringReader): errMalformed is one.
type connShape struct{ shape }

var errMalformed = errors.New(`missing "=" after "this" in connection info string`)

func (connShape) MalformedConnString(err error) bool { return errors.Is(err, errMalformed) }

// TestPolicy is the policy table: for each error shape, the code a caller
// acts on (docs/errors.md says why). Rows with a zero shape test the
// generic shapes of the standard library, which need no dialect.
func TestPolicy(t *testing.T) {
	server := func(state, severity string) driver.ErrorInfo {
		return driver.ErrorInfo{SQLState: state, Severity: severity, Message: "server says no"}
	}
	odd := errors.New("driver error")
	cases := []struct {
		name string
		info driver.ErrorInfo
		err  error
		want string
	}{
		// The server's SQLSTATE decides first.
		{"wrong password", server("28P01", "FATAL"), odd, AuthFailed},
		{"no such role", server("28000", "FATAL"), odd, AuthFailed},
		{"other class 28", server("28001", "FATAL"), odd, AuthFailed},
		{"missing privilege", server("42501", "ERROR"), odd, AuthFailed},
		{"too many connections, FATAL", server("53300", "FATAL"), odd, RateLimited},
		{"out of memory", server("53200", "ERROR"), odd, ServiceUnavailable},
		{"statement_timeout", server("57014", "ERROR"), odd, NetworkTimeout},
		{"lock_timeout", server("55P03", "ERROR"), odd, NetworkTimeout},
		{"admin shutdown", server("57P01", "FATAL"), odd, ServiceUnavailable},
		{"crash shutdown", server("57P02", "FATAL"), odd, ServiceUnavailable},
		{"cannot connect now", server("57P03", "FATAL"), odd, ServiceUnavailable},
		{"connection failure", server("08006", "FATAL"), odd, ServiceUnavailable},
		{"deadlock", server("40P01", "ERROR"), odd, ServiceUnavailable},
		{"serialization failure", server("40001", "ERROR"), odd, ServiceUnavailable},
		{"read-only standby", server("25006", "ERROR"), odd, ServiceUnavailable},
		{"unlogged table on a standby", driver.ErrorInfo{SQLState: "0A000", Severity: "ERROR",
			Message: "cannot access temporary or unlogged relations during recovery"}, odd, ServiceUnavailable},
		{"feature not supported", server("0A000", "ERROR"), odd, Internal},
		{"aborted transaction", server("25P02", "ERROR"), odd, Internal},
		{"missing table", server("42P01", "ERROR"), odd, Internal},
		{"wrong columns", server("42703", "ERROR"), odd, Internal},
		{"data exception", server("22021", "ERROR"), odd, InvalidArgument},
		{"integrity violation", server("23505", "ERROR"), odd, InvalidArgument},
		{"internal error", server("XX000", "ERROR"), odd, Internal},
		// PgBouncer: 08P01 is every pooler error; its message tells auth.
		{"pgbouncer auth", driver.ErrorInfo{SQLState: "08P01", Severity: "FATAL", Message: `password authentication failed for user "app"`}, odd, AuthFailed},
		{"pgbouncer other", driver.ErrorInfo{SQLState: "08P01", Severity: "FATAL", Message: "no more connections allowed (max_client_conn)"}, odd, ServiceUnavailable},
		// A database that does not exist: configuration, not an outage.
		{"no such database", server("3D000", "FATAL"), odd, InvalidArgument},
		{"pgbouncer no such database", driver.ErrorInfo{SQLState: "08P01", Severity: "FATAL", Message: "no such database: app"}, odd, InvalidArgument},
		// A FATAL the table does not map ends the session: unavailable.
		{"unmapped FATAL", server("58P01", "FATAL"), odd, ServiceUnavailable},
		{"unmapped PANIC", server("XX000", "PANIC"), odd, ServiceUnavailable},
		{"not a SQLSTATE", server("2", "ERROR"), odd, Internal},
		// Client-side shapes the dialect reports.
		{"driver timeout", driver.ErrorInfo{Timeout: true}, odd, NetworkTimeout},
		{"broken connection", driver.ErrorInfo{ConnBroken: true}, odd, ServiceUnavailable},
		{"timeout wins over broken", driver.ErrorInfo{Timeout: true, ConnBroken: true}, odd, NetworkTimeout},
		// Generic shapes, typed checks only.
		{"ErrBadConn", driver.ErrorInfo{}, sqldriver.ErrBadConn, ServiceUnavailable},
		{"ErrConnDone", driver.ErrorInfo{}, sql.ErrConnDone, ServiceUnavailable},
		{"unexpected EOF", driver.ErrorInfo{}, fmt.Errorf("read: %w", io.ErrUnexpectedEOF), ServiceUnavailable},
		{"refused", driver.ErrorInfo{}, &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}, ServiceUnavailable},
		{"reset", driver.ErrorInfo{}, os.NewSyscallError("read", syscall.ECONNRESET), ServiceUnavailable},
		{"read deadline", driver.ErrorInfo{}, &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}, NetworkTimeout},
		{"deadline in the chain", driver.ErrorInfo{}, fmt.Errorf("x: %w", context.DeadlineExceeded), NetworkTimeout},
		{"canceled in the chain", driver.ErrorInfo{}, fmt.Errorf("x: %w", context.Canceled), Aborted},
		{"other net error", driver.ErrorInfo{}, &net.DNSError{Err: "no such host", Name: "db"}, ServiceUnavailable},
		{"tx done", driver.ErrorInfo{}, sql.ErrTxDone, InvalidArgument},
		{"db closed", driver.ErrorInfo{}, errors.New("sql: database is closed"), Internal},
		{"anything else", driver.ErrorInfo{}, odd, Internal},
		// A connection string the driver could not parse: a URL net/url
		// rejected (also a net.Error), or what the dialect recognises.
		{"unparsable URL", driver.ErrorInfo{}, &url.Error{Op: "parse", URL: "postgres://%zz", Err: url.EscapeError("%zz")}, InvalidArgument},
		{"malformed DSN by the dialect", driver.ErrorInfo{}, errMalformed, InvalidArgument},
		{"malformed DSN beside a broken connection", driver.ErrorInfo{ConnBroken: true}, errMalformed, InvalidArgument},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := Error(context.Background(), connShape{shape(c.info)}, c.err)
			if r.Code != c.want || r.Msg == "" || r.Err != c.err || r.SQLState != c.info.SQLState {
				t.Errorf("rule: %s is %s; got %+v", c.name, c.want, r)
			}
		})
	}
}

// The caller's context decides before anything the driver says: lib/pq
// reports our own cancellation as 57014, which would otherwise read as a
// server statement timeout.
func TestContextFirst(t *testing.T) {
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithTimeout(context.Background(), 0)
	defer cancel2()
	drv := errors.New("pq: canceling statement due to user request")
	info := shape{SQLState: "57014", Severity: "ERROR"}
	if r := Error(cancelled, info, drv); r.Code != Aborted || !errors.Is(r.Err, context.Canceled) || !errors.Is(r.Err, drv) {
		t.Errorf("rule: a cancelled context is Aborted, wrapping both causes; got %+v", r)
	}
	if r := Error(expired, info, drv); r.Code != NetworkTimeout || !errors.Is(r.Err, context.DeadlineExceeded) {
		t.Errorf("rule: a passed deadline is NetworkTimeout; got %+v", r)
	}
	if _, done := Context(context.Background(), nil); done {
		t.Error("a live context is not done")
	}
	if r, done := Context(cancelled, nil); !done || r.Code != Aborted || r.Err != context.Canceled {
		t.Errorf("Context of a cancelled ctx: %+v %v", r, done)
	}
	if r := Error(context.Background(), nil, sqldriver.ErrBadConn); r.Code != ServiceUnavailable {
		t.Errorf("a nil dialect still classifies generic shapes; got %+v", r)
	}
}

// FuzzClassify: any shape classifies to one of the codes, with a message,
// without panicking, and a cancelled context always wins.
func FuzzClassify(f *testing.F) {
	for _, s := range []string{"28P01", "57014", "08006", "53300", "40P01", "XX000", "08P01", "", "2", "ZZZZZ"} {
		f.Add(s, "FATAL", "authentication failed", false, false, false)
	}
	known := map[string]bool{ServiceUnavailable: true, AuthFailed: true, InvalidArgument: true, RateLimited: true,
		NetworkTimeout: true, Aborted: true, Internal: true}
	f.Fuzz(func(t *testing.T, state, severity, msg string, broken, timeout, cancelled bool) {
		ctx, cancel := context.WithCancel(context.Background())
		if cancelled {
			cancel()
		}
		defer cancel()
		info := shape{SQLState: state, Severity: severity, Message: msg, ConnBroken: broken, Timeout: timeout}
		r := Error(ctx, info, errors.New("driver error"))
		if cancelled && r.Code != Aborted {
			t.Fatalf("cancelled context must classify as Aborted, got %s", r.Code)
		}
		if !known[r.Code] || r.Msg == "" || r.Err == nil {
			t.Fatalf("unclassified: %+v", r)
		}
	})
}

// A full shared lock table (53200, "out of shared memory") names the
// setting that sizes it: "server out of resources" told no one what to do.
func TestOutOfSharedMemoryNamesMaxLocks(t *testing.T) {
	r := Error(context.Background(), shape(driver.ErrorInfo{SQLState: "53200", Severity: "ERROR", Message: "out of shared memory"}), errors.New("out of shared memory"))
	if r.Code != ServiceUnavailable || !strings.Contains(r.Msg, "max_locks_per_transaction") {
		t.Errorf("53200: %+v, want ServiceUnavailable naming max_locks_per_transaction", r)
	}
}
