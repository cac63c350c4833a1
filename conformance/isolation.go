package conformance

import (
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/syncguard/syncguard-go/syncguard"
)

// The pool-path statements give the same answers whatever the session's
// default isolation level (default_transaction_isolation, set by a role, a
// database or the DSN). Under REPEATABLE READ and SERIALIZABLE, PostgreSQL
// aborts a statement with a serialization failure (40001) where READ
// COMMITTED re-checks the latest row version, and SERIALIZABLE also aborts
// statements on unrelated keys (predicate locks cover index pages). None
// of that may show: not as "locked" for a free key, not as an error.
func init() {
	for _, level := range []string{"read committed", "repeatable read", "serializable"} {
		name := strings.ReplaceAll(strings.Title(level), " ", "") //nolint:staticcheck // ASCII level names
		registerSQL("Isolation/"+name+"/OwnKeysNeverLocked", func(e *sqlEnv) { isolationOwnKeys(e, level) })
		registerSQL("Isolation/"+name+"/ConcurrentUpdateReChecked", func(e *sqlEnv) { isolationConcurrentUpdate(e, level) })
	}
}

// isolationPool opens a pool of n connections whose sessions all default to
// level, as a role, database or DSN setting would make them: it opens the n
// connections, sets default_transaction_isolation on each and keeps them
// (no more connections, none closed for age or idleness).
func (e *sqlEnv) isolationPool(level string, n int) (*sql.DB, *syncguard.Backend) {
	e.t.Helper()
	e.needSessionState("SET default_transaction_isolation, standing in for a role, database or DSN setting")
	db := e.h.Open(e.t)
	db.SetMaxOpenConns(n)
	db.SetMaxIdleConns(n)
	db.SetConnMaxLifetime(0)
	db.SetConnMaxIdleTime(0)
	conns := make([]*sql.Conn, n)
	for i := range conns {
		c, err := db.Conn(e.ctx)
		if err != nil {
			e.t.Fatalf("setup: connection %d: %v", i, err)
		}
		if _, err := c.ExecContext(e.ctx, fmt.Sprintf("SET default_transaction_isolation = '%s'", level)); err != nil {
			e.t.Fatalf("setup: SET default_transaction_isolation: %v", err)
		}
		var got string
		if err := c.QueryRowContext(e.ctx, "SHOW transaction_isolation").Scan(&got); err != nil || got != level {
			e.t.Fatalf("setup: a new transaction on the session runs at %q (%v), want %q", got, err, level)
		}
		conns[i] = c
	}
	for _, c := range conns {
		_ = c.Close()
	}
	return db, e.newBackend(db, nil)
}

// isolationOwnKeys: workers that each acquire and release only their own
// key never meet contention, so every acquire succeeds and every release
// finds its lock.
func isolationOwnKeys(e *sqlEnv, level string) {
	const workers, rounds = 8, 25
	_, b := e.isolationPool(level, workers)
	failures := e.ownKeys(workers, rounds, 5, "own", func(int) syncguard.LockBackend { return b },
		func(b syncguard.LockBackend, k string, fail func(string, ...any)) {
			r, err := b.Acquire(e.ctx, k, 30*time.Second)
			if err != nil || !r.OK {
				fail("acquire of its own free key got %+v, %v", r, err)
				return
			}
			if rel, err := b.Release(e.ctx, r.LockID); err != nil || !rel.OK {
				fail("release of its own lock got %+v, %v", rel, err)
			}
		})
	if failures.any() {
		e.t.Errorf("rule: with default_transaction_isolation = %s, a free key is acquired and a held lock released exactly as under read committed; %d workers on their own keys saw:\n  %s",
			level, workers, failures)
	}
}

// isolationConcurrentUpdate: an operation that waits for a row another
// transaction updates and commits re-checks the latest version, as under
// read committed: a still-expired row is taken over, a still-live lock is
// extended and released.
func isolationConcurrentUpdate(e *sqlEnv, level string) {
	_, b := e.isolationPool(level, 2)
	touch := func(k string) *sql.Tx {
		_, storage, _ := e.derive(k)
		tx := e.begin(e.db)
		e.txExec(tx, `UPDATE `+e.locksTable()+` SET "expires_at_ms" = "expires_at_ms" WHERE "key" = $1`, storage)
		return tx
	}
	// run starts op, waits until it is blocked on the row lock that tx
	// holds, commits tx and returns op's outcome.
	run := func(what string, tx *sql.Tx, op func() error) error {
		returned := make(chan struct{})
		errc := make(chan error, 1)
		go func() {
			defer close(returned)
			errc <- op()
		}()
		if pid := e.waitLockWaiter(e.cfg.TableName, returned); pid == 0 {
			e.t.Logf("%s did not wait for the row lock (it ran before or after the update); the check is weaker", what)
		}
		if err := tx.Commit(); err != nil {
			e.t.Fatalf("setup: commit: %v", err)
		}
		return <-errc
	}

	// Takeover of an expired row.
	k := e.key("isoexpired")
	old := e.mustAcquire(e.pb, k, 30*time.Second)
	_, storage, _ := e.derive(k)
	e.exec(`UPDATE `+e.locksTable()+` SET "expires_at_ms" = "expires_at_ms" - 3600000 WHERE "key" = $1`, storage)
	var r syncguard.AcquireResult
	err := run("acquire", touch(k), func() (err error) {
		r, err = b.Acquire(e.ctx, k, 30*time.Second)
		return err
	})
	if err != nil || !r.OK || r.Fence <= old.Fence {
		e.t.Errorf("rule: with default_transaction_isolation = %s, an acquire that waited for a concurrent update of an expired row takes it over (fence above %s), as under read committed; got %+v, %v",
			level, old.Fence, r, err)
	}

	// Extend and release of a live lock.
	k = e.key("isolive")
	h := e.mustAcquire(e.pb, k, 30*time.Second)
	var x syncguard.ExtendResult
	err = run("extend", touch(k), func() (err error) {
		x, err = b.Extend(e.ctx, h.LockID, time.Minute)
		return err
	})
	if err != nil || !x.OK {
		e.t.Errorf("rule: with default_transaction_isolation = %s, an extend that waited for a concurrent update of its live lock extends it, as under read committed; got %+v, %v", level, x, err)
	}
	var rel syncguard.ReleaseResult
	err = run("release", touch(k), func() (err error) {
		rel, err = b.Release(e.ctx, h.LockID)
		return err
	})
	if err != nil || !rel.OK {
		e.t.Errorf("rule: with default_transaction_isolation = %s, a release that waited for a concurrent update of its live lock releases it, as under read committed; got %+v, %v", level, rel, err)
	}
}
