package examples

import (
	"context"

	"github.com/jmoiron/sqlx"

	"github.com/syncguard/syncguard-go/syncguard"
	"github.com/syncguard/syncguard-go/txguard"
)

// SqlxCloseInvoice closes an invoice under its lock, writing with the
// lock's fence through sqlx.
func SqlxCloseInvoice(ctx context.Context, dbx *sqlx.DB, locks *syncguard.Backend, id int64) error {
	return closeWithFence(ctx, locks, id, func(ctx context.Context, fence string) (int64, error) {
		return rowsAffected(dbx.ExecContext(ctx, `UPDATE invoices SET status = 'closed', fence = $1
WHERE id = $2 AND (fence IS NULL OR fence < $1)`, fence, id))
	})
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
	lockID, err := lockThen(ctx, locks.WithTx(tx), inv.ID, then)
	if err != nil {
		return lockID, err // the deferred Rollback undoes the insert and the lock
	}
	return lockID, tx.Commit()
}

// SqlxCloseGuarded closes an invoice in an sqlx transaction that commits
// only while lease holds: guard.HoldLease takes the *sqlx.Tx as it is.
func SqlxCloseGuarded(ctx context.Context, dbx *sqlx.DB, guard *txguard.Guard, lease txguard.Lease, id int64) error {
	tx, err := dbx.BeginTxx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() // after Commit, a no-op
	held, err := guard.HoldLease(ctx, tx, lease)
	if err != nil {
		return err // errors.Is(err, syncguard.ErrLockLost): nothing is written
	}
	if _, err := tx.ExecContext(ctx, `UPDATE invoices SET status = 'closed', fence = $1 WHERE id = $2`, string(held.Fence), id); err != nil {
		return guard.Classify(ctx, err)
	}
	return tx.Commit()
}
