package advisory

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/syncguard/syncguard-go/driver"
	"github.com/syncguard/syncguard-go/internal/errwrap"
	"github.com/syncguard/syncguard-go/syncguard"
)

// Config configures a Client. The zero value (or nil) is usable.
type Config struct {
	// Dialect reads driver errors. Nil: found from db.Driver() (import an
	// adapter, as for syncguard.New).
	Dialect driver.Dialect

	// Registry names locks in monitoring output and, with DeclaredOnly,
	// is the only source of keys.
	Registry *Registry

	// DeclaredOnly makes every lock operation refuse, with
	// InvalidArgument, a Key that was not made by Registry: raw ids and
	// names that nobody declared cannot be locked through this Client.
	DeclaredOnly bool

	// CancelGrace is how long a statement may go on after its context is
	// done before the driver itself is told to cancel it (which, with
	// lib/pq and pgx, closes the connection and so breaks the caller's
	// transaction). Within the grace the Client cancels a waiting lock
	// server-side with pg_cancel_backend instead, which keeps the
	// connection and transaction usable. Default 1s.
	CancelGrace time.Duration

	// UnlockTimeout bounds SessionLock.Close and the clean-up after a failed
	// session lock wait. Default 5s.
	UnlockTimeout time.Duration
}

// Client takes PostgreSQL advisory locks on transactions and pinned
// connections that the caller owns, and reads pg_locks for monitoring.
//
// db is used for monitoring, for LockSession's connections, and to cancel a
// lock wait server-side (pg_cancel_backend) when the caller's context ends;
// it must reach the same PostgreSQL server as the transactions and
// connections passed in, with a role allowed to see and cancel their
// backends in pg_stat_activity (the same role, or a member of both
// pg_read_all_stats and pg_signal_backend), and should have a connection to
// spare for that. When the cancel cannot be sent, the driver cancels the
// statement instead.
//
// A Client is safe for concurrent use; the *sql.Tx and *sql.Conn passed to
// it are, as always, used by one goroutine at a time.
type Client struct {
	db            *sql.DB
	dialect       driver.Dialect
	reg           *Registry
	declaredOnly  bool
	grace         time.Duration
	unlockTimeout time.Duration
	sessions      sessionRegistry // live SessionLocks, to detect a held lock returned to the pool
}

// cancelTimeout bounds the server-side cancel (pg_cancel_backend) made when
// a lock wait's context ends; past it the driver cancels the statement
// instead.
const cancelTimeout = 250 * time.Millisecond

// New returns a Client on db. It does no I/O. A nil db, DeclaredOnly without
// a Registry, negative durations or a driver without a registered dialect
// are InvalidArgument.
func New(db *sql.DB, cfg *Config) (*Client, error) {
	const op = "advisory.new"
	if db == nil {
		return nil, invalidArg(op, "db must not be nil")
	}
	var c Config
	if cfg != nil {
		c = *cfg
	}
	if c.DeclaredOnly && c.Registry == nil {
		return nil, invalidArg(op, "DeclaredOnly needs a Registry")
	}
	if c.CancelGrace < 0 || c.UnlockTimeout < 0 {
		return nil, invalidArg(op, "CancelGrace and UnlockTimeout must not be negative")
	}
	if c.CancelGrace == 0 {
		c.CancelGrace = time.Second
	}
	if c.UnlockTimeout == 0 {
		c.UnlockTimeout = 5 * time.Second
	}
	if c.Dialect == nil {
		d, ok := driver.Lookup(db.Driver())
		if !ok {
			return nil, invalidArg(op, fmt.Sprintf(
				"no syncguard dialect registered for database/sql driver %T: import an adapter, "+
					`_ "github.com/syncguard/syncguard-go/pq" or _ "github.com/syncguard/syncguard-go/pgxstd", `+
					"or set Config.Dialect (registered: %s)", db.Driver(), strings.Join(driver.Registered(), ", ")))
		}
		c.Dialect = d
	}
	return &Client{db: db, dialect: c.Dialect, reg: c.Registry, declaredOnly: c.DeclaredOnly,
		grace: c.CancelGrace, unlockTimeout: c.UnlockTimeout}, nil
}

