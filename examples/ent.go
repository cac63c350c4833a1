package examples

import (
	"context"
	"database/sql"

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
	return closeWithFence(ctx, locks, id, func(ctx context.Context, fence string) (int64, error) {
		query, args := entsql.Dialect(dialect.Postgres).Update("invoices").
			Set("status", "closed").Set("fence", fence).
			Where(entsql.And(entsql.EQ("id", id), entsql.Or(entsql.IsNull("fence"), entsql.LT("fence", fence)))).
			Query()
		var res sql.Result
		err := drv.Exec(ctx, query, args, &res)
		return rowsAffected(res, err)
	})
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
	lockID, err := lockThen(ctx, locks.WithTx(tx), inv.ID, then)
	if err != nil {
		return lockID, err // the deferred Rollback undoes the insert and the lock
	}
	return lockID, tx.Commit()
}
