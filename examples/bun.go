package examples

import (
	"context"

	"github.com/uptrace/bun"

	"github.com/syncguard/syncguard-go/syncguard"
)

// BunCloseInvoice closes an invoice under its lock, writing with the
// lock's fence through bun.
func BunCloseInvoice(ctx context.Context, bdb *bun.DB, locks *syncguard.Backend, id int64) error {
	return closeWithFence(ctx, locks, id, func(ctx context.Context, fence string) (int64, error) {
		return rowsAffected(bdb.NewUpdate().Table("invoices").
			Set("status = ?", "closed").Set("fence = ?", fence).
			Where("id = ?", id).Where("fence IS NULL OR fence < ?", fence).
			Exec(ctx))
	})
}

// BunCreateLocked inserts an invoice and takes its lock in one bun
// transaction. WithTx gets tx.Tx, the *sql.Tx inside the bun.Tx: bun.Tx's
// own query methods rewrite "?" placeholders, which syncguard's statements
// do not use.
func BunCreateLocked(ctx context.Context, bdb *bun.DB, locks *syncguard.Backend, inv Invoice, then func() error) (lockID string, err error) {
	err = bdb.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		if _, err := tx.NewInsert().Model(&inv).Exec(ctx); err != nil {
			return err
		}
		var err error
		lockID, err = lockThen(ctx, locks.WithTx(tx.Tx), inv.ID, then)
		return err
	})
	return lockID, err
}
