package multilock

import (
	"context"
	"database/sql"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/syncguard/syncguard-go/driver"
	"github.com/syncguard/syncguard-go/internal/errwrap"
	"github.com/syncguard/syncguard-go/internal/kit"
	"github.com/syncguard/syncguard-go/internal/pooler"
	"github.com/syncguard/syncguard-go/internal/waiting"
	"github.com/syncguard/syncguard-go/syncguard"
)

var (
	_ syncguard.LockBackend = (*Locker)(nil)
	_ syncguard.Queuer      = (*Locker)(nil)
	_ SetLocker             = (*Locker)(nil)
)

// Locker takes sets of keys on PostgreSQL: all keys of a set or none, in
// one statement, with a fence per key. Its key argument is an encoded set
// (Keys), so syncguard.Lock and WithLock work on it unchanged (one lockId
// and one Lease for the set: Extend and Close act on every key at once),
// and it is a syncguard.Queuer: waiters keep one place in one queue
// across all their keys. Lock (this package) wraps syncguard.Lock and
// returns the per-key fences. Safe for concurrent use.
type Locker struct {
	db       *sql.DB
	dialect  driver.Dialect
	oneShot  []any
	identity string
	logger   *slog.Logger
	notifyDB *sql.DB
	release  time.Duration // Config.ReleaseTimeout
	window   time.Duration // a waiter's queue window
	tables   Tables
	sql      struct {
		statements
		placeholder, lookup string
	}
	noFuncs atomic.Bool // a statement function was missing: the statements themselves from then on
	waker   *waiting.Waker

	mu     sync.Mutex
	recent map[string][]KeyFence // the fences of holdings taken here, by lockId, until released
}

// defaultWindow is how long a waiter's queue rows live after an attempt;
// its attempts renew them at half of it (as syncguard's Backend).
const defaultWindow = 15 * time.Second

// maxRecent bounds Locker's memory of the fences of its holdings.
const maxRecent = 4096

// New returns a Locker on db with cfg (nil: the defaults). Read from
// cfg: TableName (multilock's tables are named from it: TablesOf),
// Dialect, Identity, Logger, NotifyDB and ReleaseTimeout, with their
// documented defaults; the other fields do not apply. New validates and
// does no I/O: call SetupSchema once (or apply SchemaSQL) before use.
func New(db *sql.DB, cfg *syncguard.Config) (*Locker, error) {
	const op = "multilock.new"
	c, err := kit.Resolve(op, db, cfg)
	if err != nil {
		return nil, err
	}
	t, err := tablesOf(op, cfg)
	if err != nil {
		return nil, err
	}
	l := &Locker{db: db, dialect: c.Dialect, oneShot: c.OneShot, identity: c.Identity, logger: c.Logger, notifyDB: c.NotifyDB,
		release: c.ReleaseTimeout, window: defaultWindow, tables: t, recent: map[string][]KeyFence{}}
	l.sql.statements = t.statements()
	l.sql.placeholder = stripComments(t.render("placeholder.sql"))
	l.sql.lookup = stripComments(t.render("lookup.sql"))
	l.waker = l.newWaker()
	return l, nil
}

// Tables reports the Locker's tables.
func (l *Locker) Tables() Tables { return l.tables }

// Capabilities implements syncguard.LockBackend: "postgres", fencing (a
// fence per key; AcquireResult.Fence is the largest), server time.
func (l *Locker) Capabilities() syncguard.Capabilities {
	return syncguard.Capabilities{Backend: "postgres", SupportsFencing: true, TimeAuthority: "server"}
}

// Close closes the LISTEN connection that wakes waiting Lock calls, if
// one is open; not the *sql.DB. The Locker stays usable.
func (l *Locker) Close() error {
	l.waker.Close()
	return nil
}

// run runs a statement unprepared (one round trip, also behind a pooler
// in transaction mode) and scans its one row.
func (l *Locker) run(ctx context.Context, stmt string, args []any, dest ...any) error {
	q, a, err := pooler.Statement(l.oneShot, stmt, args)
	if err != nil {
		return err
	}
	return l.db.QueryRowContext(ctx, q, a...).Scan(dest...)
}

// maxReruns bounds the statements run again in one operation: after a
// stale snapshot (another statement changed one of the keys between the
// snapshot and the lock) or a serialization failure (40001, 40P01, which
// the one lock order should make impossible).
const maxReruns = 64

// rerun reports whether err is a serialization failure run again.
func (l *Locker) rerun(err error) bool {
	st := l.dialect.Inspect(err).SQLState
	return st == "40001" || st == "40P01" || st == "55P03" // 55P03: a statement function's NOWAIT (funcs.go)
}

func (l *Locker) wrap(ctx context.Context, op string, err error) *syncguard.Error {
	e := errwrap.Wrap(ctx, op, l.dialect, err)
	if e.SQLState == "42P01" || e.SQLState == "42703" {
		e.Msg += ": run multilock.SetupSchema (or apply multilock.SchemaSQL) and grant its tables like the lock table"
	}
	return e
}

// remember records the fences of a holding taken or handed here.
func (l *Locker) remember(lockID string, f []KeyFence) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.recent) >= maxRecent {
		for k := range l.recent {
			delete(l.recent, k)
			break
		}
	}
	l.recent[lockID] = f
}

func (l *Locker) forget(lockID string) {
	l.mu.Lock()
	delete(l.recent, lockID)
	l.mu.Unlock()
}

var (
	invalidArg  = kit.InvalidArg
	checkLockID = kit.CheckLockID
	failReason  = kit.FailReason
)

func ctxErr(ctx context.Context, op string, l *Locker) *syncguard.Error {
	if err := ctx.Err(); err != nil {
		return l.wrap(ctx, op, err)
	}
	return nil
}

func ttlMillis(op string, ttl time.Duration) *syncguard.Error {
	_, e := kit.TTLMillis(op, ttl)
	return e
}

// newWaker is the Locker's LISTEN connection, as syncguard's Backend
// wires its own: on NotifyDB when set, through the dialect's
// driver.Listener, polling without one.
func (l *Locker) newWaker() *waiting.Waker {
	return waiting.NewFor(waiting.Wiring{DB: l.db, NotifyDB: l.notifyDB, Dialect: l.dialect, Notify: l.notify,
		Logger: l.logger, What: "syncguard multilock"})
}

// notify sends a notification, through NotifyDB when set.
func (l *Locker) notify(ctx context.Context, channel, payload string) error {
	const stmt = waiting.NotifySQL
	db := l.db
	if l.notifyDB != nil {
		db = l.notifyDB
	}
	var v string
	q, a, err := pooler.Statement(l.oneShot, stmt, []any{channel, payload})
	if l.notifyDB != nil {
		q, a = stmt, []any{channel, payload}
	}
	if err != nil {
		return err
	}
	return db.QueryRowContext(ctx, q, a...).Scan(&v)
}

// NotificationStatus reports whether waiting on l is woken the moment a
// release hands a waiter its set, or finds out at its next attempt
// (polling), as syncguard.Backend.NotificationStatus does.
func (l *Locker) NotificationStatus(ctx context.Context) syncguard.NotificationStatus {
	st := l.waker.Status(ctx)
	return syncguard.NotificationStatus{Active: st.Active, Reason: st.Reason}
}
