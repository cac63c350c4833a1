package itest_test

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/syncguard/syncguard-go/conformance"
	"github.com/syncguard/syncguard-go/driver"
	"github.com/syncguard/syncguard-go/internal/rules"
	"github.com/syncguard/syncguard-go/multilock"
	"github.com/syncguard/syncguard-go/syncguard"
	"github.com/syncguard/syncguard-go/tests/pgtest"
	"github.com/syncguard/syncguard-go/tests/pgtest/suite"
)

// mlTables creates multilock's tables (and the mutex tables) under a
// fresh TableName on db and drops them when the test ends.
func mlTables(t *testing.T, ctx context.Context, db *sql.DB, d driver.Dialect) syncguard.Config {
	t.Helper()
	suffix := fmt.Sprintf("%08x", rand.Uint32())
	cfg := syncguard.Config{TableName: "ml_" + suffix + "_locks", FenceTableName: "ml_" + suffix + "_fences", Dialect: d}
	if err := syncguard.SetupSchema(ctx, db, &cfg); err != nil {
		t.Fatal(err)
	}
	if err := multilock.SetupSchema(ctx, db, &cfg); err != nil {
		t.Fatal(err)
	}
	tb, _ := multilock.TablesOf(&cfg)
	t.Cleanup(func() {
		var drop string
		for _, n := range []string{tb.Locks, tb.Fences, tb.Waiters, cfg.TableName, cfg.FenceTableName, cfg.TableName + "_waiters", cfg.TableName + "_holders"} {
			if drop != "" {
				drop += ", "
			}
			drop += rules.QuoteIdent(n)
		}
		_, _ = db.Exec(`DROP TABLE IF EXISTS ` + drop)
	})
	return cfg
}

func mlOpen(t *testing.T, drv suite.Driver, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open(drv.Name, dsn)
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(10)
	t.Cleanup(func() { db.Close() })
	return db
}

