package rwlock

import (
	"context"
	"database/sql"
	"log/slog"
	"time"

	"github.com/syncguard/syncguard-go/driver"
	"github.com/syncguard/syncguard-go/internal/errwrap"
	"github.com/syncguard/syncguard-go/internal/kit"
	"github.com/syncguard/syncguard-go/internal/rules"
	"github.com/syncguard/syncguard-go/internal/waiting"
	"github.com/syncguard/syncguard-go/syncguard"
)

// RWLock is the read-write locks of one lock table: Shared and Exclusive
// return its two Lockers. It holds no connection besides the LISTEN
// connection of its waiters (see Close); safe for concurrent use.
type RWLock struct {
	db       *sql.DB
	table    string
	dialect  driver.Dialect
	oneShot  []any // the dialect's driver.OneShot arguments: statements go unprepared
	identity string
	logger   *slog.Logger
	notifyDB *sql.DB
	relTO    time.Duration
	waker    *waiting.Waker
	window   time.Duration // a waiter's queue row lives this long after an attempt

	sqlAcquire, sqlRelease, sqlExtend, sqlHolders, sqlWriterFence, sqlList string

	shared, exclusive *Locker
}

// New returns the read-write locks of db with the rules of cfg (nil: the
// defaults): TableName names the tables (see SchemaSQL), Dialect,
// Identity, NotifyDB, Logger and ReleaseTimeout mean what they mean for
// syncguard.New; the other fields are ignored. New does no I/O: call
// SetupSchema once (or apply SchemaSQL) before use. Bad input is an
// InvalidArgument *syncguard.Error.
func New(db *sql.DB, cfg *syncguard.Config) (*RWLock, error) {
	c, err := kit.Resolve("rwlock.new", db, cfg)
	if err != nil {
		return nil, err
	}
	table := c.Table
	rw := &RWLock{db: db, table: table, dialect: c.Dialect, oneShot: c.OneShot, identity: c.Identity, logger: c.Logger,
		notifyDB: c.NotifyDB, relTO: c.ReleaseTimeout, window: 15 * time.Second,
		sqlAcquire: stripComments(render("call_acquire.sql", table)), sqlRelease: stripComments(render("call_release.sql", table)),
		sqlExtend: stripComments(render("extend.sql", table)), sqlHolders: stripComments(render("holders.sql", table)),
		sqlWriterFence: stripComments(render("writer_fence.sql", table)), sqlList: stripComments(render("list.sql", table))}
	rw.waker = rw.newWaker()
	rw.shared, rw.exclusive = &Locker{rw: rw}, &Locker{rw: rw, exclusive: true}
	return rw, nil
}

// Shared returns the Locker of shared (read) leases: any number at once,
// none while a writer holds the key or waits ahead.
func (rw *RWLock) Shared() *Locker { return rw.shared }

// Exclusive returns the Locker of exclusive (write) leases: one at a time,
// alone.
func (rw *RWLock) Exclusive() *Locker { return rw.exclusive }

// Close closes the LISTEN connection that wakes waiting Lock calls, if one
// is open; not the *sql.DB. The RWLock stays usable; its waits then poll.
func (rw *RWLock) Close() error {
	rw.waker.Close()
	return nil
}

// Holder is a live lease on a key, as Holders returns it: diagnostics,
// the answer describes an instant that has passed when it arrives.
type Holder struct {
	Exclusive  bool            // a writer's lease
	LockIDHash string          // syncguard.HashKey of the lockId
	Fence      syncguard.Fence // a writer's fence; a reader's writer generation
	ExpiresAt  time.Time       // server time
	AcquiredAt time.Time       // server time
	Identity   string          // the holder's identity, "" when none was set
	lockID     string
}

// Holders returns the live leases of key, oldest first.
func (rw *RWLock) Holders(ctx context.Context, key string) ([]Holder, error) {
	const op = "rwlock.holders"
	k, err := checkKey(op, key)
	if err != nil {
		return nil, err
	}
	rows, _, err := rw.holders(ctx, op, k.Storage, "")
	if err != nil {
		err.(*syncguard.Error).Key = key
	}
	return rows, err
}

// Holding is a live lease of any key, as List returns it: diagnostics,
// the answer describes an instant that has passed when it arrives.
type Holding struct {
	Key    string // the key, in NFC form
	Holder        // the lease: side, fence, times, identity, lockId's hash
}

