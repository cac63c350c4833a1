package conformance

import (
	"context"
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
		ctx, cancel := context.WithTimeout(e.ctx, 5*time.Second)
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
