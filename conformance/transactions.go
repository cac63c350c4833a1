package conformance

import (
	"errors"
	"strings"
	"time"

	"github.com/syncguard/syncguard-go/internal/rules"
	"github.com/syncguard/syncguard-go/syncguard"
)

func init() {
	registerSQL("Transactions/InvisibleUntilCommit", func(e *sqlEnv) {
		k := e.key("txcommit")
		tx := e.begin(e.db)
		bt := e.pb.WithTx(tx)
		r, err := bt.Acquire(e.ctx, k, 30*time.Second)
		if err != nil || !r.OK {
			e.t.Fatalf("rule: acquire inside a transaction works like outside; got %+v, %v", r, err)
		}
		if locked, err := bt.IsLocked(e.ctx, k); err != nil || !locked {
			e.t.Errorf("rule: the transaction sees its own lock; IsLocked in tx = %v, %v", locked, err)
		}
		if info, err := bt.LookupID(e.ctx, r.LockID); err != nil || info == nil || info.Fence != r.Fence {
			e.t.Errorf("rule: the transaction sees its own lock; LookupID in tx = %+v, %v", info, err)
		}
		if e.isLocked(e.b2, k) {
			e.t.Errorf("rule: a lock taken in a transaction is invisible to others until commit; IsLocked on another pool = true")
		}
		if info, _ := e.b2.LookupKey(e.ctx, k); info != nil {
			e.t.Errorf("rule: a lock taken in a transaction is invisible to others until commit; LookupKey on another pool = %+v", info)
		}
		if info, _ := e.b2.LookupID(e.ctx, r.LockID); info != nil {
			e.t.Errorf("rule: a lock taken in a transaction is invisible to others until commit; LookupID on another pool = %+v", info)
		}
		if err := tx.Commit(); err != nil {
			e.t.Fatalf("setup: commit: %v", err)
		}
		info, err := e.b2.LookupID(e.ctx, r.LockID)
		e.must(err, "LookupID")
		if info == nil || info.Fence != r.Fence || !info.ExpiresAt.Equal(r.ExpiresAt) || !e.isLocked(e.b2, k) {
			e.t.Errorf("rule: after commit everyone sees the transaction's lock with its fence and expiry; acquire %+v, lookup %+v", r, info)
		}
		if rel := e.release(e.b2, r.LockID); !rel.OK {
			e.t.Errorf("rule: a committed transactional lock is released by its lockId from any pool; got %+v", rel)
		}
	})

	registerSQL("Transactions/GoneAfterRollback", func(e *sqlEnv) {
		k, first := e.hold("txrollback", 30*time.Second)
		e.release(e.b, first.LockID)
		counterBefore, _ := e.fenceCounter(k)
		tx := e.begin(e.db)
		r, err := e.pb.WithTx(tx).Acquire(e.ctx, k, 30*time.Second)
		if err != nil || !r.OK {
			e.t.Fatalf("rule: acquire inside a transaction works like outside; got %+v, %v", r, err)
		}
		if err := tx.Rollback(); err != nil {
			e.t.Fatalf("setup: rollback: %v", err)
		}
		if e.isLocked(e.b2, k) {
			e.t.Errorf("rule: a lock taken in a rolled-back transaction does not exist; IsLocked = true")
		}
		if info, _ := e.b2.LookupID(e.ctx, r.LockID); info != nil {
			e.t.Errorf("rule: a lock taken in a rolled-back transaction does not exist; LookupID = %+v", info)
		}
		if _, ok := e.rawLockRow(k); ok {
			e.t.Errorf("rule: a rolled-back acquire leaves no lock row")
		}
		if n, _ := e.fenceCounter(k); n != counterBefore {
			e.t.Errorf("rule: the fence increment rolls back with the transaction; counter %d before, %d after rollback", counterBefore, n)
		}
		if rel := e.release(e.b2, r.LockID); rel.OK || rel.Reason != syncguard.ReasonNotFound {
			e.t.Errorf("rule: the lockId of a rolled-back acquire is unknown; release got %+v", rel)
		}
		e.nextFenceAbove(k, first.Fence, "fences increase over committed acquires")
	})

	registerSQL("Transactions/AtomicWithCallerWrites", func(e *sqlEnv) {
		scratch := rules.QuoteIdent(strings.TrimSuffix(e.cfg.TableName, "_locks") + "_scratch")
		e.exec(`CREATE TABLE ` + scratch + ` (id int PRIMARY KEY, note text NOT NULL)`)
		e.t.Cleanup(func() { _, _ = e.db.Exec(`DROP TABLE IF EXISTS ` + scratch) })
		hasRow := func(id int) bool {
			var n int
			if err := e.db.QueryRowContext(e.ctx, `SELECT count(*) FROM `+scratch+` WHERE id = $1`, id).Scan(&n); err != nil {
				e.t.Fatalf("setup: reading the scratch table: %v", err)
			}
			return n == 1
		}

		// Committed together.
		k1 := e.key("txwrite1")
		tx := e.begin(e.db)
		e.txExec(tx, `INSERT INTO `+scratch+` VALUES (1, 'committed')`)
		r1, err := e.pb.WithTx(tx).Acquire(e.ctx, k1, 30*time.Second)
		if err != nil || !r1.OK {
			e.t.Fatalf("rule: acquire inside a transaction works like outside; got %+v, %v", r1, err)
		}
		if hasRow(1) || e.isLocked(e.b2, k1) {
			e.t.Errorf("rule: neither the caller's write nor the lock is visible before commit; row %v, locked %v", hasRow(1), e.isLocked(e.b2, k1))
		}
		if err := tx.Commit(); err != nil {
			e.t.Fatalf("setup: commit: %v", err)
		}
		if !hasRow(1) || !e.isLocked(e.b2, k1) {
			e.t.Errorf("rule: the lock and the caller's writes commit together; after commit row %v, locked %v", hasRow(1), e.isLocked(e.b2, k1))
		}

		// Rolled back together.
		k2 := e.key("txwrite2")
		tx = e.begin(e.db2)
		e.txExec(tx, `INSERT INTO `+scratch+` VALUES (2, 'rolled back')`)
		if r, err := e.pb2.WithTx(tx).Acquire(e.ctx, k2, 30*time.Second); err != nil || !r.OK {
			e.t.Fatalf("rule: acquire inside a transaction works like outside; got %+v, %v", r, err)
		}
		_ = tx.Rollback()
		if hasRow(2) || e.isLocked(e.b, k2) {
			e.t.Errorf("rule: the lock and the caller's writes roll back together; after rollback row %v, locked %v", hasRow(2), e.isLocked(e.b, k2))
		}

		// A failing write of the caller aborts the transaction: the lock taken
		// before it goes with it.
		k3 := e.key("txwrite3")
		tx = e.begin(e.db)
		bt := e.pb.WithTx(tx)
		if r, err := bt.Acquire(e.ctx, k3, 30*time.Second); err != nil || !r.OK {
			e.t.Fatalf("rule: acquire inside a transaction works like outside; got %+v, %v", r, err)
		}
		if _, err := tx.ExecContext(e.ctx, `INSERT INTO `+scratch+` VALUES (1, 'duplicate')`); err == nil {
			e.t.Fatalf("setup: a duplicate primary key was accepted")
		}
		if _, err := bt.Release(e.ctx, rules.GenerateLockID()); err == nil || errors.Is(err, syncguard.ErrInvalidArgument) {
			e.t.Errorf("rule: an operation in an aborted transaction fails with a driver-level error, not a result or InvalidArgument; got %v", err)
		}
		_ = tx.Rollback()
		if e.isLocked(e.b2, k3) {
			e.t.Errorf("rule: a lock taken in a transaction that failed later is rolled back with it; IsLocked(%q) = true", k3)
		}
		e.release(e.b, r1.LockID)
	})

	registerSQL("Transactions/ReleaseAndExtendRollBack", func(e *sqlEnv) {
		k, r := e.hold("txrelease", 30*time.Second)
		before, _ := e.rawLockRow(k)

		tx := e.begin(e.db)
		bt := e.pb.WithTx(tx)
		if rel, err := bt.Release(e.ctx, r.LockID); err != nil || !rel.OK {
			e.t.Fatalf("rule: the holder's release inside a transaction succeeds; got %+v, %v", rel, err)
		}
		if locked, _ := bt.IsLocked(e.ctx, k); locked {
			e.t.Errorf("rule: the transaction sees its own release; IsLocked in tx = true")
		}
		if !e.isLocked(e.b2, k) {
			e.t.Errorf("rule: an uncommitted release is invisible to others; IsLocked on another pool = false")
		}
		_ = tx.Rollback()
		if after, ok := e.rawLockRow(k); !ok || after != before {
			e.t.Errorf("rule: a rolled-back release leaves the lock as it was; before %+v after %+v (present %v)", before, after, ok)
		}

		tx = e.begin(e.db)
		if x, err := e.pb.WithTx(tx).Extend(e.ctx, r.LockID, time.Hour); err != nil || !x.OK {
			e.t.Fatalf("rule: the holder's extend inside a transaction succeeds; got %+v, %v", x, err)
		}
		_ = tx.Rollback()
		if after, ok := e.rawLockRow(k); !ok || after != before {
			e.t.Errorf("rule: a rolled-back extend leaves the expiry as it was; before %+v after %+v", before, after)
		}

		tx = e.begin(e.db)
		if rel, err := e.pb.WithTx(tx).Release(e.ctx, r.LockID); err != nil || !rel.OK {
			e.t.Fatalf("rule: the holder's release inside a transaction succeeds; got %+v, %v", rel, err)
		}
		if err := tx.Commit(); err != nil {
			e.t.Fatalf("setup: commit: %v", err)
		}
		if e.isLocked(e.b2, k) {
			e.t.Errorf("rule: a committed transactional release frees the key; IsLocked = true")
		}
	})

	registerSQL("Transactions/UncommittedAcquireExcludesOthers", func(e *sqlEnv) {
		k := e.key("txexclusive")
		tx := e.begin(e.db)
		r, err := e.pb.WithTx(tx).Acquire(e.ctx, k, 30*time.Second)
		if err != nil || !r.OK {
			e.t.Fatalf("rule: acquire inside a transaction works like outside; got %+v, %v", r, err)
		}
		got, err := e.acquireWhileOpen(tx, e.b2, k)
		if err != nil || got.OK || got.Reason != syncguard.ReasonLocked {
			e.t.Errorf("rule: while a transaction holds an uncommitted acquire, another acquire of the key gets reason %q (waiting or not), never the lock; got %+v, %v", syncguard.ReasonLocked, got, err)
		}
		if info, _ := e.b2.LookupKey(e.ctx, k); info == nil || info.LockIDHash != syncguard.HashKey(r.LockID) {
			e.t.Errorf("rule: the committed transactional lock is the key's only holder; lookup %+v", info)
		}
		e.release(e.b2, r.LockID)
	})
}