// List returns every live lease of every key, shared and exclusive,
// newest first (then by key and lockId), in one statement, for
// diagnostics (the CLI's status and ls). It shows the keys, which may
// hold personal data: do not log it in production. The tables must exist
// (SetupSchema).
func (rw *RWLock) List(ctx context.Context) ([]*Holding, error) {
	const op = "rwlock.list"
	if err := ctx.Err(); err != nil {
		return nil, rw.wrap(ctx, op, err)
	}
	rows, err := rw.unprepared().QueryContext(ctx, rw.sqlList)
	if err != nil {
		return nil, rw.wrap(ctx, op, err)
	}
	defer rows.Close()
	out := []*Holding{}
	for rows.Next() {
		var (
			h           Holding
			id          string
			f, acq, exp int64
		)
		if err := rows.Scan(&h.Key, &h.Exclusive, &id, &f, &acq, &exp, &h.Identity); err != nil {
			return nil, rw.wrap(ctx, op, err)
		}
		h.LockIDHash, h.Fence, h.AcquiredAt, h.ExpiresAt = rules.HashKey(id), fence(f), time.UnixMilli(acq), time.UnixMilli(exp)
		out = append(out, &h)
	}
	if err := rows.Err(); err != nil {
		return nil, rw.wrap(ctx, op, err)
	}
	return out, nil
}

// WriterFence returns the latest writer fence issued for key (all zeros:
// no writer yet). A reader compares it with its lease's Fence (its writer
// generation): greater means a writer was admitted after the reader.
func (rw *RWLock) WriterFence(ctx context.Context, key string) (syncguard.Fence, error) {
	const op = "rwlock.writerFence"
	k, err := checkKey(op, key)
	if err != nil {
		return "", err
	}
	var n int64
	if err := rw.query(ctx, rw.sqlWriterFence, []any{k.Storage}, &n); err != nil {
		e := rw.wrap(ctx, op, err)
		e.Key = key
		return "", e
	}
	return fence(n), nil
}

func fence(n int64) syncguard.Fence {
	f, _ := rules.FormatFence(n)
	return syncguard.Fence(f)
}

// Locker is one side of an RWLock: Shared or Exclusive. It is a
// syncguard.LockBackend and a syncguard.Queuer, so syncguard.Lock and
// WithLock give its leases a TTL, AutoExtend, the loss signal and a queue
// place. A lease's Fence is, for a writer, its writer fence (strictly
// increasing per key); for a reader, its writer generation (the key's
// latest writer fence when it was admitted).
type Locker struct {
	rw        *RWLock
	exclusive bool
}

var (
	_ syncguard.LockBackend = (*Locker)(nil)
	_ syncguard.Queuer      = (*Locker)(nil)
)

// IsExclusive reports whether l is the Exclusive side.
func (l *Locker) IsExclusive() bool { return l.exclusive }

// RWLock returns the RWLock that l belongs to.
func (l *Locker) RWLock() *RWLock { return l.rw }

// LeaseLogger is the logger of leases taken on l (Config.Logger).
func (l *Locker) LeaseLogger() *slog.Logger { return l.rw.logger }

// Acquire implements syncguard.Locker: one attempt, which never queues
// (it counts as arriving after every live waiter). A writer is admitted
// when no lease is live and nobody waits; a reader when no writer holds
// the key or waits for it.
func (l *Locker) Acquire(ctx context.Context, key string, ttl time.Duration) (syncguard.AcquireResult, error) {
	return l.acquire(ctx, key, ttl, l.rw.identity, nil)
}

// Release implements syncguard.Locker: deletes the lease if lockID holds
// it and it is live. A writer's release hands what it frees to the head of
// the queue (the run of readers there, or the writer) in the same commit;
// a reader's, which runs beside other readers' statements, notifies the
// writer at the head when no other lease is left, and the writer's own
// attempt takes the key.
func (l *Locker) Release(ctx context.Context, lockID string) (syncguard.ReleaseResult, error) {
	return l.rw.release(ctx, lockID, "")
}

// Extend implements syncguard.Locker: sets the lease's expiry to server
// now + ttl if it is live; never revives an expired one.
func (l *Locker) Extend(ctx context.Context, lockID string, ttl time.Duration) (syncguard.ExtendResult, error) {
	const op = "extend"
	if err := checkLockID(op, lockID); err != nil {
		return syncguard.ExtendResult{}, err
	}
	ttlMs, e := ttlMillis(op, ttl)
	if e != nil {
		e.LockID = lockID
		return syncguard.ExtendResult{}, e
	}
	var (
		got, seen sql.NullInt64
		now       int64
	)
	if err := l.rw.run(ctx, l.rw.sqlExtend, []any{lockID, ttlMs}, &got, &seen, &now); err != nil {
		e := l.rw.wrap(ctx, op, err)
		e.LockID = lockID
		return syncguard.ExtendResult{}, e
	}
	if got.Valid {
		return syncguard.ExtendResult{OK: true, ExpiresAt: time.UnixMilli(got.Int64)}, nil
	}
	return syncguard.ExtendResult{Reason: failReason(seen, now)}, nil
}