// Registry returns the Config.Registry, or nil.
func (l *Client) Registry() *Registry { return l.reg }

// LockTx takes the transaction-scoped lock key in tx
// (pg_advisory_xact_lock), waiting as long as ctx allows. The lock is
// released when tx commits or rolls back; there is no unlock.
//
// When ctx ends while waiting, the wait is cancelled on the server and
// LockTx returns within a few round trips: Aborted for a cancelled ctx,
// AcquisitionTimeout for a passed deadline (also for the server's
// lock_timeout). PostgreSQL then marks tx aborted (SQLSTATE 25P02 for later
// statements): roll it back, which works. A deadlock with another lock
// holder (40P01) is ServiceUnavailable, retryable, as everywhere in
// syncguard. If the lock is granted as ctx ends, LockTx returns nil: the
// lock is held.
//
// An uncontended LockTx is one round trip (a try that also reads the
// backend pid and backend_start); a contended one is one more.
func (l *Client) LockTx(ctx context.Context, tx *sql.Tx, key Key) error {
	const op = "advisory.lockTx"
	if err := l.begin(ctx, op, tx == nil, "tx", key, Transaction); err != nil {
		return err
	}
	q := queries[key.form]
	if _, waited, err := l.tryThenWait(ctx, op, key, tx, q.tryXactPID, q.xact); err != nil {
		if waited {
			return l.waitErr(ctx, op, key, err)
		}
		return err
	}
	return nil
}

// queryer is what tryThenWait needs: a *sql.Tx or a pinned *sql.Conn.
type queryer interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// tryThenWait is the blocking acquire shared by the transaction and session
// forms: a try that also reads the backend pid and backend_start (one round
// trip when the lock is free), then, if it is taken, the wait, cancellable
// server-side. A failed try comes back wrapped with waited false; a failed
// wait comes back raw with waited true, for the caller's waitErr and cleanup.
// b is the session the statements ran in.
func (l *Client) tryThenWait(ctx context.Context, op string, key Key, db queryer, try, wait string) (b backendID, waited bool, err error) {
	var got bool
	err = l.run(ctx, nil, func(c context.Context) error {
		return db.QueryRowContext(c, try, key.args()...).Scan(&b.pid, &b.start, &got)
	})
	if err != nil {
		return b, false, l.wrap(ctx, op, key, err)
	}
	if got {
		return b, false, nil
	}
	if ctx.Err() != nil {
		return b, false, l.wrap(ctx, op, key, ctx.Err())
	}
	err = l.run(ctx, &b, func(c context.Context) error {
		_, err := db.ExecContext(c, wait, key.args()...)
		return err
	})
	return b, err != nil, err
}

// TryLockTx takes the transaction-scoped lock key in tx if it is free
// (pg_try_advisory_xact_lock) and never waits for it: false means another
// session holds it. A true result holds until tx ends. TryLockTx in a
// transaction that already holds key returns true again.
func (l *Client) TryLockTx(ctx context.Context, tx *sql.Tx, key Key) (bool, error) {
	const op = "advisory.tryLockTx"
	if err := l.begin(ctx, op, tx == nil, "tx", key, Transaction); err != nil {
		return false, err
	}
	var got bool
	err := l.run(ctx, nil, func(c context.Context) error {
		return tx.QueryRowContext(c, queries[key.form].tryXact, key.args()...).Scan(&got)
	})
	if err != nil {
		return false, l.wrap(ctx, op, key, err)
	}
	return got, nil
}

