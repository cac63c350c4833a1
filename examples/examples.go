package examples

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/syncguard/syncguard-go/syncguard"
)

// Invoice is the row the jobs update. Fence is the fence of the last
// write: the jobs write only when theirs is greater, so a holder whose lock
// expired (a long GC pause, a partition) cannot overwrite a newer holder's
// work. Fences are 15-digit strings and compare correctly as text.
//
//	CREATE TABLE invoices (id bigint PRIMARY KEY, status text NOT NULL, fence text);
type Invoice struct {
	ID     int64  `gorm:"primaryKey" db:"id" bun:"id,pk"`
	Status string `db:"status" bun:"status"`
	Fence  string `gorm:"default:null" db:"fence" bun:"fence,nullzero"`
}

// ErrStaleFence: the write carried a fence not greater than the row's, so
// it came from a holder that lost its lock in the meantime. Nothing was
// written.
var ErrStaleFence = errors.New("stale fence: a newer lock holder wrote first")

// ErrBusy: another process holds the invoice's lock.
var ErrBusy = errors.New("invoice is locked by another process")

// lockKey is the lock of one invoice.
func lockKey(id int64) string { return fmt.Sprintf("invoice:%d", id) }

// closeWithFence runs a job under the invoice's lock: update writes with
// the lock's fence and reports how many rows it changed; none means a newer
// holder wrote first (ErrStaleFence).
func closeWithFence(ctx context.Context, locks *syncguard.Backend, id int64, update func(ctx context.Context, fence string) (int64, error)) error {
	return syncguard.WithLock(ctx, locks, lockKey(id), func(ctx context.Context, lease *syncguard.Lease) error {
		n, err := update(ctx, string(lease.Fence()))
		if err != nil {
			return err
		}
		if n == 0 {
			return ErrStaleFence
		}
		return nil
	}, nil)
}

// lockThen takes the invoice's lock through txLocks, a WithTx view on the
// ORM's transaction, then runs the rest of the transaction's work. An
// error from either must roll the transaction back, and the lock with it.
func lockThen(ctx context.Context, txLocks *syncguard.Backend, id int64, then func() error) (lockID string, err error) {
	r, err := txLocks.Acquire(ctx, lockKey(id), time.Minute)
	if err != nil {
		return "", err
	}
	if !r.OK {
		return "", ErrBusy
	}
	return r.LockID, then()
}

// rowsAffected is the row count of an Exec's result.
func rowsAffected(res sql.Result, err error) (int64, error) {
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}
