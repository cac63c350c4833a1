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

// TestSemaphoreIndependentOfMutex: a key used as a semaphore and the
// mutex of the same name share no row and no fence counter: both are
// held at once, each counts its own fences, and releasing one leaves the
// other held.
func TestSemaphoreIndependentOfMutex(t *testing.T) {
	srv := pgtest.Require(t)
	db := semOpen(t, "pgx", srv.DSN)
	cfg := semTables(t, db)
	cfg.FenceTableName = cfg.TableName + "_fences"
	ctx := t.Context()
	if err := syncguard.SetupSchema(ctx, db, &cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = db.Exec(`DROP TABLE IF EXISTS ` + rules.QuoteIdent(cfg.TableName) + `, ` + rules.QuoteIdent(cfg.FenceTableName) + `, ` +
			rules.QuoteIdent(cfg.TableName+"_waiters") + `, ` + rules.QuoteIdent(cfg.TableName+"_holders"))
	})
	mutex, err := syncguard.New(db, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	sem, err := semaphore.New(db, &cfg, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer sem.Close()
	for range 3 { // move the mutex's fence counter on
		r, err := mutex.Acquire(ctx, "shared-name", time.Minute)
		if err != nil || !r.OK {
			t.Fatalf("mutex acquire: %+v %v", r, err)
		}
		if _, err := mutex.Release(ctx, r.LockID); err != nil {
			t.Fatal(err)
		}
	}
	m, err := mutex.Acquire(ctx, "shared-name", time.Minute)
	if err != nil || !m.OK {
		t.Fatalf("mutex acquire: %+v %v", m, err)
	}
	p, err := sem.Acquire(ctx, "shared-name", time.Minute)
	if err != nil || !p.OK {
		t.Fatalf("rule: a semaphore and the mutex of the same name are independent: the semaphore's permit was refused while the mutex is held: %+v %v", p, err)
	}
	if m.Fence != "000000000000004" || p.Fence != "000000000000001" {
		t.Errorf("rule: a semaphore's slots count their own fences: mutex %s, permit %s", m.Fence, p.Fence)
	}
	if r, err := mutex.Release(ctx, p.LockID); err != nil || r.OK {
		t.Errorf("rule: the mutex cannot release a permit: %+v %v", r, err)
	}
	if r, err := sem.Release(ctx, m.LockID); err != nil || r.OK {
		t.Errorf("rule: the semaphore cannot release the mutex's lock: %+v %v", r, err)
	}
	if held, err := mutex.IsLocked(ctx, "shared-name"); err != nil || !held {
		t.Errorf("the mutex stays held: %v %v", held, err)
	}
	if full, err := sem.IsLocked(ctx, "shared-name"); err != nil || !full {
		t.Errorf("the semaphore's one permit stays held: %v %v", full, err)
	}
}

// TestSemaphoreUnprivilegedRole runs the group as a role with only the
// documented privileges (SELECT, INSERT, UPDATE, DELETE on the three
// tables), on pgx.
func TestSemaphoreUnprivilegedRole(t *testing.T) {
	srv, _, admin, exec := asAdmin(t, "creates a role")
	const role = "sg_sem_user"
	_, _ = admin.Exec(`DROP OWNED BY ` + role)
	_, _ = admin.Exec(`DROP ROLE IF EXISTS ` + role)
	exec(`CREATE ROLE ` + role + ` LOGIN PASSWORD 'sg-sem-pw'`)
	t.Cleanup(func() {
		_, _ = admin.Exec(`DROP OWNED BY ` + role)
		_, _ = admin.Exec(`DROP ROLE IF EXISTS ` + role)
	})
	dsn := srv.DSNFor(role, "sg-sem-pw", "")
	conformance.RunSemaphore(t, conformance.SemaphoreHarness{New: func(t testing.TB) func(int) conformance.SemaphoreTarget {
		cfg := semTables(t, admin)
		a, b, c := semaphore.Tables(cfg.TableName)
		if _, err := admin.Exec(`GRANT SELECT, INSERT, UPDATE, DELETE ON ` + rules.QuoteIdent(a) + `, ` + rules.QuoteIdent(b) + `, ` + rules.QuoteIdent(c) + ` TO ` + role); err != nil {
			t.Fatal(err)
		}
		cfg.Dialect = pgxDriver.Dialect
		return func(permits int) conformance.SemaphoreTarget {
			s, err := semaphore.New(semOpen(t, "pgx", dsn), &cfg, permits)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		}
	}})
}
