package sgbench

import (
	"context"
	"database/sql"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/syncguard/syncguard-go/driver"
	"github.com/syncguard/syncguard-go/syncguard"
)

// Workload 6: waiting for a contended key with the lock helper (Lock,
// WithLock), as applications do, rather than single attempts.
//
//	W6a/W6b  N workers loop WithLock(key, hold H) then pause T
//	W6c      hand-off latency: one holder, one waiter in another OS process
//	W6d      a crashed holder: from its expiry + 1 s to the waiter's acquire
//
// Variants (lockers), each worker on a pool and Backend of its own, as if
// in a process of its own, unless the name says "one process":
//
//	syncguard                  the queue in the waiters table, the key handed
//	                           over in the release's commit, the waiter woken
//	                           by a notification naming it
//	syncguard, one process     the same, all workers on one pool and Backend
//	syncguard polling fallback the dialect without driver.Listener (as behind
//	                           PgBouncer): queued, but a waiter learns of its
//	                           grant at its next attempt
//	polling (before issue 15)  the retry schedule only, as before waking
//	                           existed: no queue, attempts barge
//	spec design                the reference transactions, polled on the same
//	                           retry schedule (the reference lock() helper)
//
// Files: W6a/W6b in wait_contention.go, W6c in wait_handoff.go, W6d in
// wait_crash.go, their result rows in wait_result.go. Multi-process
// workloads (multiproc.go runs the processes): W6e (fairness to far
// clients) in wait_fairness.go and the scale measurement (work per
// hand-off, 5 vs 50 processes) in wait_scale.go.

// WaitEnv is what the waiting workloads need beyond Env.
type WaitEnv struct {
	Driver    string         // "pq" or "pgx"
	SQLDriver string         // database/sql driver name
	DSN       string         // to open one pool per simulated process
	Dialect   driver.Dialect // with driver.Listener (lib/pq needs the DSN)
	RunID     string
	// Via names a pooler between the workers and PostgreSQL ("" when
	// direct); its workloads are reported as "<name>_<via>". Statements
	// then run unprepared (Config.DisablePrepare).
	Via string
	// Notified, when set, counts the notifications delivered to the
	// LISTEN connections of the Backends that OpenProc opens.
	Notified *atomic.Int64
	// NotifyDSN, for VarNotifyDB: the server (or database) a pool of its
	// own is opened on for syncguard.Config.NotifyDB (issue 29), with
	// NotifyDialect (default Dialect; lib/pq's listens through its DSN, so
	// it must be sgpq.ListenDialect(NotifyDSN)).
	NotifyDSN     string
	NotifyDialect driver.Dialect
	// OpenNotify opens the NotifyDB pool on a DSN (default sql.Open with
	// SQLDriver). The core finds that pool's listening dialect from its
	// driver: lib/pq's must come from the adapter's connector.
	OpenNotify func(dsn string) (*sql.DB, error)
	// Routes open a variant of another name on another server or pooler:
	// Contention then compares, interleaved, lockers that differ in where
	// their connections go (w7d: direct, through PgBouncer, through
	// PgBouncer with a direct NotifyDB).
	Routes map[string]Route
	// OpenDB, when set, opens OpenProc's pools (default sql.Open with
	// SQLDriver): lib/pq's connector (sgpq.NewConnector), with Dialect
	// nil, lets syncguard.New find the listening dialect from the driver.
	OpenDB func(dsn string) (*sql.DB, error)
	// Trace, when set, records the attempts of OpenProc's lockers'
	// waiters (trace.go).
	Trace *Tracer
}

// Route is a variant that runs another variant (Base) with the
// connections of Env (its DSN, Dialect, Via, NotifyDSN, NotifyDialect).
type Route struct {
	Base string
	Env  *WaitEnv
}