// IsLocked implements syncguard.LockBackend: whether a live lease would
// turn this side's Acquire away: any lease for Exclusive, a writer's for
// Shared. (Waiters may turn it away too.)
func (l *Locker) IsLocked(ctx context.Context, key string) (bool, error) {
	info, err := l.lookup(ctx, "isLocked", key, "")
	return info != nil, err
}

// LookupKey implements syncguard.LockBackend: the live lease on key that
// turns this side away: the writer's; for Exclusive, else the reader's
// that expires last. nil when there is none.
func (l *Locker) LookupKey(ctx context.Context, key string) (*syncguard.LockInfo, error) {
	return l.lookup(ctx, "lookup", key, "")
}

// LookupID implements syncguard.LockBackend: the live lease of lockID,
// shared or exclusive; nil when there is none.
func (l *Locker) LookupID(ctx context.Context, lockID string) (*syncguard.LockInfo, error) {
	const op = "lookup"
	if err := checkLockID(op, lockID); err != nil {
		return nil, err
	}
	hs, key, err := l.rw.holders(ctx, op, "", lockID)
	if err != nil || len(hs) == 0 {
		return nil, err
	}
	return info(hs[0], key), nil
}

func (l *Locker) lookup(ctx context.Context, op, key, _ string) (*syncguard.LockInfo, error) {
	k, err := checkKey(op, key)
	if err != nil {
		return nil, err
	}
	hs, _, err := l.rw.holders(ctx, op, k.Storage, "")
	if err != nil {
		err.(*syncguard.Error).Key = key
		return nil, err
	}
	var pick *Holder
	for i := range hs {
		h := &hs[i]
		switch {
		case h.Exclusive:
			return info(*h, k.Norm), nil
		case l.exclusive && (pick == nil || h.ExpiresAt.After(pick.ExpiresAt)):
			pick = h
		}
	}
	if pick == nil {
		return nil, nil
	}
	return info(*pick, k.Norm), nil
}

func info(h Holder, key string) *syncguard.LockInfo {
	return &syncguard.LockInfo{KeyHash: rules.HashKey(key), LockIDHash: h.LockIDHash, ExpiresAt: h.ExpiresAt,
		AcquiredAt: h.AcquiredAt, Fence: h.Fence, Identity: h.Identity}
}

// Capabilities implements syncguard.LockBackend.
func (l *Locker) Capabilities() syncguard.Capabilities {
	return syncguard.Capabilities{Backend: "postgres", SupportsFencing: true, TimeAuthority: "server"}
}

// holders reads the live leases of a storage key (or of one lockId).
func (rw *RWLock) holders(ctx context.Context, op, storage, lockID string) ([]Holder, string, error) {
	rows, err := rw.unprepared().QueryContext(ctx, rw.sqlHolders, storage, lockID)
	if err != nil {
		return nil, "", rw.wrap(ctx, op, err)
	}
	defer rows.Close()
	var (
		out []Holder
		key string
	)
	for rows.Next() {
		var (
			h                Holder
			id               string
			exp, acq, f, now int64
		)
		if err := rows.Scan(&id, &h.Exclusive, &exp, &acq, &f, &key, &h.Identity, &now); err != nil {
			return nil, "", rw.wrap(ctx, op, err)
		}
		h.LockIDHash, h.Fence, h.lockID = rules.HashKey(id), fence(f), id
		h.ExpiresAt, h.AcquiredAt = time.UnixMilli(exp), time.UnixMilli(acq)
		out = append(out, h)
	}
	if err := rows.Err(); err != nil {
		return nil, "", rw.wrap(ctx, op, err)
	}
	return out, key, nil
}

var (
	failReason  = kit.FailReason
	invalidArg  = kit.InvalidArg
	checkKey    = kit.CheckKey
	checkLockID = kit.CheckLockID
	ttlMillis   = kit.TTLMillis
)

// wrap classifies err as syncguard does its own.
func (rw *RWLock) wrap(ctx context.Context, op string, err error) *syncguard.Error {
	return errwrap.Wrap(ctx, op, rw.dialect, err)
}
