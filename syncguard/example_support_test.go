package syncguard_test

import (
	"context"
	"time"

	"github.com/syncguard/syncguard-go/syncguard"
)

// The examples of the lock helper, leases, telemetry and diagnostics run
// against an in-memory backend so that they need no PostgreSQL. In a
// program, locks is a *syncguard.Backend:
//
//	locks, err := syncguard.New(db, nil)
func newLocks() *syncguard.FakeBackend { return syncguard.NewFakeBackend() }

// holdElsewhere takes key as another process would.
func holdElsewhere(locks syncguard.LockBackend, key string) {
	_, _ = locks.Acquire(context.Background(), key, time.Minute)
}

// deleteLockRow stands in for an operator running
// DELETE FROM syncguard_locks WHERE lock_id = $1.
func deleteLockRow(locks *syncguard.FakeBackend, lockID string) { locks.Delete(lockID) }