// Locker variants of workload 6.
const (
	VarNotify     = "syncguard"
	VarNotifyOne  = "syncguard (one process)"
	VarFallback   = "syncguard polling fallback (no LISTEN)"
	VarPollBefore = "polling (before issue 15)"
	VarSpec       = "spec design (reference transactions + lock() polling)"
	// VarNotifyDB is VarNotify with syncguard.Config.NotifyDB set to a
	// pool on WaitEnv.NotifyDSN (issue 29); it needs a syncguard with the
	// field (see HasNotifyDB).
	VarNotifyDB = "syncguard, NotifyDB"
)

// WaitVariants lists the variants in report order.
var WaitVariants = []string{VarNotify, VarNoGrant, VarNotifyOne, VarFallback, VarPollBefore, VarSpec}

// fwdDialect forwards the optional capabilities a wrapper must not hide
// (driver.OneShot, driver.BackendPIDReader): a wrapper that embedded only
// driver.Dialect would change how the Backend sends its statements.
type fwdDialect struct{ driver.Dialect }

func (d fwdDialect) OneShotArgs() []any {
	if o, ok := d.Dialect.(driver.OneShot); ok {
		return o.OneShotArgs()
	}
	return nil // the same as no driver.OneShot
}

func (d fwdDialect) BackendPID(driverConn any) (int, bool) {
	if r, ok := d.Dialect.(driver.BackendPIDReader); ok {
		return r.BackendPID(driverConn)
	}
	return 0, false // the same as no driver.BackendPIDReader
}

// noListen hides a dialect's driver.Listener capability (and only it).
type noListen struct{ fwdDialect }

// pollingOnly is a Locker without the waiting machinery: Lock retries on
// its schedule only, as it did before issue 15. It is not a
// kit.Queuer, so Lock takes no place in the queue: its attempts are
// plain acquires, and a release finds no waiter to hand to. (It also hides
// the attempt's context values, through which the Backend found Lock's
// waiting record before the Queuer seam.)
type pollingOnly struct{ b *syncguard.Backend }

// noValues is ctx without its values (deadline and cancellation kept).
type noValues struct{ context.Context }

func (noValues) Value(any) any { return nil }

func (p pollingOnly) Acquire(ctx context.Context, key string, ttl time.Duration) (syncguard.AcquireResult, error) {
	return p.b.Acquire(noValues{ctx}, key, ttl)
}
func (p pollingOnly) Release(ctx context.Context, id string) (syncguard.ReleaseResult, error) {
	return p.b.Release(ctx, id)
}
func (p pollingOnly) Extend(ctx context.Context, id string, ttl time.Duration) (syncguard.ExtendResult, error) {
	return p.b.Extend(ctx, id, ttl)
}

// refLocker runs the spec's reference transactions under the lock helper.
type refLocker struct{ r *Reference }

func (l refLocker) Acquire(ctx context.Context, key string, ttl time.Duration) (syncguard.AcquireResult, error) {
	id, ok, err := l.r.Acquire(ctx, key, ttl)
	if err != nil || !ok {
		return syncguard.AcquireResult{Reason: "locked"}, err
	}
	return syncguard.AcquireResult{OK: true, LockID: id}, nil
}
func (l refLocker) Release(ctx context.Context, id string) (syncguard.ReleaseResult, error) {
	ok, err := l.r.Release(ctx, id)
	return syncguard.ReleaseResult{OK: ok}, err
}
func (l refLocker) Extend(ctx context.Context, id string, ttl time.Duration) (syncguard.ExtendResult, error) {
	ok, err := l.r.Extend(ctx, id, ttl)
	return syncguard.ExtendResult{OK: ok}, err
}

// proc is one simulated process: a pool and the variant's locker on it.
type proc struct {
	db      *sql.DB
	variant string
	cfg     *syncguard.Config
	locker  syncguard.Locker
	sg      *syncguard.Backend // the Backend under the locker, if any
	ref     *Reference
	table   string  // lock table of the locker
	notify  *sql.DB // Config.NotifyDB, if set
}

