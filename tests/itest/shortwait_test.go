package itest_test

import (
	"database/sql"
	sqldriver "database/sql/driver"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/stdlib"
	"github.com/lib/pq"

	"github.com/syncguard/syncguard-go/driver"
	"github.com/syncguard/syncguard-go/pgxstd"
	sgpq "github.com/syncguard/syncguard-go/pq"
	"github.com/syncguard/syncguard-go/syncguard"
)

// countingDriver is a database/sql driver that counts the connections it
// opens, as sql.Open(name) uses it.
type countingDriver struct {
	sqldriver.Driver
	opened *atomic.Int64
}

func (d countingDriver) Open(name string) (sqldriver.Conn, error) {
	d.opened.Add(1)
	return d.Driver.Open(name)
}

var registerCounting sync.Once

var (
	openedPGX, openedPQ atomic.Int64
)

// TestShortTimeoutsKeepThePoolsConnections (issue 44): six workers loop
// Lock with a 1-31 ms Timeout on one key through a pool opened with
// sql.Open (3 connections), as the README's quick start opens it. A waiter
// that gives up must not cost the pool its connection: pgx's stdlib closes
// a connection whose statement the context cuts, so every attempt cut at
// the deadline used to be followed by a new connection (authentication
// included), which no caller's few milliseconds could wait for (0
// holdings in 10 s). Lock's attempts are detached from the wait's end, so
// the pool keeps its connections: at most twice its size are opened (a
// bug opens one per cut attempt, hundreds), and the key is held.
func TestShortTimeoutsKeepThePoolsConnections(t *testing.T) {
	registerCounting.Do(func() {
		sql.Register("counting-pgx", countingDriver{stdlib.GetDefaultDriver(), &openedPGX})
		sql.Register("counting-postgres", countingDriver{&pq.Driver{}, &openedPQ})
	})
	for _, tc := range []struct {
		name    string
		dialect func(dsn string) driver.Dialect
		opened  *atomic.Int64
	}{
		{"pgx", func(string) driver.Dialect { return pgxstd.Dialect }, &openedPGX},
		{"postgres", sgpq.ListenDialect, &openedPQ},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newWaitEnv(t, "short_"+tc.name)
			db, err := sql.Open("counting-"+tc.name, e.dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			const pool = 3
			db.SetMaxOpenConns(pool)
			db.SetMaxIdleConns(pool)
			cfg := *e.cfg
			cfg.Dialect = tc.dialect(e.dsn)
			locks, err := syncguard.New(db, &cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer locks.Close()
			before := tc.opened.Load()
			var held, gaveUp atomic.Int64
			var wg sync.WaitGroup
			for range 6 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range 150 {
						timeout := time.Duration(1+rand.IntN(31)) * time.Millisecond
						lease, err := syncguard.Lock(e.ctx, locks, "short:key", &syncguard.LockOptions{TTL: 10 * time.Second,
							Acquisition: syncguard.AcquisitionOptions{Timeout: timeout}})
						if err != nil {
							gaveUp.Add(1)
							continue
						}
						time.Sleep(time.Millisecond)
						if _, err := lease.Release(e.ctx); err != nil {
							t.Errorf("release: %v", err)
						}
						held.Add(1)
					}
				}()
			}
			wg.Wait()
			opened := tc.opened.Load() - before
			t.Logf("%s: %d holdings, %d waits given up, %d connections opened (pool of %d)", tc.name, held.Load(), gaveUp.Load(), opened, pool)
			if held.Load() == 0 {
				t.Errorf("rule: waiters that give up within milliseconds do not starve the key: 0 holdings in 900 waits")
			}
			if opened > 2*pool {
				t.Errorf("rule: a waiter that gives up costs the pool no connection: %d connections opened for a pool of %d (at most %d)", opened, pool, 2*pool)
			}
		})
	}
}
