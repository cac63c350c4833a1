package examples

import (
	"context"

	"github.com/jmoiron/sqlx"

	"github.com/syncguard/syncguard-go/syncguard"
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