// check validates the arguments of a lock operation before any I/O.
func (l *Client) check(op string, nilTarget bool, target string, key Key, want Kind) error {
	bad := func(msg string) error {
		e := invalidArg(op, msg)
		if !key.IsZero() {
			e.Key = key.String()
		}
		return e
	}
	switch {
	case nilTarget:
		return bad(target + " must not be nil")
	case key.IsZero():
		return bad("the zero Key is not a lock: make keys with ID, Pair, FromName or a Registry")
	case key.decl != nil && key.decl.d.Kind != want:
		return bad(fmt.Sprintf("lock %q is declared %s; it cannot be taken as a %s lock", key.decl.d.Name, key.decl.d.Kind, want))
	case l.declaredOnly && (key.decl == nil || key.decl.r != l.reg):
		return bad(fmt.Sprintf("this Client takes only locks declared in registry %q (Config.DeclaredOnly)", l.reg.ns))
	}
	return nil
}

// begin validates a call (check), then its context: both before any I/O.
func (l *Client) begin(ctx context.Context, op string, nilTarget bool, target string, key Key, want Kind) error {
	if err := l.check(op, nilTarget, target, key, want); err != nil {
		return err
	}
	if ctx.Err() != nil {
		return l.wrap(ctx, op, key, ctx.Err())
	}
	return nil
}

// wrap classifies err with the Client's dialect (the context first).
func (l *Client) wrap(ctx context.Context, op string, key Key, err error) error {
	e := errwrap.Wrap(ctx, op, l.dialect, err)
	if e == nil {
		return nil
	}
	if !key.IsZero() && e.Key == "" {
		e.Key = key.String()
	}
	return e
}

// waitErr classifies the failure of a blocking lock statement. A wait that
// the server ended because a deadline passed (ours, through the cancel, or
// its lock_timeout) is AcquisitionTimeout: the server answered, and the
// lock stayed taken.
func (l *Client) waitErr(ctx context.Context, op string, key Key, err error) error {
	state := l.dialect.Inspect(err).SQLState
	e := errwrap.Wrap(ctx, op, l.dialect, err)
	if e.SQLState == "" {
		e.SQLState = state
	}
	if e.Key == "" {
		e.Key = key.String()
	}
	switch {
	case state == "55P03":
		e.Code, e.Msg = syncguard.ErrAcquisitionTimeout, "lock_timeout passed while waiting for the advisory lock"
	case state == "57014" && errors.Is(ctx.Err(), context.DeadlineExceeded):
		e.Code, e.Msg = syncguard.ErrAcquisitionTimeout, "context deadline passed while waiting for the advisory lock"
	case ctx.Err() != nil && e.Code == syncguard.ErrAborted:
		e.Msg = "context cancelled while waiting for the advisory lock"
	}
	return e
}

// backendID identifies the server session running a statement, for the
// server-side cancel: its pid and its backend_start (pg_stat_activity). A
// pid can be reused by a later session on the same server, or belong to a
// session on another server; the pair names one session. start is NULL
// where pg_stat_activity does not show it: then no server-side cancel is
// sent.
type backendID struct {
	pid   int64
	start sql.NullTime
}

// run calls f with a context that is not cancelled when ctx is: database/sql
// drivers answer a cancelled context by closing the connection, which would
// break the caller's transaction or pinned session. Instead, when ctx ends
// while f runs, run cancels target's advisory-lock wait server-side
// (pg_cancel_backend, only while that very session waits for an advisory
// lock) so that f returns with SQLSTATE 57014 and the connection intact.
// Only when that cannot be done within cancelTimeout, or f still runs
// CancelGrace later, is f's own context cancelled. run returns after every
// cancel it sent has been answered, so a cancel cannot hit the caller's
// next statement (PostgreSQL ignores a cancel between statements). A cancel
// whose answer timed out may still run on the server later; it can then
// only end an advisory-lock wait of target's session, which the driver
// cancellation has abandoned.
func (l *Client) run(ctx context.Context, target *backendID, f func(context.Context) error) error {
	sctx, hard := context.WithCancel(context.WithoutCancel(ctx))
	defer hard()
	finished := make(chan struct{})
	watched := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(watched)
		if target != nil && !l.cancelWait(ctx, *target, finished) {
			hard()
			return
		}
		t := time.NewTimer(l.grace)
		defer t.Stop()
		select {
		case <-finished:
		case <-t.C:
			hard()
		}
	})
	err := f(sctx)
	close(finished)
	if !stop() {
		<-watched
	}
	return err
}

