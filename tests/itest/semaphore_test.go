package itest_test

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/syncguard/syncguard-go/conformance"
	"github.com/syncguard/syncguard-go/driver"
	"github.com/syncguard/syncguard-go/internal/rules"
	"github.com/syncguard/syncguard-go/semaphore"
	"github.com/syncguard/syncguard-go/syncguard"
	"github.com/syncguard/syncguard-go/tests/pgtest"
	"github.com/syncguard/syncguard-go/tests/pgtest/suite"
)

// semDialect is d's dialect for a pool opened with dsn.
func semDialect(d suite.Driver, dsn string) driver.Dialect {
	if d.DialectFor != nil {
		return d.DialectFor(dsn)
	}
	return d.Dialect
}

// semTables creates the semaphore's tables under a fresh lock table name
// and drops them after the test.
func semTables(t testing.TB, db *sql.DB) syncguard.Config {
	t.Helper()
	cfg := syncguard.Config{TableName: fmt.Sprintf("sem_%08x", rand.Uint32())}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := semaphore.SetupSchema(ctx, db, &cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		a, b, c := semaphore.Tables(cfg.TableName)
		_, _ = db.Exec(`DROP TABLE IF EXISTS ` + rules.QuoteIdent(a) + `, ` + rules.QuoteIdent(b) + `, ` + rules.QuoteIdent(c))
	})
	return cfg
}

// semHarness opens every semaphore of a case on a pool of its own (a
// process) at dsn, the tables created through setupDSN (the server itself:
// DDL through PgBouncer works too, but is not what is tested).
func semHarness(d suite.Driver, dsn, setupDSN string) conformance.SemaphoreHarness {
	return conformance.SemaphoreHarness{New: func(t testing.TB) func(int) conformance.SemaphoreTarget {
		setup := semOpen(t, d.Name, setupDSN)
		cfg := semTables(t, setup)
		cfg.Dialect = semDialect(d, dsn)
		return func(permits int) conformance.SemaphoreTarget {
			db := semOpen(t, d.Name, dsn)
			s, err := semaphore.New(db, &cfg, permits)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		}
	}}
}

func TestSemaphorePQ(t *testing.T) {
	srv := pgtest.Require(t)
	conformance.RunSemaphore(t, semHarness(pqDriver, srv.DSN, srv.DSN))
}

func TestSemaphorePGX(t *testing.T) {
	srv := pgtest.Require(t)
	conformance.RunSemaphore(t, semHarness(pgxDriver, srv.DSN, srv.DSN))
}

func semBouncer(t *testing.T) (*pgtest.Server, *pgtest.PgBouncer) {
	pgtest.Long(t, "the semaphore group through PgBouncer")
	srv := pgtest.Require(t)
	if srv.Kind == pgtest.KindEnv {
		t.Skip("PgBouncer is started in front of a local or docker server only")
	}
	return srv, pgtest.RequirePgBouncer(t, srv, pgtest.PgBouncerOptions{PoolMode: "transaction", DefaultPoolSize: 40})
}

func TestSemaphorePQThroughPgBouncer(t *testing.T) {
	srv, b := semBouncer(t)
	conformance.RunSemaphore(t, semHarness(pqDriver, b.DSN+pqDriver.PgBouncerParams+"&connect_timeout=5", srv.DSN))
}

func TestSemaphorePGXThroughPgBouncer(t *testing.T) {
	srv, b := semBouncer(t)
	conformance.RunSemaphore(t, semHarness(pgxDriver, b.DSN+pgxDriver.PgBouncerParams+"&connect_timeout=5", srv.DSN))
}

func semOpen(t testing.TB, name, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open(name, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}
