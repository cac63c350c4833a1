package examples

import (
	"context"
	"time"

	"gorm.io/gorm"

	"github.com/syncguard/syncguard-go/syncguard"
)

// GORMCloseInvoice closes an invoice under its lock, writing with the
// lock's fence through GORM.
func GORMCloseInvoice(ctx context.Context, gdb *gorm.DB, locks *syncguard.Backend, id int64) error {
	return syncguard.WithLock(ctx, locks, lockKey(id), func(ctx context.Context, lease *syncguard.Lease) error {
		fence := string(lease.Fence())
		res := gdb.WithContext(ctx).Model(&Invoice{}).
			Where("id = ? AND (fence IS NULL OR fence < ?)", id, fence).
			Updates(map[string]any{"status": "closed", "fence": fence})
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected == 0 {
			return ErrStaleFence
		}
		return nil
	}, nil)
}

// GORMCreateLocked inserts an invoice and takes its lock in one GORM
// transaction: when a later step fails (then), the insert and the lock roll
// back together. tx.Statement.ConnPool is the transaction's connection
// (a *sql.Tx, or GORM's prepared-statement wrapper with PrepareStmt).
func GORMCreateLocked(ctx context.Context, gdb *gorm.DB, locks *syncguard.Backend, inv Invoice, then func() error) (lockID string, err error) {
	err = gdb.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := tx.Create(&inv).Error; err != nil {
			return err
		}
		r, err := locks.WithTx(tx.Statement.ConnPool).Acquire(ctx, lockKey(inv.ID), time.Minute)
		if err != nil {
			return err
		}
		if !r.OK {
			return ErrBusy
		}
		lockID = r.LockID
		return then()
	})
	return lockID, err
}
