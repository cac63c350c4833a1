// Package ci holds, as a service's own test files would, the two tests of
// docs/testing.md that need a real PostgreSQL: the conformance suite in CI
// and a deployment smoke test. Here TestMain provides the database they
// read from the environment; in a service, CI does.
package ci

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/syncguard/syncguard-go/syncguard"
	"github.com/syncguard/syncguard-go/tests/pgtest"
)

func TestMain(m *testing.M) {
	// The conformance run waits more than it computes: six cases at once
	// (see docs/conformance.md, Time).
	pgtest.MinParallel(6)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// fsync on, as in production: the smoke test checks it.
	srv, err := pgtest.Start(ctx, pgtest.Options{Fsync: true})
	if err != nil {
		if _, ci := pgtest.InCI(); ci {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Fprintf(os.Stderr, "no PostgreSQL, the tests skip: %v\n", err)
		os.Exit(m.Run())
	}
	code := func() int {
		defer srv.Stop()
		// What the service's deployment created: its tables, as their owner.
		db, err := sql.Open("pgx", srv.DSN)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer db.Close()
		cfg := &syncguard.Config{TableName: "app_locks", FenceTableName: "app_fences"}
		if err := syncguard.SetupSchema(ctx, db, cfg); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		os.Setenv("SYNCGUARD_CONFORMANCE_DSN", srv.DSN)
		os.Setenv("APP_DATABASE_URL", srv.DSN)
		return m.Run()
	}()
	os.Exit(code)
}
