package examples

import (
	"context"

	"gorm.io/gorm"

	"github.com/syncguard/syncguard-go/syncguard"
	"github.com/syncguard/syncguard-go/txguard"
)

// GORMCloseInvoice closes an invoice under its lock, writing with the
// lock's fence through GORM.
func GORMCloseInvoice(ctx context.Context, gdb *gorm.DB, locks *syncguard.Backend, id int64) error {
	return closeWithFence(ctx, locks, id, func(ctx context.Context, fence string) (int64, error) {
		res := gdb.WithContext(ctx).Model(&Invoice{}).
			Where("id = ? AND (fence IS NULL OR fence < ?)", id, fence).
			Updates(map[string]any{"status": "closed", "fence": fence})
		return res.RowsAffected, res.Error
	})
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
		var err error
		lockID, err = lockThen(ctx, locks.WithTx(tx.Statement.ConnPool), inv.ID, then)
		return err
	})
	return lockID, err
}

// GORMCloseGuarded closes an invoice in a GORM transaction that commits
// only while lease holds: guard.HoldLease takes tx.Statement.ConnPool as
// it is (a *sql.Tx, or GORM's prepared-statement wrapper), as WithTx does.
func GORMCloseGuarded(ctx context.Context, gdb *gorm.DB, guard *txguard.Guard, lease txguard.Lease, id int64) error {
	return gdb.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		held, err := guard.HoldLease(ctx, tx.Statement.ConnPool, lease)
		if err != nil {
			return err // errors.Is(err, syncguard.ErrLockLost): nothing is written
		}
		return tx.Model(&Invoice{}).Where("id = ?", id).
			Updates(map[string]any{"status": "closed", "fence": string(held.Fence)}).Error
	})
}
