package examples

import (
	"context"

	"gorm.io/gorm"

	"github.com/syncguard/syncguard-go/syncguard"
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