// cancelRetry is the pause between two server-side cancels that found no
// advisory-lock wait of the target session.
const cancelRetry = 20 * time.Millisecond

// cancelWait cancels b's advisory-lock wait server-side. It reports true
// when the cancel was sent or f finished, false when the driver must cancel
// instead: the cancel failed (no connection in the pool, a role that may
// not signal b, no backend_start), or for cancelTimeout it found b not
// waiting for an advisory lock. Not waiting is usually brief: the wait
// statement has not reached the server yet, or the lock was just granted
// and f is returning; a role that cannot see b in pg_stat_activity also
// looks like this.
func (l *Client) cancelWait(ctx context.Context, b backendID, finished <-chan struct{}) bool {
	if !b.start.Valid {
		return false
	}
	end := time.Now().Add(cancelTimeout)
	for {
		select {
		case <-finished:
			return true
		default:
		}
		sent, err := l.cancelBackend(ctx, end, b)
		switch {
		case sent:
			return true
		case err != nil:
			return false
		}
		pause := min(cancelRetry, time.Until(end))
		if pause <= 0 {
			return false
		}
		t := time.NewTimer(pause)
		select {
		case <-finished:
			t.Stop()
			return true
		case <-t.C:
		}
	}
}

// cancelBackend sends one server-side cancel, answered by end. sent false
// with a nil error: b was not waiting for an advisory lock (or is not
// visible to the Client's role).
func (l *Client) cancelBackend(ctx context.Context, end time.Time, b backendID) (sent bool, err error) {
	cctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), end)
	defer cancel()
	var ok bool
	err = l.db.QueryRowContext(cctx, sqlCancel, b.pid, b.start.Time).Scan(&ok)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return false, nil
	case err != nil:
		return false, err
	case !ok:
		return false, errSignalFailed
	}
	return true, nil
}

var errSignalFailed = errors.New("advisory: pg_cancel_backend returned false")

// sqlCancel cancels the statement of the session ($1 pid, $2 backend_start)
// only while it waits for an advisory lock: never another session that got
// the pid later or has it on another server, never a statement that is not
// an advisory-lock wait.
const sqlCancel = "SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE pid = $1 AND backend_start = $2 " +
	"AND wait_event_type = 'Lock' AND wait_event = 'advisory'"

// backendExpr is the session's backend_start, in the try that precedes a
// blocking lock.
const backendExpr = "(SELECT backend_start FROM pg_stat_activity WHERE pid = pg_backend_pid())"

// stmts are the one-line lock statements for one key form.
type stmts struct {
	tryXact, tryXactPID, xact string
	trySessionPID, session    string
	unlock                    string
}

var queries = [...]stmts{
	formNone:  {},
	formInt64: buildStmts("$1::bigint"),
	formPair:  buildStmts("$1::int4, $2::int4"),
}

func buildStmts(a string) stmts {
	call := func(fn string) string { return fn + "(" + a + ")" }
	pid := "SELECT pg_backend_pid(), " + backendExpr + ", "
	return stmts{
		tryXact:       "SELECT " + call("pg_try_advisory_xact_lock"),
		tryXactPID:    pid + call("pg_try_advisory_xact_lock"),
		xact:          "SELECT " + call("pg_advisory_xact_lock"),
		trySessionPID: pid + call("pg_try_advisory_lock"),
		session:       "SELECT " + call("pg_advisory_lock"),
		unlock:        "SELECT " + call("pg_advisory_unlock"),
	}
}
