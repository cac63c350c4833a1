package examples

import (
	"context"
	"database/sql"
	"time"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"

	"github.com/syncguard/syncguard-go/syncguard"
)

// This repository has no ent schema, so these examples use ent's SQL
// driver (entgo.io/ent/dialect/sql) and its query builder directly, which
// is what generated ent code runs on. With generated code, make the client
// from the same driver: ent.NewClient(ent.Driver(drv)).

// EntCloseInvoice closes an invoice under its lock, writing with the
// lock's fence through ent's driver.
func EntCloseInvoice(ctx context.Context, drv *entsql.Driver, locks *syncguard.Backend, id int64) error {
	return syncguard.WithLock(ctx, locks, lockKey(id), func(ctx context.Context, lease *syncguard.Lease) error {
		fence := string(lease.Fence())
		query, args := entsql.Dialect(dialect.Postgres).Update("invoices").
			Set("status", "closed").Set("fence", fence).
			Where(entsql.And(entsql.EQ("id", id), entsql.Or(entsql.IsNull("fence"), entsql.LT("fence", fence)))).
			Query()
		var res sql.Result
		if err := drv.Exec(ctx, query, args, &res); err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return ErrStaleFence
		}
		return nil
	}, nil)
}

// EntCreateLocked inserts an invoice and takes its lock in one
// transaction: ent's driver runs on the caller's *sql.Tx (with generated
// code, ent.NewClient(ent.Driver(txDrv)) is a client inside it), and
// WithTx gets the same *sql.Tx.
func EntCreateLocked(ctx context.Context, db *sql.DB, locks *syncguard.Backend, inv Invoice, then func() error) (string, error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return "", err
	}
	defer tx.Rollback() // after Commit, a no-op
	txDrv := entsql.NewDriver(dialect.Postgres, entsql.Conn{ExecQuerier: tx})
	query, args := entsql.Dialect(dialect.Postgres).Insert("invoices").
		Columns("id", "status").Values(inv.ID, inv.Status).Query()
	if err := txDrv.Exec(ctx, query, args, nil); err != nil {
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
