package itest_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/syncguard/syncguard-go/syncguard"
	"github.com/syncguard/syncguard-go/tests/pgtest"
	"github.com/syncguard/syncguard-go/tests/pgtest/suite"
)

// TestUnknownDatabaseIsConfigurationError: a DSN naming a database the
// server does not have (3D000) is InvalidArgument, not retryable, through
// each driver, and WithLock gives up at once instead of retrying it as an
// outage for its whole Timeout.
func TestUnknownDatabaseIsConfigurationError(t *testing.T) {
	srv := pgtest.Require(t)
	for _, d := range []suite.Driver{pqDriver, pgxDriver} {
		t.Run(d.Name, func(t *testing.T) {
			db, err := sql.Open(d.Name, srv.DSNFor("", "", "syncguard_no_such_database"))
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			b, err := syncguard.New(db, &syncguard.Config{Dialect: d.Dialect})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_, err = b.Acquire(ctx, "jobs:unknown-db", time.Minute)
			var se *syncguard.Error
			if !errors.As(err, &se) || se.Code != syncguard.ErrInvalidArgument || se.Retryable() || se.SQLState != "3D000" {
				t.Fatalf("Acquire on a database that does not exist = %v; want a non-retryable InvalidArgument with SQLSTATE 3D000", err)
			}
			calls := 0
			err = syncguard.WithLock(ctx, b, "jobs:unknown-db", func(context.Context, *syncguard.Lease) error {
				calls++
				return nil
			}, &syncguard.LockOptions{Acquisition: syncguard.AcquisitionOptions{Timeout: 30 * time.Second}})
			if !errors.Is(err, syncguard.ErrInvalidArgument) || calls != 0 {
				t.Errorf("WithLock on a database that does not exist = %v (fn ran %d times); want InvalidArgument", err, calls)
			}
		})
	}
}
