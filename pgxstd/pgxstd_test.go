package pgxstd

import (
	"context"
	sqldriver "database/sql/driver"
	"errors"
	"fmt"
	"net"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/syncguard/syncguard-go/driver"
)

// The dialect reports shapes only: what the server sent, a broken
// connection, a timeout. Which code each means is the core's decision.
func TestInspectReportsShapes(t *testing.T) {
	// A refused connection, as pgx reports it: *pgconn.ConnectError.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, refused := pgconn.Connect(ctx, "postgres://u@"+addr+"/db?sslmode=disable&connect_timeout=5")
	var ce *pgconn.ConnectError
	if !errors.As(refused, &ce) {
		t.Fatalf("setup: want a *pgconn.ConnectError, got %T %v", refused, refused)
	}

	cases := []struct {
		name string
		err  error
		want driver.ErrorInfo
	}{
		{"server error", fmt.Errorf("exec: %w", &pgconn.PgError{Severity: "FATAL", SeverityUnlocalized: "FATAL", Code: "57P01", Message: "terminating connection due to administrator command"}),
			driver.ErrorInfo{SQLState: "57P01", Severity: "FATAL", Message: "terminating connection due to administrator command"}},
		{"localized severity only (before 9.6)", &pgconn.PgError{Severity: "ERROR", Code: "40001", Message: "could not serialize"},
			driver.ErrorInfo{SQLState: "40001", Severity: "ERROR", Message: "could not serialize"}},
		{"refused", refused, driver.ErrorInfo{ConnBroken: true}},
		{"bad connection", sqldriver.ErrBadConn, driver.ErrorInfo{ConnBroken: true}},
		{"read timeout", &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}, driver.ErrorInfo{Timeout: true}},
		{"unknown", errors.New("something"), driver.ErrorInfo{}},
	}
	for _, c := range cases {
		if got := Dialect.Inspect(c.err); got != c.want {
			t.Errorf("%s: Inspect = %+v, want %+v", c.name, got, c.want)
		}
	}
}
