package conformance

import (
	"errors"
	"time"

	"github.com/syncguard/syncguard-go/advisory"
	"github.com/syncguard/syncguard-go/syncguard"
)

// A session lock whose *sql.Conn goes back to the pool while the lock is
// held is a misuse: the next user of that pooled connection would re-enter
// the lock as if it were free (session locks stack), and the first
// SessionLock could no longer unlock it. The Locker detects both sides and
// reports them, and leaves no lock held behind.
func init() {
	registerAdvisory("Advisory/ConnReturnedHoldingIsReported", func(e *sqlEnv) {
		e.needSessionState("session-level advisory locks")
		a := newAdvEnv(e)
		// A pool of one connection, so the next Conn is the returned one.
		db, l := a.onePool()
		key := a.advKey("returned")

		// The next pool user re-acquires the leaked lock.
		conn := a.advConn(db)
		first, err := l.LockConn(e.ctx, conn, key)
		e.must(err, "LockConn")
		pid := a.advPID(conn)
		e.must(conn.Close(), "Conn.Close") // the misuse
		next := a.advConn(db)
		if p := a.advPID(next); p != pid {
			e.t.Skipf("setup: the pool did not hand out the same connection again (pid %d, then %d)", pid, p)
		}
		second, err := l.LockConn(e.ctx, next, key)
		if second != nil || !errors.Is(err, advisory.ErrConnReturnedHolding) {
			e.t.Errorf("rule: a lock re-entered on a pooled connection that still holds it for another SessionLock is reported as ErrConnReturnedHolding, not granted; got %v, %v", second, err)
		}
		// The discarded connection's session ends when the server notices
		// the closed socket: soon, not at once.
		if !a.advEventually(func() bool { return a.advPIDHolds(pid) == 0 }) {
			e.t.Errorf("rule: after detecting the returned connection no lock is left on its session; pid %d still holds %d advisory locks 10 s later", pid, a.advPIDHolds(pid))
		}
		err = first.Unlock(e.ctx)
		if !errors.Is(err, advisory.ErrConnReturnedHolding) || advCode(err) != syncguard.ErrInvalidArgument {
			e.t.Errorf("rule: Unlock of a SessionLock whose conn went back to the pool reports the misuse (ErrConnReturnedHolding, InvalidArgument); got %v", err)
		}

		// Unlock alone, with no other user in between: the lock must not be
		// reported as ended with the session while pg_locks still shows it.
		conn = a.advConn(db)
		lock, err := l.LockConn(e.ctx, conn, key)
		e.must(err, "LockConn")
		pid = a.advPID(conn)
		e.must(conn.Close(), "Conn.Close") // the misuse
		err = lock.Unlock(e.ctx)
		if !errors.Is(err, advisory.ErrConnReturnedHolding) || advCode(err) != syncguard.ErrInvalidArgument {
			e.t.Errorf("rule: Unlock of a SessionLock whose conn went back to the pool reports the misuse (ErrConnReturnedHolding, InvalidArgument); got %v", err)
		}
		if !a.advEventually(func() bool { return a.advPIDHolds(pid) == 0 }) {
			e.t.Errorf("rule: Unlock of a SessionLock whose conn went back to the pool leaves no lock held; pid %d still holds %d advisory locks 10 s later (Unlock said %v)", pid, a.advPIDHolds(pid), err)
		}
		held, ok, herr := a.l2.TryLockSession(e.ctx, key)
		if herr != nil || !ok {
			e.t.Errorf("rule: after the misuse is reported the key is free for others; TryLockSession = %v, %v", ok, herr)
		} else {
			e.must(held.Close(), "Close")
		}
	})
}

// advEventually polls cond every 10 ms for up to 10 s × the slowdown (a
// bound only a session that never ends exceeds) and reports whether it
// came true.
func (a *advEnv) advEventually(cond func() bool) bool {
	deadline := time.Now().Add(a.slow().scale(10 * time.Second))
	for !cond() {
		if time.Now().After(deadline) || a.ctx.Err() != nil {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}
