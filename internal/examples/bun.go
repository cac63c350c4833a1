package examples

import (
	"context"
	"time"

	"github.com/uptrace/bun"

	"github.com/syncguard/syncguard-go/syncguard"
)

// BunCloseInvoice closes an invoice under its lock, writing with the
// lock's fence through bun.
func BunCloseInvoice(ctx context.Context, bdb *bun.DB, locks *syncguard.Backend, id int64) error {
	return syncguard.WithLock(ctx, locks, lockKey(id), func(ctx context.Context, lease *syncguard.Lease) error {
		fence := string(lease.Fence())
		res, err := bdb.NewUpdate().Table("invoices").
			Set("status = ?", "closed").Set("fence = ?", fence).
			Where("id = ?", id).Where("fence IS NULL OR fence < ?", fence).
			Exec(ctx)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return ErrStaleFence
		}
		return nil
	}, nil)
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
		r, err := locks.WithTx(tx.Tx).Acquire(ctx, lockKey(inv.ID), time.Minute)
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
