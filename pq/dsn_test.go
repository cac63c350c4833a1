package pq

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/syncguard/syncguard-go/syncguard"
)

const driverName = "postgres"

// A malformed connection string is InvalidArgument at the first operation
// (the driver parses it only when the pool first connects): a
// configuration error, not retryable, and not Internal.
func TestMalformedDSNIsInvalidArgument(t *testing.T) {
	for _, dsn := range []string{
		"this is not a dsn",
		"host=localhost port=notaport",
		"sslmode=bogus host=localhost",
		"postgres://u:p@localhost:badport/db",
		"postgres://%zz",
	} {
		db, err := sql.Open(driverName, dsn)
		if err != nil {
			t.Fatalf("%q: sql.Open: %v", dsn, err)
		}
		b, err := syncguard.New(db, nil)
		if err != nil {
			t.Fatalf("%q: New: %v", dsn, err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err = b.Acquire(ctx, "jobs:dsn", time.Minute)
		cancel()
		db.Close()
		var se *syncguard.Error
		if !errors.As(err, &se) || se.Code != syncguard.ErrInvalidArgument || se.Retryable() {
			t.Errorf("%q: Acquire = %v; want a non-retryable InvalidArgument", dsn, err)
			continue
		}
		if want := "malformed connection string"; !strings.Contains(se.Msg, want) {
			t.Errorf("%q: message %q lacks %q", dsn, se.Msg, want)
		}
	}
	// A refused connection is not a malformed connection string.
	r, ok := Dialect.(interface{ MalformedConnString(error) bool })
	if !ok {
		t.Fatal("the dialect does not tell malformed connection strings")
	}
	db, _ := sql.Open(driverName, "postgres://nobody@127.0.0.1:1/none?connect_timeout=5&sslmode=disable")
	defer db.Close()
	if err := db.PingContext(context.Background()); err == nil || r.MalformedConnString(err) {
		t.Errorf("a refused connection (%v) read as a malformed connection string", err)
	}
}