// deadlocks reads PostgreSQL's own count of deadlocks detected in the
// current database.
func deadlocks(t *testing.T, ctx context.Context, db *sql.DB) int64 {
	t.Helper()
	var n int64
	if err := db.QueryRowContext(ctx, `SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestMultiLockCrossedPairs: two callers, each on a pool of its own,
// take {a, b} and {b, a} at once, round after round, through Lock with
// the default waiting; every round both get their set, one after the
// other, with no error and no deadlock (PostgreSQL's pg_stat_database
// counter does not move). 300 rounds per adapter, also in make check
// (with -race and the rest of the suite beside it, a round takes up to
// 30 ms here); SYNCGUARD_MULTILOCK_ROUNDS=10000 is the measured run.
func TestMultiLockCrossedPairs(t *testing.T) {
	rounds := 300
	if s := os.Getenv("SYNCGUARD_MULTILOCK_ROUNDS"); s != "" {
		rounds, _ = strconv.Atoi(s)
	}
	srv := pgtest.Require(t)
	for _, drv := range []suite.Driver{pqDriver, pgxDriver} {
		t.Run(drv.Name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
			defer cancel()
			dialect := drv.Dialect
			if drv.DialectFor != nil {
				dialect = drv.DialectFor(srv.DSN)
			}
			admin := mlOpen(t, drv, srv.DSN)
			cfg := mlTables(t, ctx, admin, dialect)
			lockers := make([]*multilock.Locker, 2)
			for i := range lockers {
				l, err := multilock.New(mlOpen(t, drv, srv.DSN), &cfg)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { l.Close() })
				lockers[i] = l
			}
			before := deadlocks(t, ctx, admin)
			orders := [2][]string{{"a", "b"}, {"b", "a"}}
			opts := &syncguard.LockOptions{TTL: 10 * time.Second, Acquisition: syncguard.AcquisitionOptions{Timeout: 30 * time.Second}}
			var last [2]int64 // the last fence of a and b
			var mu sync.Mutex
			errs := 0
			start := time.Now()
			for r := 0; r < rounds; r++ {
				var wg sync.WaitGroup
				for i := range 2 {
					wg.Go(func() {
						lease, err := multilock.Lock(ctx, lockers[i], orders[i], opts)
						mu.Lock()
						defer mu.Unlock()
						if err != nil {
							errs++
							if errs < 5 {
								t.Errorf("round %d, caller %d: %v", r, i, err)
							}
							return
						}
						for j, k := range []string{"a", "b"} {
							f, _ := lease.FenceOf(k)
							n, _ := f.Int64()
							if n <= last[j] {
								t.Errorf("rule: per-key fences strictly increase: %s got %d after %d", k, n, last[j])
							}
							last[j] = n
						}
						mu.Unlock()
						lease.Close()
						mu.Lock()
					})
				}
				wg.Wait()
			}
			elapsed := time.Since(start)
			dl := deadlocks(t, ctx, admin) - before
			t.Logf("%s: %d rounds (%d set acquisitions) in %v (%.2f ms a round): %d errors, %d deadlocks; last fences a=%d b=%d",
				drv.Name, rounds, 2*rounds, elapsed.Round(time.Millisecond), float64(elapsed.Microseconds())/1000/float64(rounds), errs, dl, last[0], last[1])
			if dl != 0 {
				t.Errorf("rule: no deadlock: pg_stat_database counted %d", dl)
			}
			if last[0] != int64(2*rounds) || last[1] != int64(2*rounds) {
				t.Errorf("every acquisition took both keys: fences a=%d b=%d, want %d", last[0], last[1], 2*rounds)
			}
		})
	}
}

// mlHarness runs conformance.RunMultiLock on drv at dsn: each case gets
// fresh tables, a Locker and an other Locker on pools of their own, the
// mutex Backend on the same Config (the independence case) and a Locker
// on a closed pool (validation before I/O).
func mlHarness(t *testing.T, drv suite.Driver, dsn string) conformance.MultiLockHarness {
	dialect := drv.Dialect
	if drv.DialectFor != nil {
		dialect = drv.DialectFor(dsn)
	}
	return conformance.MultiLockHarness{New: func(t *testing.T) conformance.MultiLockTarget {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		admin := mlOpen(t, drv, dsn)
		cfg := mlTables(t, ctx, admin, dialect)
		newLocker := func(db *sql.DB) *multilock.Locker {
			l, err := multilock.New(db, &cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { l.Close() })
			return l
		}
		closed := mlOpen(t, drv, dsn)
		closed.Close()
		mutex, err := syncguard.New(admin, &cfg)
		if err != nil {
			t.Fatal(err)
		}
		return conformance.MultiLockTarget{
			Locker:      newLocker(mlOpen(t, drv, dsn)),
			Others:      []conformance.MultiLocker{newLocker(mlOpen(t, drv, dsn)), newLocker(mlOpen(t, drv, dsn))},
			Mutex:       mutex,
			Unreachable: newLocker(closed),
		}
	}}
}

func TestMultiLockConformancePQ(t *testing.T) {
	conformance.RunMultiLock(t, mlHarness(t, pqDriver, pgtest.Require(t).DSN))
}

func TestMultiLockConformancePGX(t *testing.T) {
	conformance.RunMultiLock(t, mlHarness(t, pgxDriver, pgtest.Require(t).DSN))
}

// Through PgBouncer in transaction mode: no notification reaches a
// waiter, which polls; the order of waiters holds.
func TestMultiLockConformanceThroughPgBouncer(t *testing.T) {
	pgtest.Long(t, "the multilock conformance group through PgBouncer")
	srv := pgtest.Require(t)
	if srv.Kind == pgtest.KindEnv {
		t.Skip("PgBouncer is started in front of a local or docker server only")
	}
	bouncer := pgtest.RequirePgBouncer(t, srv, pgtest.PgBouncerOptions{PoolMode: "transaction", DefaultPoolSize: 20})
	for _, drv := range []suite.Driver{pqDriver, pgxDriver} {
		t.Run(drv.Name, func(t *testing.T) {
			dsn := bouncer.DSN + drv.PgBouncerParams + "&connect_timeout=5"
			conformance.RunMultiLock(t, mlHarness(t, drv, dsn))
		})
	}
}

// TestMultiLockListAndIdentity: a holding's identity (LockOptions) and
// keys show in List, Holding and LookupKey; an ended holding does not.
func TestMultiLockListAndIdentity(t *testing.T) {
	srv := pgtest.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := mlOpen(t, pgxDriver, srv.DSN)
	cfg := mlTables(t, ctx, db, pgxDriver.Dialect)
	cfg.Identity = "default-id"
	l, err := multilock.New(db, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	lease, err := multilock.Lock(ctx, l, []string{"y", "x"}, &syncguard.LockOptions{Identity: "worker-7"})
	if err != nil {
		t.Fatal(err)
	}
	plain, err := l.Acquire(ctx, multilock.Keys("z"), time.Minute)
	if err != nil || !plain.OK {
		t.Fatal(plain, err)
	}
	hs, err := l.List(ctx)
	if err != nil || len(hs) != 2 {
		t.Fatalf("List: %d holdings, %v", len(hs), err)
	}
	if hs[0].Set != multilock.Keys("x", "y") || hs[0].Identity != "worker-7" || len(hs[0].Fences) != 2 || hs[0].LockIDHash != syncguard.HashKey(lease.LockID()) {
		t.Errorf("List[0] = %+v", hs[0])
	}
	if hs[1].Set != multilock.Keys("z") || hs[1].Identity != "default-id" {
		t.Errorf("List[1] = %+v", hs[1])
	}
	info, err := l.LookupKey(ctx, multilock.Keys("x"))
	if err != nil || info == nil || info.Identity != "worker-7" || info.KeyHash != syncguard.HashKey(multilock.Keys("x", "y")) {
		t.Errorf("LookupKey(x) = %+v, %v", info, err)
	}
	lease.Close()
	if h, err := l.Holding(ctx, lease.LockID()); err != nil || h != nil {
		t.Errorf("a released holding is gone: %+v, %v", h, err)
	}
	if hs, _ := l.List(ctx); len(hs) != 1 {
		t.Errorf("List after the release: %d holdings", len(hs))
	}
}
