package advisory

import (
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	_ "embed"
	"errors"
	"fmt"
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

// ErrConnReturnedHolding is the cause (errors.Is) of the error that reports
// a misuse: the *sql.Conn of a SessionLock (from LockConn or TryLockConn)
// was closed, and so returned to the pool, while the session still held
// the lock. The next user of that pooled connection would re-enter the lock
// (session locks stack) as if it were free, and Unlock could no longer
// reach it. The Client reports it from SessionLock.Unlock and Close (code
// InvalidArgument), and from a lock call that finds its connection already
// holding the key for such a SessionLock (code Internal; the connection is
// then discarded, which ends the leaked hold). Unlock before closing the
// connection.
var ErrConnReturnedHolding = errors.New("advisory: connection returned to the pool while holding a session lock")

//go:embed sql/end_leaked.sql
var sqlEndLeaked string

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
	l       *Client
	conn    *sql.Conn
	key     Key
	owned   bool      // the connection came from LockSession: Unlock returns it
	session backendID // the server session holding the lock

	mu     sync.Mutex
	closed bool
	leaked bool // its conn went back to the pool holding the lock (see newSessionLock)
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
func (l *Client) LockConn(ctx context.Context, conn *sql.Conn, key Key) (*SessionLock, error) {
	const op = "advisory.lockConn"
	if err := l.begin(ctx, op, conn == nil, "conn", key, Session); err != nil {
		return nil, err
	}
	b, err := l.lockSession(ctx, op, conn, key)
	if err != nil {
		return nil, err
	}
	return l.newSessionLock(op, conn, key, b, false)
}

// TryLockConn takes the session-scoped lock key on conn if it is free
// (pg_try_advisory_lock) and never waits: ok false, with a nil
// *SessionLock, means another session holds it.
func (l *Client) TryLockConn(ctx context.Context, conn *sql.Conn, key Key) (lock *SessionLock, ok bool, err error) {
	const op = "advisory.tryLockConn"
	if err := l.begin(ctx, op, conn == nil, "conn", key, Session); err != nil {
		return nil, false, err
	}
	b, got, err := l.trySession(ctx, conn, key)
	if err != nil || !got {
		return nil, false, l.wrap(ctx, op, key, err)
	}
	lock, err = l.newSessionLock(op, conn, key, b, false)
	return lock, err == nil, err
}

// UnlockConn releases one hold of the session-scoped lock key on conn
// (pg_advisory_unlock). When conn held no such lock it returns an error
// wrapping ErrNotHeld (code Internal), as SessionLock.Unlock does for the
// same event; the connection is fine then. Prefer SessionLock.Unlock, which
// also protects the pool.
func (l *Client) UnlockConn(ctx context.Context, conn *sql.Conn, key Key) error {
	const op = "advisory.unlockConn"
	if err := l.begin(ctx, op, conn == nil, "conn", key, Session); err != nil {
		return err
	}
	var ok bool
	err := l.run(ctx, nil, func(c context.Context) error {
		return conn.QueryRowContext(c, queries[key.form].unlock, key.args()...).Scan(&ok)
	})
	if err != nil {
		return l.wrap(ctx, op, key, err)
	}
	if !ok {
		return notHeld(op, key)
	}
	return nil
}

// notHeld is the error of an unlock that pg_advisory_unlock answered with
// false.
func notHeld(op string, key Key) error {
	return &syncguard.Error{Op: op, Code: syncguard.ErrInternal, Key: key.String(), Err: ErrNotHeld,
		Msg: "pg_advisory_unlock found no such lock held by this session: it was unlocked elsewhere on the " +
			"connection, or statements do not reach the same server session (a pooler in transaction mode?)"}
}

// LockSession is LockConn on a connection of its own from the Client's
// pool: the SessionLock owns it, and Unlock or Close returns it to the pool
// (or discards it, see SessionLock). Use it for a singleton job:
//
//	lock, err := locker.LockSession(ctx, key)
//	if err != nil { return err }
//	defer lock.Close()
func (l *Client) LockSession(ctx context.Context, key Key) (*SessionLock, error) {
	const op = "advisory.lockSession"
	if err := l.check(op, false, "", key, Session); err != nil {
		return nil, err
	}
	conn, err := l.conn(ctx, op, key)
	if err != nil {
		return nil, err
	}
	b, err := l.lockSession(ctx, op, conn, key)
	if err != nil {
		conn.Close()
		return nil, err
	}
	return l.newSessionLock(op, conn, key, b, true)
}

// TryLockSession is TryLockConn on a connection of its own from the
// Client's pool, like LockSession. When ok is false the connection is
// already back in the pool. The scheduler pattern (one instance of a
// periodic job runs, the others skip it):
//
//	lock, ok, err := locker.TryLockSession(ctx, cleanupLock)
//	if err != nil || !ok { return err } // another instance runs it
//	defer lock.Close()
func (l *Client) TryLockSession(ctx context.Context, key Key) (lock *SessionLock, ok bool, err error) {
	const op = "advisory.tryLockSession"
	if err := l.check(op, false, "", key, Session); err != nil {
		return nil, false, err
	}
	conn, err := l.conn(ctx, op, key)
	if err != nil {
		return nil, false, err
	}
	b, got, err := l.trySession(ctx, conn, key)
	if err != nil || !got {
		conn.Close()
		return nil, false, l.wrap(ctx, op, key, err)
	}
	lock, err = l.newSessionLock(op, conn, key, b, true)
	return lock, err == nil, err
}

func (l *Client) conn(ctx context.Context, op string, key Key) (*sql.Conn, error) {
	if ctx.Err() != nil {
		return nil, l.wrap(ctx, op, key, ctx.Err())
	}
	conn, err := l.db.Conn(ctx)
	if err != nil {
		return nil, l.wrap(ctx, op, key, err)
	}
	return conn, nil
}

// trySession is pg_try_advisory_lock on conn, reading the session's pid
// and backend_start in the same round trip.
func (l *Client) trySession(ctx context.Context, conn *sql.Conn, key Key) (backendID, bool, error) {
	var b backendID
	var got bool
	err := l.run(ctx, nil, func(c context.Context) error {
		return conn.QueryRowContext(c, queries[key.form].trySessionPID, key.args()...).Scan(&b.pid, &b.start, &got)
	})
	return b, got, err
}

// lockSession is the blocking session lock: a try that reads the backend
// pid and backend_start, then, if the lock is taken, the wait, cancellable
// server-side.
func (l *Client) lockSession(ctx context.Context, op string, conn *sql.Conn, key Key) (backendID, error) {
	q := queries[key.form]
	b, waited, err := l.tryThenWait(ctx, op, key, conn, q.trySessionPID, q.session)
	if err == nil || !waited {
		return b, err
	}
	werr := l.waitErr(ctx, op, key, err)
	l.cleanupFailedWait(ctx, conn, key)
	return b, werr
}

// cleanupFailedWait makes sure a failed wait left no lock on conn. The try
// before the wait failed, so this session held no lock on key then; one it
// holds now was granted just as the wait was cancelled. When that cannot be
// checked or undone, conn is discarded.
func (l *Client) cleanupFailedWait(ctx context.Context, conn *sql.Conn, key Key) {
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
	s.l.sessions.remove(s)
	if s.leaked {
		return s.misuse(op, "it was found re-acquired by the next user of that pooled connection, which was discarded, ending the lock")
	}
	var ok bool
	err := s.l.run(ctx, nil, func(c context.Context) error {
		return s.conn.QueryRowContext(c, queries[s.key.form].unlock, s.key.args()...).Scan(&ok)
	})
	if errors.Is(err, sql.ErrConnDone) {
		// The caller closed the *sql.Conn while the lock was held: the
		// connection is back in the pool with the lock.
		return s.misuse(op, s.endLeaked(ctx))
	}
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
		return notHeld(op, s.key)
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

// sessionRegistry tracks a Client's live SessionLocks by server session and
// key. A lock granted to a session on which a live SessionLock of another
// *sql.Conn holds the same key can only mean that the other SessionLock's
// connection went back to the pool while holding it.
type sessionRegistry struct {
	mu   sync.Mutex
	live map[sessionKey][]*SessionLock
}

type sessionKey struct {
	pid   int64
	start int64 // backend_start, unix nanoseconds
	key   string
}

func (s *SessionLock) regKey() (sessionKey, bool) {
	if !s.session.start.Valid {
		return sessionKey{}, false // cannot tell a reused pid from the same session
	}
	return sessionKey{pid: s.session.pid, start: s.session.start.Time.UnixNano(), key: s.key.String()}, true
}

// add registers s and returns the live SessionLocks of other connections
// that hold the same key on the same session.
func (r *sessionRegistry) add(s *SessionLock) (others []*SessionLock) {
	k, ok := s.regKey()
	if !ok {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.live == nil {
		r.live = map[sessionKey][]*SessionLock{}
	}
	for _, o := range r.live[k] {
		if o.conn != s.conn {
			others = append(others, o)
		}
	}
	r.live[k] = append(r.live[k], s)
	return others
}

func (r *sessionRegistry) remove(s *SessionLock) {
	k, ok := s.regKey()
	if !ok {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	list := r.live[k]
	for i, o := range list {
		if o == s {
			list = append(list[:i], list[i+1:]...)
			break
		}
	}
	if len(list) == 0 {
		delete(r.live, k)
	} else {
		r.live[k] = list
	}
}

// newSessionLock makes the SessionLock of a granted lock. If the session
// already held the key for a live SessionLock of another *sql.Conn, that
// SessionLock's connection went back to the pool while holding it (a
// misuse): this grant only re-entered the leaked lock. The connection is
// then discarded, which ends the session and both holds, the other
// SessionLock learns of it at its Unlock, and the caller gets an error.
func (l *Client) newSessionLock(op string, conn *sql.Conn, key Key, b backendID, owned bool) (*SessionLock, error) {
	s := &SessionLock{l: l, conn: conn, key: key, owned: owned, session: b}
	others := l.sessions.add(s)
	if len(others) == 0 {
		return s, nil
	}
	l.sessions.remove(s)
	for _, o := range others {
		o.mu.Lock()
		o.leaked = true
		o.mu.Unlock()
	}
	discard(conn)
	if owned {
		conn.Close()
	}
	return nil, &syncguard.Error{Op: op, Code: syncguard.ErrInternal, Key: key.String(), Err: ErrConnReturnedHolding,
		Msg: fmt.Sprintf("this connection's session (pid %d) already held the lock for another SessionLock whose *sql.Conn was closed without "+
			"Unlock, so it went back to the pool holding the lock and this call only re-entered it; the connection was discarded, "+
			"which ended that leaked lock: try again", b.pid)}
}

// endLeaked ends the session that still holds s's lock after s's conn went
// back to the pool, and says what happened.
func (s *SessionLock) endLeaked(ctx context.Context) string {
	if !s.session.start.Valid {
		return "the session that holds it is not known (pg_stat_activity did not show its backend_start), so it stays held until that pooled connection closes"
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.l.unlockTimeout)
	defer cancel()
	classid, objid, sub := s.key.lockTag()
	var done bool
	err := s.l.db.QueryRowContext(cctx, sqlEndLeaked, s.session.pid, s.session.start.Time, classid, objid, sub).Scan(&done)
	switch {
	case err == nil && done:
		return fmt.Sprintf("its session (pid %d) was terminated (pg_terminate_backend) to end the lock", s.session.pid)
	case errors.Is(err, sql.ErrNoRows):
		return fmt.Sprintf("its session (pid %d) no longer holds it", s.session.pid)
	case err != nil:
		return fmt.Sprintf("its session (pid %d) could not be terminated (%v), so the lock stays held until that pooled connection closes", s.session.pid, err)
	}
	return fmt.Sprintf("its session (pid %d) could not be terminated, so the lock stays held until that pooled connection closes", s.session.pid)
}

// misuse is the error of an Unlock whose connection went back to the pool
// while holding the lock; what says what became of the lock.
func (s *SessionLock) misuse(op, what string) error {
	return &syncguard.Error{Op: op, Code: syncguard.ErrInvalidArgument, Key: s.key.String(), Err: ErrConnReturnedHolding,
		Msg: "misuse: the *sql.Conn was closed, returning it to the pool, while the session still held the lock (unlock before closing the conn); " + what}
}
