package advisory

import (
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	_ "embed"
	"errors"
	"sync"

	"github.com/syncguard/syncguard-go/internal/errwrap"
	"github.com/syncguard/syncguard-go/syncguard"
)

// ErrNotHeld is the cause (errors.Is) of the error returned when an unlock
// finds that the session did not hold the lock: pg_advisory_unlock returned
// false. It means the lock was unlocked elsewhere on the same connection,
// or, behind a pooler in transaction mode (PgBouncer), that the unlock ran
// on another server session than the lock, where it did nothing: the lock
// is still held over there.
var ErrNotHeld = errors.New("advisory: lock not held by this session")

//go:embed sql/held.sql
var sqlHeld string

// SessionLock is a session-scoped advisory lock held by one pinned
// connection. Unlock or Close it; until then the connection holds the lock
// even across transactions, and it is lost only when the connection ends.
//
// A SessionLock never lets a connection go back to the pool while it might
// still hold the lock: when the unlock cannot be confirmed, the connection
// is discarded, which ends its server session and releases every lock it
// held.
type SessionLock struct {
	l     *Locker
	conn  *sql.Conn
	key   Key
	owned bool // the connection came from LockSession: Unlock returns it

	mu     sync.Mutex
	closed bool
}

// LockConn takes the session-scoped lock key on conn (pg_advisory_lock),
// waiting as long as ctx allows. Use a *sql.Conn, never a *sql.DB: on a
// pool the unlock could run on another connection and do nothing.
//
// Session locks stack: taking key twice on the same conn needs two unlocks.
//
// When ctx ends while waiting, the wait is cancelled on the server: Aborted
// for a cancelled ctx, AcquisitionTimeout for a passed deadline (or
// lock_timeout). conn stays usable and holds nothing new; if the lock was
// granted in the same instant, it is unlocked again, and if that cannot be
// confirmed conn is discarded (sql.ErrConnDone afterwards) so that no
// stray lock survives.
func (l *Locker) LockConn(ctx context.Context, conn *sql.Conn, key Key) (*SessionLock, error) {
	const op = "advisory.lockConn"
	if err := l.check(op, conn == nil, "conn", key, Session); err != nil {
		return nil, err
	}
	if ctx.Err() != nil {
		return nil, l.wrap(ctx, op, key, ctx.Err())
	}
	if err := l.lockSession(ctx, op, conn, key); err != nil {
		return nil, err
	}
	return &SessionLock{l: l, conn: conn, key: key}, nil
}

// TryLockConn takes the session-scoped lock key on conn if it is free
// (pg_try_advisory_lock) and never waits: ok false, with a nil
// *SessionLock, means another session holds it.
func (l *Locker) TryLockConn(ctx context.Context, conn *sql.Conn, key Key) (lock *SessionLock, ok bool, err error) {
	const op = "advisory.tryLockConn"
	if err := l.check(op, conn == nil, "conn", key, Session); err != nil {
		return nil, false, err
	}
	if ctx.Err() != nil {
		return nil, false, l.wrap(ctx, op, key, ctx.Err())
	}
	got, err := l.trySession(ctx, conn, key)
	if err != nil || !got {
		return nil, false, l.wrap(ctx, op, key, err)
	}
	return &SessionLock{l: l, conn: conn, key: key}, true, nil
}

// UnlockConn releases one hold of the session-scoped lock key on conn
// (pg_advisory_unlock). false, with a nil error, means conn held no such
// lock (see ErrNotHeld for why that happens); PostgreSQL's warning is not
// an error. Prefer SessionLock.Unlock, which also protects the pool.
func (l *Locker) UnlockConn(ctx context.Context, conn *sql.Conn, key Key) (bool, error) {
	const op = "advisory.unlockConn"
	if err := l.check(op, conn == nil, "conn", key, Session); err != nil {
		return false, err
	}
	if ctx.Err() != nil {
		return false, l.wrap(ctx, op, key, ctx.Err())
	}
	var ok bool
	err := l.run(ctx, nil, func(c context.Context) error {
		return conn.QueryRowContext(c, queries[key.form].unlock, key.args()...).Scan(&ok)
	})
	if err != nil {
		return false, l.wrap(ctx, op, key, err)
	}
	return ok, nil
}

// LockSession is LockConn on a connection of its own from the Locker's
// pool: the SessionLock owns it, and Unlock or Close returns it to the pool
// (or discards it, see SessionLock). Use it for a singleton job:
//
//	lock, err := locker.LockSession(ctx, key)
//	if err != nil { return err }
//	defer lock.Close()
func (l *Locker) LockSession(ctx context.Context, key Key) (*SessionLock, error) {
	const op = "advisory.lockSession"
	if err := l.check(op, false, "", key, Session); err != nil {
		return nil, err
	}
	conn, err := l.conn(ctx, op, key)
	if err != nil {
		return nil, err
	}
	if err := l.lockSession(ctx, op, conn, key); err != nil {
		conn.Close()
		return nil, err
	}
	return &SessionLock{l: l, conn: conn, key: key, owned: true}, nil
}

// TryLockSession is TryLockConn on a connection of its own from the
// Locker's pool, like LockSession. When ok is false the connection is
// already back in the pool. The scheduler pattern of the advisory-locks
// document:
//
//	lock, ok, err := locker.TryLockSession(ctx, cleanupLock)
//	if err != nil || !ok { return err } // another instance runs it
//	defer lock.Close()
func (l *Locker) TryLockSession(ctx context.Context, key Key) (lock *SessionLock, ok bool, err error) {
	const op = "advisory.tryLockSession"
	if err := l.check(op, false, "", key, Session); err != nil {
		return nil, false, err
	}
	conn, err := l.conn(ctx, op, key)
	if err != nil {
		return nil, false, err
	}
	got, err := l.trySession(ctx, conn, key)
	if err != nil || !got {
		conn.Close()
		return nil, false, l.wrap(ctx, op, key, err)
	}
	return &SessionLock{l: l, conn: conn, key: key, owned: true}, true, nil
}

