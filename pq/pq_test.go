package pq

import (
	"context"
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
		{"context (the core's to read)", context.Canceled, driver.ErrorInfo{}},
		{"unknown", errors.New("something"), driver.ErrorInfo{}},
	}
	for _, c := range cases {
		if got := Dialect.Inspect(c.err); got != c.want {
			t.Errorf("%s: Inspect = %+v, want %+v", c.name, got, c.want)
		}
	}
}
