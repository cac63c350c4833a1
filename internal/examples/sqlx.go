package examples

import (
	"context"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/syncguard/syncguard-go/syncguard"
)

// SqlxCloseInvoice closes an invoice under its lock, writing with the
// lock's fence through sqlx.
func SqlxCloseInvoice(ctx context.Context, dbx *sqlx.DB, locks *syncguard.Backend, id int64) error {
	return syncguard.WithLock(ctx, locks, lockKey(id), func(ctx context.Context, lease *syncguard.Lease) error {
		res, err := dbx.ExecContext(ctx, `UPDATE invoices SET status = 'closed', fence = $1
WHERE id = $2 AND (fence IS NULL OR fence < $1)`, string(lease.Fence()), id)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return ErrStaleFence
		}
		return nil
	}, nil)
}

// SqlxCreateLocked inserts an invoice and takes its lock in one sqlx
// transaction (a *sqlx.Tx is a *sql.Tx: it goes to WithTx as it is).
func SqlxCreateLocked(ctx context.Context, dbx *sqlx.DB, locks *syncguard.Backend, inv Invoice, then func() error) (string, error) {
	tx, err := dbx.BeginTxx(ctx, nil)
	if err != nil {
		return "", err
	}
	defer tx.Rollback() // after Commit, a no-op
	if _, err := tx.NamedExecContext(ctx, `INSERT INTO invoices (id, status) VALUES (:id, :status)`, inv); err != nil {
		return "", err
	}
	r, err := locks.WithTx(tx).Acquire(ctx, lockKey(inv.ID), time.Minute)
	if err != nil {
		return "", err
	}
	if !r.OK {
		return "", ErrBusy
	}
	if err := then(); err != nil {
		return r.LockID, err // the deferred Rollback undoes the insert and the lock
	}
	return r.LockID, tx.Commit()
}
