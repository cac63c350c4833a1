package downstream

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/syncguard/syncguard-go/syncguard"
)

// TxLocks is what code that takes locks inside its own transactions
// accepts: a *syncguard.Backend in production, a *syncguardtest.Backend in
// unit tests. Each one's WithTx returns its own type, hence B.
type TxLocks[B syncguard.LockBackend] interface {
	syncguard.LockBackend
	WithTx(tx syncguard.Tx) B
}

// ErrOrderBusy: another instance holds the order's lock.
var ErrOrderBusy = errors.New("order is locked by another instance")

// CreateOrder inserts an order and takes its lock in one transaction: if
// either fails, neither stays. Callers pass their *syncguard.Backend as it
// is (B is inferred): CreateOrder(ctx, db, locks, id).
func CreateOrder[B syncguard.LockBackend](ctx context.Context, db *sql.DB, locks TxLocks[B], id string) (lockID string, err error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return "", err
	}
	defer tx.Rollback() // after Commit, a no-op
	if _, err := tx.ExecContext(ctx, `INSERT INTO orders (id) VALUES ($1)`, id); err != nil {
		return "", err
	}
	r, err := locks.WithTx(tx).Acquire(ctx, "order:"+id, time.Minute)
	switch {
	case err != nil:
		return "", err
	case !r.OK:
		return "", ErrOrderBusy
	}
	return r.LockID, tx.Commit()
}
