package pq

import (
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	"errors"
	"fmt"
	"net"
	"os"
	"testing"

	"github.com/lib/pq"

	"github.com/syncguard/syncguard-go/driver"
)

// The dialect reports shapes only: what the server sent, a broken
// connection, a timeout. Which code each means is the core's decision.
func TestInspectReportsShapes(t *testing.T) {
	cases := []struct {
		name string
		err  error
		want driver.ErrorInfo
	}{
		{"server error", fmt.Errorf("exec: %w", &pq.Error{Severity: "FATAL", Code: "28P01", Message: "password authentication failed"}),
			driver.ErrorInfo{SQLState: "28P01", Severity: "FATAL", Message: "password authentication failed"}},
		{"bad connection", sqldriver.ErrBadConn, driver.ErrorInfo{ConnBroken: true}},
		{"dial refused", &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}, driver.ErrorInfo{ConnBroken: true}},
		{"read timeout", &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}, driver.ErrorInfo{Timeout: true}},
		{"no primary among the hosts (target_session_attrs=read-write)", fmt.Errorf("pq: could not connect to any of the hosts:\n%w",
			errors.Join(errors.New("connecting to 127.0.0.1:5432: server is in hot standby mode"), errors.New("connecting to 127.0.0.1:5433: session is read-only"))),
			driver.ErrorInfo{ConnBroken: true}},
		{"context (the core's to read)", context.Canceled, driver.ErrorInfo{}},
		{"unknown", errors.New("something"), driver.ErrorInfo{}},
	}
	for _, c := range cases {
		if got := Dialect.Inspect(c.err); got != c.want {
			t.Errorf("%s: Inspect = %+v, want %+v", c.name, got, c.want)
		}
	}
}

// A pool opened with NewConnector finds, by its driver's type, a dialect
// that can LISTEN (syncguard.New looks it up so; tests/itest's
// TestPQConnectorListens checks it against PostgreSQL); a pool of lib/pq's
// own driver finds the plain Dialect, which cannot.
func TestConnectorPoolFindsTheListeningDialect(t *testing.T) {
	c, err := NewConnector("postgres://app@127.0.0.1:1/app?sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(c) // no connection is opened
	defer db.Close()
	d, ok := driver.Lookup(db.Driver())
	if !ok || d.Name() != "lib/pq" {
		t.Fatalf("dialect of a NewConnector pool: %v, %v", d, ok)
	}
	if _, ok := d.(driver.Listener); !ok {
		t.Errorf("the dialect of a NewConnector pool cannot LISTEN")
	}
	if _, ok := d.(driver.BackendPIDReader); !ok {
		t.Errorf("the dialect of a NewConnector pool cannot read the backend pid (pooler detection)")
	}

	plain, err := sql.Open("postgres", "postgres://app@127.0.0.1:1/app?sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if d, ok := driver.Lookup(plain.Driver()); !ok || d != Dialect {
		t.Errorf("dialect of a sql.Open pool: %v, %v; want the plain Dialect", d, ok)
	}

	if _, err := NewConnector("postgres://app@127.0.0.1:notaport/app"); err == nil {
		t.Errorf("NewConnector accepted a malformed DSN")
	}
}
