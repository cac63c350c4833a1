package conformance

import (
	"context"
	"database/sql"
	"time"
)

func init() {
	// A pool of one connection held by the caller's transaction: the first
	// WithTx operations must not wait for a second connection to prepare
	// their statements on the pool (a deadlock until the context ends).
	registerSQL("Transactions/SingleConnectionPoolNeverDeadlocks", func(e *sqlEnv) {
		db := e.h.Open(e.t)
		db.SetMaxOpenConns(1)
		b := e.newBackend(db, nil) // nothing prepared yet
		tx := e.begin(db)
		defer tx.Rollback()
		ctx, cancel := context.WithTimeout(e.ctx, e.slow().scale(5*time.Second))
		defer cancel()
		bt := b.WithTx(tx)
		k := e.key("onepool")
		start := time.Now()
		r, err := bt.Acquire(ctx, k, 30*time.Second)
		if err != nil || !r.OK {
			e.t.Fatalf("rule: WithTx works on a pool whose only connection the transaction holds; Acquire after %v: %+v, %v", time.Since(start), r, err)
		}
		if ext, err := bt.Extend(ctx, r.LockID, time.Minute); err != nil || !ext.OK {
			e.t.Errorf("rule: WithTx works on a one-connection pool; Extend: %+v, %v", ext, err)
		}
		if locked, err := bt.IsLocked(ctx, k); err != nil || !locked {
			e.t.Errorf("rule: WithTx works on a one-connection pool; IsLocked: %v, %v", locked, err)
		}
		if rel, err := bt.Release(ctx, r.LockID); err != nil || !rel.OK {
			e.t.Errorf("rule: WithTx works on a one-connection pool; Release: %+v, %v", rel, err)
		}
		if err := tx.Commit(); err != nil {
			e.t.Fatalf("setup: commit: %v", err)
		}
		// After the transaction, the pool path works too.
		if r, err := b.Acquire(ctx, k, time.Second); err != nil || !r.OK {
			e.t.Errorf("rule: the pool path works after a WithTx transaction; Acquire: %+v, %v", r, err)
		}
	})
}

// queriesOnly is a transaction of another kind than *sql.Tx, as an ORM
// hands out (GORM's tx.Statement.ConnPool): only the two query methods.
type queriesOnly struct{ tx *sql.Tx }

func (q queriesOnly) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	return q.tx.QueryRowContext(ctx, query, args...)
}

func (q queriesOnly) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	return q.tx.QueryContext(ctx, query, args...)
}

func init() {
	registerSQL("Transactions/WithTxOnAnyTx", func(e *sqlEnv) {
		// The pool path first, so that the statements are prepared: the
		// view must not use them through a transaction that cannot.
		warm := e.key("warm")
		e.release(e.b, e.mustAcquire(e.b, warm, time.Second).LockID)
		for _, end := range []string{"rollback", "commit"} {
			k := e.key("anytx" + end)
			tx := e.begin(e.db)
			bt := e.pb.WithTx(queriesOnly{tx})
			r, err := bt.Acquire(e.ctx, k, 30*time.Second)
			if err != nil || !r.OK {
				e.t.Fatalf("rule: WithTx works on any Tx (here one with only QueryRowContext and QueryContext); Acquire: %+v, %v", r, err)
			}
			if locked, err := bt.IsLocked(e.ctx, k); err != nil || !locked {
				e.t.Errorf("rule: the transaction sees its own lock; IsLocked in tx = %v, %v", locked, err)
			}
			if e.isLocked(e.b2, k) {
				e.t.Errorf("rule: a lock taken in a transaction is invisible to others until commit")
			}
			if end == "commit" {
				e.must(tx.Commit(), "Commit")
			} else {
				e.must(tx.Rollback(), "Rollback")
			}
			if got, want := e.isLocked(e.b2, k), end == "commit"; got != want {
				e.t.Errorf("rule: a lock taken through any Tx commits and rolls back with it; after %s IsLocked = %v", end, got)
			}
		}
	})
}
