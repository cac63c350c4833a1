package classify

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"

	"github.com/syncguard/syncguard-go/driver"
)

// connectError has the shape of pgx's pgconn.ConnectError: a prefix, then
// its joined attempts, one per line and indented when there are several.
type connectError struct{ err error }

func (e *connectError) Error() string {
	prefix := "failed to connect to `user=app database=app`:"
	d := e.err.Error()
	if strings.Contains(d, "\n") {
		return prefix + "\n\t" + strings.ReplaceAll(d, "\n", "\n\t")
	}
	return prefix + " " + d
}
func (e *connectError) Unwrap() error { return e.err }

// serverError stands for pgconn.PgError.
type serverError struct{ code, msg string }

func (e *serverError) Error() string { return "FATAL: " + e.msg + " (SQLSTATE " + e.code + ")" }

type stateDialect struct{ driver.Dialect }

func (stateDialect) Inspect(err error) driver.ErrorInfo {
	var se *serverError
	if errors.As(err, &se) {
		return driver.ErrorInfo{SQLState: se.code, Severity: "FATAL", Message: se.msg}
	}
	return driver.ErrorInfo{}
}

func attempt(err error) error {
	return fmt.Errorf("127.0.0.1:5432 (localhost): %w", err)
}

// With sslmode prefer against a server without TLS, a wrong password reads
// as a wrong password: the TLS attempt's refusal is left out of the text,
// and still reached through the chain.
func TestCauseFirstLeavesOutTheTLSRefusal(t *testing.T) {
	tlsErr := attempt(errors.New("tls error: server refused TLS connection"))
	authErr := &serverError{"28P01", `password authentication failed for user "app"`}
	err := &connectError{errors.Join(tlsErr, attempt(fmt.Errorf("server error: %w", authErr)))}

	r := Error(context.Background(), stateDialect{}, err)
	if r.Code != AuthFailed || r.SQLState != "28P01" {
		t.Fatalf("code %s, SQLSTATE %s; want AuthFailed, 28P01", r.Code, r.SQLState)
	}
	want := "failed to connect to `user=app database=app`: 127.0.0.1:5432 (localhost): server error: FATAL: " +
		`password authentication failed for user "app" (SQLSTATE 28P01)`
	if got := r.Err.Error(); got != want {
		t.Errorf("text:\n got %q\nwant %q", got, want)
	}
	if errors.Unwrap(r.Err) != error(err) || !errors.Is(r.Err, tlsErr) {
		t.Errorf("the driver's error and every attempt must stay in the chain")
	}
	var se *serverError
	if !errors.As(r.Err, &se) {
		t.Errorf("errors.As must reach the server's error")
	}
}

// Attempts that failed the same way are told once; distinct causes (two
// hosts) are all kept; an error of one attempt is left as it is.
func TestCauseFirstOtherShapes(t *testing.T) {
	refused := func() error { return attempt(fmt.Errorf("dial error: %w", syscall.ECONNREFUSED)) }
	twice := &connectError{errors.Join(refused(), refused())}
	got := CauseFirst(twice).Error()
	if want := "failed to connect to `user=app database=app`: 127.0.0.1:5432 (localhost): dial error: " +
		syscall.ECONNREFUSED.Error(); got != want {
		t.Errorf("two identical attempts:\n got %q\nwant %q", got, want)
	}
	if !errors.Is(CauseFirst(twice), syscall.ECONNREFUSED) {
		t.Errorf("errors.Is must reach the attempts")
	}

	hosts := &connectError{errors.Join(
		fmt.Errorf("10.0.0.1:5432 (a): %w", errors.New("tls error: server refused TLS connection")),
		fmt.Errorf("10.0.0.1:5432 (a): dial error: timeout"),
		fmt.Errorf("10.0.0.2:5432 (b): dial error: no route to host")),
	}
	got = CauseFirst(hosts).Error()
	if strings.Contains(got, "TLS") || !strings.Contains(got, "(a): dial error: timeout; 10.0.0.2:5432 (b): dial error: no route") {
		t.Errorf("two hosts: %q", got)
	}

	one := &connectError{attempt(errors.New("tls error: server refused TLS connection"))}
	if CauseFirst(one) != error(one) {
		t.Errorf("a lone TLS refusal is the cause: kept as it is")
	}
	only := &connectError{errors.Join(attempt(errors.New("tls error: server refused TLS connection")))}
	if CauseFirst(only) != error(only) {
		t.Errorf("nothing else to tell: kept as it is")
	}
	plain := errors.New("x")
	if CauseFirst(plain) != plain || CauseFirst(nil) != nil {
		t.Errorf("errors that join nothing are returned as they are")
	}
}