func (p *proc) close() {
	if p.sg != nil {
		p.sg.Close()
	}
	if p.ref != nil {
		p.ref.Close()
	}
	if p.notify != nil {
		p.notify.Close()
	}
	p.db.Close()
}

// reopen closes the proc's Backend, which ends its LISTEN connection, and
// puts a new Backend on the same pool in its place: a closed Backend never
// listens again (its waits poll), as a process that restarts would not.
// Nothing may use the locker meanwhile.
func (p *proc) reopen() error {
	if p.sg == nil {
		return nil
	}
	p.sg.Close()
	sg, err := syncguard.New(p.db, p.cfg)
	if err != nil {
		return err
	}
	p.sg, p.locker = sg, sg
	if p.variant == VarPollBefore {
		p.locker = pollingOnly{sg}
	}
	return nil
}

// OpenProc opens a pool of size conns and the locker of variant on it.
func (w *WaitEnv) OpenProc(ctx context.Context, variant string, conns int) (*proc, error) {
	if r, ok := w.Routes[variant]; ok {
		e := *r.Env
		e.Notified, e.Routes = w.Notified, nil
		return e.OpenProc(ctx, r.Base, conns)
	}
	open := w.OpenDB
	if open == nil {
		open = func(dsn string) (*sql.DB, error) { return sql.Open(w.SQLDriver, dsn) }
	}
	db, err := open(w.DSN)
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(conns)
	db.SetMaxIdleConns(conns)
	p := &proc{db: db, table: SGTable, variant: variant}
	// The polling fallback is logged once per Backend: with a Backend per
	// simulated process, that would be once per worker.
	p.cfg = &syncguard.Config{TableName: SGTable, FenceTableName: SGFenceTable, Dialect: w.Dialect,
		Logger: slog.New(slog.DiscardHandler), DisablePrepare: w.Via != ""}
	if w.Notified != nil {
		if l, ok := w.Dialect.(driver.Listener); ok {
			p.cfg.Dialect = countingDialect{fwdDialect{w.Dialect}, l, w.Notified}
		}
	}
	switch variant {
	case VarNoGrant:
		if l, ok := p.cfg.Dialect.(driver.Listener); ok {
			p.cfg.Dialect = plainWakeDialect{fwdDialect{p.cfg.Dialect}, l}
		}
	case VarFallback:
		p.cfg.Dialect = noListen{fwdDialect{w.Dialect}}
	case VarNotifyDB:
		if err := w.setNotify(p); err != nil {
			db.Close()
			return nil, err
		}
	case VarSpec:
		p.ref, err = NewReference(ctx, db)
		if err != nil {
			db.Close()
			return nil, err
		}
		p.locker, p.table = refLocker{p.ref}, RefTable
		return p, nil
	}
	p.sg, err = syncguard.New(db, p.cfg)
	if err != nil {
		db.Close()
		return nil, err
	}
	p.locker = p.sg
	if variant == VarPollBefore {
		p.locker = pollingOnly{p.sg}
	}
	if w.Trace != nil {
		p.locker = w.Trace.Wrap(p.locker)
	}
	return p, nil
}

// countingDialect counts the notifications its LISTEN connections deliver
// (every one, whatever it names: the work a process does for them).
type countingDialect struct {
	fwdDialect
	l driver.Listener
	n *atomic.Int64
}

func (d countingDialect) Listen(ctx context.Context, db *sql.DB, channel string) (driver.NotifyConn, error) {
	c, err := d.l.Listen(ctx, db, channel)
	if err != nil {
		return nil, err
	}
	return countingConn{c, d.n}, nil
}

type countingConn struct {
	driver.NotifyConn
	n *atomic.Int64
}

func (c countingConn) Wait(ctx context.Context) (driver.Notification, error) {
	n, err := c.NotifyConn.Wait(ctx)
	if err == nil {
		c.n.Add(1)
	}
	return n, err
}