func (l *Locker) conn(ctx context.Context, op string, key Key) (*sql.Conn, error) {
	if ctx.Err() != nil {
		return nil, l.wrap(ctx, op, key, ctx.Err())
	}
	conn, err := l.db.Conn(ctx)
	if err != nil {
		return nil, l.wrap(ctx, op, key, err)
	}
	return conn, nil
}

func (l *Locker) trySession(ctx context.Context, conn *sql.Conn, key Key) (bool, error) {
	var got bool
	err := l.run(ctx, nil, func(c context.Context) error {
		return conn.QueryRowContext(c, queries[key.form].trySession, key.args()...).Scan(&got)
	})
	return got, err
}

// lockSession is the blocking session lock: a try that reads the backend
// pid and backend_start, then, if the lock is taken, the wait, cancellable
// server-side.
func (l *Locker) lockSession(ctx context.Context, op string, conn *sql.Conn, key Key) error {
	q := queries[key.form]
	waited, err := l.tryThenWait(ctx, op, key, conn, q.trySessionPID, q.session)
	if err == nil || !waited {
		return err
	}
	werr := l.waitErr(ctx, op, key, err)
	l.cleanupFailedWait(ctx, conn, key)
	return werr
}

// cleanupFailedWait makes sure a failed wait left no lock on conn. The try
// before the wait failed, so this session held no lock on key then; one it
// holds now was granted just as the wait was cancelled. When that cannot be
// checked or undone, conn is discarded.
func (l *Locker) cleanupFailedWait(ctx context.Context, conn *sql.Conn, key Key) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.unlockTimeout)
	defer cancel()
	classid, objid, sub := key.lockTag()
	var n int64
	err := conn.QueryRowContext(cctx, sqlHeld, classid, objid, sub).Scan(&n)
	if err == nil && n == 0 {
		return
	}
	if err == nil {
		var ok bool
		err = conn.QueryRowContext(cctx, queries[key.form].unlock, key.args()...).Scan(&ok)
		if err == nil && ok {
			return
		}
	}
	discard(conn)
}

// discard closes conn's driver connection instead of returning it to the
// pool; conn is unusable afterwards (sql.ErrConnDone).
func discard(conn *sql.Conn) {
	_ = conn.Raw(func(any) error { return sqldriver.ErrBadConn })
}

// Key returns the lock's key.
func (s *SessionLock) Key() Key { return s.key }

// Conn returns the pinned connection holding the lock, for work that must
// run in the same session. Do not close it while the lock is held; a
// connection from LockSession is closed by Unlock.
func (s *SessionLock) Conn() *sql.Conn { return s.conn }

// Held reports whether the session still holds the lock, from pg_locks. A
// session lock has no expiry, but it ends with its connection (a network
// failure, a server restart, pg_terminate_backend): a long-running holder
// can call Held before each unit of work. An error here usually means the
// connection is gone, and the lock with it. After Unlock, Held is false
// without I/O.
func (s *SessionLock) Held(ctx context.Context) (bool, error) {
	const op = "advisory.held"
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false, nil
	}
	if ctx.Err() != nil {
		return false, s.l.wrap(ctx, op, s.key, ctx.Err())
	}
	classid, objid, sub := s.key.lockTag()
	var n int64
	err := s.l.run(ctx, nil, func(c context.Context) error {
		return s.conn.QueryRowContext(c, sqlHeld, classid, objid, sub).Scan(&n)
	})
	if err != nil {
		return false, s.l.wrap(ctx, op, s.key, err)
	}
	return n > 0, nil
}

// Unlock releases the lock (pg_advisory_unlock) and, for a LockSession
// lock, returns the connection to the pool. It always ends the hold:
//
//   - It runs even when ctx is already done (for at most CancelGrace), since
//     an unlock skipped would leave the lock held.
//   - When the unlock fails, the connection is discarded, which ends its
//     server session and so its locks, and the error says so. A LockConn
//     caller's *sql.Conn is then closed (sql.ErrConnDone).
//   - When PostgreSQL reports that the session did not hold the lock, the
//     error wraps ErrNotHeld (code Internal); the connection is fine.
//
// Unlock after Unlock or Close does nothing and returns nil.
func (s *SessionLock) Unlock(ctx context.Context) error {
	const op = "advisory.unlock"
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	var ok bool
	err := s.l.run(ctx, nil, func(c context.Context) error {
		return s.conn.QueryRowContext(c, queries[s.key.form].unlock, s.key.args()...).Scan(&ok)
	})
	if err != nil {
		e := errwrap.Wrap(ctx, op, s.l.dialect, err)
		e.Key = s.key.String()
		const gone = "the connection was discarded, ending its session and with it the lock"
		if e.Msg != "" {
			e.Msg += "; " + gone
		} else {
			e.Msg = gone
		}
		discard(s.conn)
		if s.owned {
			s.conn.Close()
		}
		return e
	}
	if s.owned {
		s.conn.Close()
	}
	if !ok {
		return &syncguard.Error{Op: op, Code: syncguard.CodeInternal, Key: s.key.String(), Err: ErrNotHeld,
			Msg: "pg_advisory_unlock found no such lock held by this session: it was unlocked elsewhere on the " +
				"connection, or statements do not reach the same server session (a pooler in transaction mode?)"}
	}
	return nil
}

// Close is Unlock with a context bounded by Config.UnlockTimeout, for
// defer.
func (s *SessionLock) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), s.l.unlockTimeout)
	defer cancel()
	return s.Unlock(ctx)
}
