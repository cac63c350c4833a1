package examples

import (
	"errors"
	"fmt"
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
