package itest_test

import (
	"context"
	"database/sql"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/syncguard/syncguard-go/multilock"
	"github.com/syncguard/syncguard-go/rwlock"
	"github.com/syncguard/syncguard-go/semaphore"
	"github.com/syncguard/syncguard-go/syncguard"
	"github.com/syncguard/syncguard-go/tests/pgtest"
)

// TestOutageAttemptsFollowTheRetrySchedule: a waiter of each kind (the
// Backend's mutex, a semaphore, a read-write lock, a multi-key lock),
// queued behind a holder, whose database becomes unreachable for 3 s,
// attempts on the documented retry schedule (RetryDelay 100 ms doubling to
// its 1 s cap: about 6 attempts in 3 s), not every 5-25 ms as a waiter that
// polls because its failed attempt never listened (121-122 attempts before).
// It still gets the key once the database is back.
func TestOutageAttemptsFollowTheRetrySchedule(t *testing.T) {
	srv := pgtest.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dsn, err := srv.CreateDatabase(ctx, "outage_pace")
	if err != nil {
		t.Fatal(err)
	}
	admin := open(t, dsn)
	for _, setup := range []func(context.Context, *sql.DB, *syncguard.Config) error{
		syncguard.SetupSchema, semaphore.SetupSchema, rwlock.SetupSchema, multilock.SetupSchema} {
		if err := setup(ctx, admin, nil); err != nil {
			t.Fatal(err)
		}
	}
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	port := newFlakyPort(t, u.Host)
	u.Host = port.addr
	q := u.Query()
	q.Set("connect_timeout", "2")
	u.RawQuery = q.Encode()
	waiterDB := open(t, u.String())

	type kind struct {
		name           string
		holder, waiter func() (syncguard.LockBackend, error)
		key            string
	}
	kinds := []kind{
		{"mutex", func() (syncguard.LockBackend, error) { return syncguard.New(admin, nil) },
			func() (syncguard.LockBackend, error) { return syncguard.New(waiterDB, nil) }, "outage:mutex"},
		{"semaphore", func() (syncguard.LockBackend, error) { return semaphore.New(admin, nil, 1) },
			func() (syncguard.LockBackend, error) { return semaphore.New(waiterDB, nil, 1) }, "outage:sem"},
		{"rwlock", func() (syncguard.LockBackend, error) {
			rw, err := rwlock.New(admin, nil)
			if err != nil {
				return nil, err
			}
			return rw.Exclusive(), nil
		}, func() (syncguard.LockBackend, error) {
			rw, err := rwlock.New(waiterDB, nil)
			if err != nil {
				return nil, err
			}
			return rw.Exclusive(), nil
		}, "outage:rw"},
		{"multilock", func() (syncguard.LockBackend, error) { return multilock.New(admin, nil) },
			func() (syncguard.LockBackend, error) { return multilock.New(waiterDB, nil) }, multilock.Keys("outage:a", "outage:b")},
	}
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			holder, err := k.holder()
			if err != nil {
				t.Fatal(err)
			}
			waiter, err := k.waiter()
			if err != nil {
				t.Fatal(err)
			}
			held, err := holder.Acquire(ctx, k.key, time.Minute)
			if err != nil || !held.OK {
				t.Fatal(held, err)
			}
			var outage atomic.Bool
			var failed atomic.Int32
			done := make(chan error, 1)
			go func() {
				done <- syncguard.WithLock(ctx, waiter, k.key, func(context.Context, *syncguard.Lease) error { return nil },
					&syncguard.LockOptions{Acquisition: syncguard.AcquisitionOptions{Timeout: time.Minute},
						OnAttempt: func(_ syncguard.AcquireResult, err error) {
							if err != nil && outage.Load() {
								failed.Add(1)
							}
						}})
			}()
			time.Sleep(500 * time.Millisecond) // the waiter queued
			outage.Store(true)
			port.down()
			time.Sleep(3 * time.Second)
			outage.Store(false)
			n := failed.Load()
			port.up(t)
			if _, err := holder.Release(ctx, held.LockID); err != nil {
				t.Fatal(err)
			}
			if err := <-done; err != nil {
				t.Errorf("the wait after the outage: %v", err)
			}
			// The schedule gives about 6 (fewer on a slow machine); polling
			// gave 120.
			if n > 15 {
				t.Errorf("rule: during a 3 s outage the waiter attempts on the retry schedule: %d failed attempts, want at most 15", n)
			}
			t.Logf("%s: %d failed attempts in a 3 s outage", k.name, n)
		})
	}
}
