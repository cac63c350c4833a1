package conformance

import (
	"context"
	"database/sql"
	"time"

	"github.com/syncguard/syncguard-go/advisory"
	"github.com/syncguard/syncguard-go/syncguard"
)

// advEnv is what an Advisory case works with: a Locker on each of the
// case's pools, and a random namespace so that its advisory ids are its
// own (advisory locks are server-wide, and cases run in parallel).
type advEnv struct {
	*sqlEnv
	ns    string
	reg   *advisory.Registry
	l, l2 *advisory.Client
}

func newAdvEnv(e *sqlEnv) *advEnv {
	e.t.Helper()
	a := &advEnv{sqlEnv: e, ns: "conformance-" + randHex(8)}
	a.reg = advisory.MustNewRegistry(a.ns)
	a.l = a.locker(e.db)
	a.l2 = a.locker(e.db2)
	return a
}

// onePool opens a pool of one connection (kept idle) and a Locker on it:
// the next Conn of the pool is the one the last user returned.
func (a *advEnv) onePool() (*sql.DB, *advisory.Client) {
	a.t.Helper()
	db := a.h.Open(a.t)
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	return db, a.locker(db)
}

func (a *advEnv) locker(db *sql.DB) *advisory.Client {
	a.t.Helper()
	l, err := advisory.New(db, &advisory.Config{Dialect: a.h.Dialect, Registry: a.reg})
	if err != nil {
		a.t.Fatalf("setup: advisory.New: %v", err)
	}
	return l
}

// advKey is a key unique to this case.
func (a *advEnv) advKey(name string) advisory.Key {
	a.t.Helper()
	k, err := advisory.FromName(a.ns, name)
	if err != nil {
		a.t.Fatalf("setup: FromName: %v", err)
	}
	return k
}

type rowQuerier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// advPID is the backend pid of a transaction, connection or pool.
func (a *advEnv) advPID(q rowQuerier) int {
	a.t.Helper()
	var pid int
	if err := q.QueryRowContext(a.ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		a.t.Fatalf("setup: pg_backend_pid: %v", err)
	}
	return pid
}

// advRows are the pg_locks rows of key, via the monitoring API.
func (a *advEnv) advRows(key advisory.Key) []advisory.Entry {
	a.t.Helper()
	all, err := a.l.Locks(a.ctx)
	if err != nil {
		a.t.Fatalf("rule: Locks must not fail; got %v", err)
	}
	var out []advisory.Entry
	for _, r := range all {
		if r.Key.Same(key) {
			out = append(out, r)
		}
	}
	return out
}

// advPIDHolds counts the advisory locks pid holds or awaits (any key).
func (a *advEnv) advPIDHolds(pid int) int {
	a.t.Helper()
	var n int
	if err := a.db.QueryRowContext(a.ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = $1`, pid).Scan(&n); err != nil {
		a.t.Fatalf("setup: reading pg_locks: %v", err)
	}
	return n
}

// advWaitFor polls cond every 10 ms until it holds, 10 s (× the slowdown)
// pass or the case deadline passes.
func (a *advEnv) advWaitFor(what string, cond func() bool) {
	a.t.Helper()
	deadline := time.Now().Add(a.slow().scale(10 * time.Second))
	for !cond() {
		if time.Now().After(deadline) {
			a.t.Fatalf("setup: timed out waiting for %s", what)
		}
		select {
		case <-time.After(10 * time.Millisecond):
		case <-a.ctx.Done():
			a.t.Fatalf("setup: the case deadline passed waiting for %s", what)
		}
	}
}

// advWaiting reports whether pid waits for key.
func (a *advEnv) advWaiting(key advisory.Key, pid int) bool {
	for _, r := range a.advRows(key) {
		if r.PID == pid && !r.Granted {
			return true
		}
	}
	return false
}

func (a *advEnv) advConn(db *sql.DB) *sql.Conn {
	a.t.Helper()
	c, err := db.Conn(a.ctx)
	if err != nil {
		a.t.Fatalf("setup: db.Conn: %v", err)
	}
	a.t.Cleanup(func() { _ = c.Close() })
	return c
}

// advHold takes key as a session lock on a pool of its own and returns the
// holder's pid and the function that releases it (also a cleanup).
func (a *advEnv) advHold(key advisory.Key) (pid int, release func()) {
	a.t.Helper()
	lock, err := a.locker(a.h.Open(a.t)).LockSession(a.ctx, key)
	if err != nil {
		a.t.Fatalf("setup: LockSession of a free key: %v", err)
	}
	pid = a.advPID(lock.Conn())
	release = func() {
		if err := lock.Close(); err != nil {
			a.t.Errorf("rule: unlocking a held session lock succeeds; got %v", err)
		}
	}
	a.t.Cleanup(func() { _ = lock.Close() })
	return pid, release
}

// advHoldTx takes key as a transaction lock in a transaction on a pool of
// its own (this works behind a pooler in transaction mode too) and returns
// the holder's pid and the function that commits it (also a cleanup).
func (a *advEnv) advHoldTx(key advisory.Key) (pid int, release func()) {
	a.t.Helper()
	db := a.h.Open(a.t)
	tx := a.begin(db)
	if err := a.locker(db).LockTx(a.ctx, tx, key); err != nil {
		a.t.Fatalf("setup: LockTx of a free key: %v", err)
	}
	pid = a.advPID(tx)
	release = func() {
		if err := tx.Commit(); err != nil {
			a.t.Errorf("rule: committing the holder's transaction succeeds; got %v", err)
		}
	}
	return pid, release
}

func advCode(err error) syncguard.Code { return syncguard.CodeOf(err) }
