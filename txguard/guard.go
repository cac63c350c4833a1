package txguard

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/syncguard/syncguard-go/driver"
	"github.com/syncguard/syncguard-go/internal/errwrap"
	"github.com/syncguard/syncguard-go/internal/kit"
	"github.com/syncguard/syncguard-go/internal/sqltx"
	"github.com/syncguard/syncguard-go/multilock"
	"github.com/syncguard/syncguard-go/rwlock"
	"github.com/syncguard/syncguard-go/semaphore"
	"github.com/syncguard/syncguard-go/syncguard"
)

// SQLSTATEs raised by the package's SQL functions (an implementation-defined
// class, "SG", that PostgreSQL itself never uses).
const (
	// SQLStateLeaseLost: the SQL function <TableName>_hold found the lease
	// not held (see SchemaSQL).
	SQLStateLeaseLost = "SG001"
	// SQLStateStaleFence: a fence guard rejected a write whose fence is
	// below the stored one (see FenceGuardSQL).
	SQLStateStaleFence = "SG002"
)

// ErrStaleFence is the cause (errors.Is) of the error Classify returns for
// a write that a fence guard rejected.
var ErrStaleFence = errors.New("syncguard: stale fence")

// Guard checks leases inside callers' transactions. It holds no
// connection; it is safe for concurrent use.
type Guard struct {
	table   string            // the lock table, unquoted
	tables  map[string]string // the tables of each kind (kindTables), unquoted
	dialect driver.Dialect
	holds   [numKinds]string // the hold statement of each kind (holdFiles), rendered
}

// New returns a Guard for the lock table that cfg names (nil: the
// defaults), with the rules of syncguard.Config: TableName and
// Config.Dialect are read, the other fields ignored. db is only used to
// find the dialect, which reads driver errors (SQLSTATEs): import an
// adapter or set cfg.Dialect. New does no I/O; bad input is an
// InvalidArgument *syncguard.Error.
func New(db *sql.DB, cfg *syncguard.Config) (*Guard, error) {
	const op = "txguard.new"
	table, err := kit.TableName(op, cfg)
	if err != nil {
		return nil, err
	}
	var d driver.Dialect
	if cfg != nil {
		d = cfg.Dialect
	}
	if d == nil && db == nil {
		return nil, kit.InvalidArg(op, "db must not be nil when cfg.Dialect is not set")
	}
	if d, err = kit.FindDialect(op, db, d); err != nil {
		return nil, err
	}
	g := &Guard{table: table, tables: kindTables(table), dialect: d}
	for k := range holdFiles {
		g.holds[k] = hold(kind(k), table)
	}
	return g, nil
}

// Held is a lease as Hold found and locked it.
type Held struct {
	// Fence is the lease's fence, from its row: a mutex's; a semaphore
	// permit's slot fence; an rwlock writer's fence or a reader's writer
	// generation; for a multilock set, the largest of its keys' fences.
	Fence syncguard.Fence
	// Fences, for a multilock set only, is each key (NFC form) with its
	// fence, in the set's canonical order (multilock.Lease.Fences): write
	// each resource row with its own key's fence.
	Fences    []multilock.KeyFence
	ExpiresAt time.Time // the lease's expiry (server time); extends may move it later
	Now       time.Time // the server's clock when the row locks were granted
}

// Hold checks, in tx, that the mutex lease lockID on key (a lease of a
// syncguard.Backend; HoldLease checks a lease of any kind) is held: its lock row
// exists with that lockId and has not expired by the server's clock
// (expires_at_ms > now, without the spec's 1000 ms tolerance). It locks
// that row FOR KEY SHARE until tx ends, so no takeover of the key (an
// acquire, a release, Revoke, cleanup, the reference implementation's
// acquire) can commit before tx does, while the lease's own extends go
// through. Writes that tx makes after Hold returns nil therefore commit
// only while the lease holds. One round trip.
//
// A lease that is not held is an InvalidArgument *syncguard.Error
// wrapping syncguard.ErrLockLost (errors.Is), as Lease.Extend reports an
// ended lease; its Msg says whether the lease expired or is gone. Under
// REPEATABLE READ or SERIALIZABLE a takeover or release that committed
// after tx's snapshot fails Hold with SQLSTATE 40001 (ServiceUnavailable,
// retryable: a retry of the whole transaction checks again); a deadlock
// with tx's other row locks is 40P01 (the same). After any error the
// caller must roll tx back. Bad input is InvalidArgument before any I/O.
//
// tx is what Backend.WithTx accepts (syncguard.Tx; an ORM's, docs/orm.md),
// and must be the transaction of the writes: a pool (*sql.DB) fits the
// interface too, but its row lock would end with its own statement.
func (g *Guard) Hold(ctx context.Context, tx syncguard.Tx, key, lockID string) (Held, error) {
	return g.holdRow(ctx, tx, kindMutex, key, lockID)
}

// holdRow is Hold for a lease of one row: a mutex's lock row, a
// semaphore permit's slot, an rwlock reader's or writer's holder row.
func (g *Guard) holdRow(ctx context.Context, tx syncguard.Tx, kd kind, key, lockID string) (Held, error) {
	const op = "hold"
	k, err := kit.CheckKey(op, key)
	if err != nil {
		return Held{}, err
	}
	var (
		rowKey, fence sql.NullString
		expires       sql.NullInt64
		now           int64
	)
	err = g.each(ctx, op, tx, kd, key, lockID, func(scan func(...any) error) error { return scan(&rowKey, &fence, &expires, &now) })
	switch {
	case err != nil:
		return Held{}, err
	case !rowKey.Valid:
		what := map[kind]string{kindMutex: "lock", kindSemaphore: "permit", kindRWLock: "reader or writer"}[kd]
		return Held{}, lost(op, key, lockID, "no "+what+" has this lockId (released, taken over, or never acquired)")
	case rowKey.String != k.Storage:
		return Held{}, &syncguard.Error{Op: op, Code: syncguard.ErrInvalidArgument, Key: key, LockID: lockID,
			Msg: "this lockId holds the lock of another key", Err: syncguard.ErrLockLost}
	case expires.Int64 <= now:
		return Held{}, lost(op, key, lockID, fmt.Sprintf("expired %d ms ago by the server's clock", now-expires.Int64))
	}
	return Held{Fence: syncguard.Fence(fence.String), ExpiresAt: time.UnixMilli(expires.Int64), Now: time.UnixMilli(now)}, nil
}

// each runs the hold statement of kind kd for lockID in the caller's tx
// (the *sql.Tx it embeds, if any) and calls row for each of its rows.
func (g *Guard) each(ctx context.Context, op string, tx syncguard.Tx, kd kind, key, lockID string, row func(scan func(...any) error) error) error {
	if e := kit.CheckLockID(op, lockID); e != nil {
		return e
	}
	if sqltx.IsNil(tx) {
		return kit.InvalidArg(op, "tx must not be nil: Hold locks the lease in the caller's transaction")
	}
	if t := sqltx.Unwrap(tx); t != nil {
		tx = t // an ORM's wrapper, as Backend.WithTx unwraps it
	}
	wrap := func(err error) error { return g.wrap(ctx, op, key, lockID, err) }
	if err := ctx.Err(); err != nil {
		return wrap(err)
	}
	rows, err := tx.QueryContext(ctx, g.holds[kd], lockID)
	if err != nil {
		return wrap(err)
	}
	return kit.EachRow(rows, wrap, row)
}

// HoldLease is Hold for a lease of any kind of lock, with the same
// guarantee: no takeover of what the lease holds can commit before tx
// ends. It reads the kind from the lease's Locker (Lease.Locker, through
// wrappers that Unwrap) and checks, in the tables of the Guard's
// syncguard.Config, and locks until tx ends:
//
//   - FOR KEY SHARE, a mutex lease's lock row, a semaphore permit's slot
//     row, an rwlock reader's or writer's holder row;
//   - FOR SHARE, the row of every key of a multilock set (the holding's
//     own extends then wait for tx too); Held.Fences gets each key's fence.
//
// The holder's own extends go through, except a multilock set's. A lease
// of another Locker, or of tables other than the Guard's, is an
// InvalidArgument *syncguard.Error before any I/O. A lease that has
// already ended (Err is set: lost or released) fails before any I/O,
// with the error of a lease the server found not held, which also wraps
// Err. One round trip. tx is what Hold accepts.
func (g *Guard) HoldLease(ctx context.Context, tx syncguard.Tx, lease Lease) (Held, error) {
	const op = "hold"
	lease, kd, err := g.checkLease(op, lease)
	if err != nil {
		return Held{}, err
	}
	if err := lease.Err(); err != nil {
		e := lost(op, lease.Key(), lease.LockID(), "the lease has ended")
		e.Err = errors.Join(syncguard.ErrLockLost, err)
		return Held{}, e
	}
	if kd == kindMultiLock {
		return g.holdSet(ctx, tx, lease.Key(), lease.LockID())
	}
	return g.holdRow(ctx, tx, kd, lease.Key(), lease.LockID())
}

// Classify turns an error of the caller's own statement into a
// *syncguard.Error: SQLSTATE SG001 (the SQL function found the lease not
// held) as Hold reports a lost lease, SG002 (a fence guard rejected the
// write) as InvalidArgument wrapping ErrStaleFence, anything else as
// syncguard classifies driver errors (ctx is checked first). nil stays nil.
func (g *Guard) Classify(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	e := g.wrap(ctx, "write", "", "", err)
	if cause := map[string]error{SQLStateLeaseLost: syncguard.ErrLockLost, SQLStateStaleFence: ErrStaleFence}[e.SQLState]; cause != nil {
		return &syncguard.Error{Op: "write", Code: syncguard.ErrInvalidArgument, SQLState: e.SQLState,
			Msg: g.dialect.Inspect(err).Message, Err: errors.Join(cause, err)}
	}
	return e
}

// wrap classifies a driver error of op as syncguard does, with words for
// the conflicts a row lock in the caller's transaction meets.
func (g *Guard) wrap(ctx context.Context, op, key, lockID string, err error) *syncguard.Error {
	e := errwrap.Wrap(ctx, op, g.dialect, err)
	e.Key, e.LockID = key, lockID
	switch e.SQLState {
	case "40001":
		e.Msg = "the lock row changed after this transaction's snapshot (REPEATABLE READ or SERIALIZABLE: a takeover or release committed since): roll back; a retry of the whole transaction checks the lease again"
	case "40P01":
		e.Msg = "deadlock between the lock row and this transaction's other row locks: roll back and retry; call Hold first in the transaction to avoid it"
	}
	return e
}

func lost(op, key, lockID, why string) *syncguard.Error {
	return &syncguard.Error{Op: op, Code: syncguard.ErrInvalidArgument, Key: key, LockID: lockID,
		Msg: "lease not held: " + why + "; roll the transaction back", Err: syncguard.ErrLockLost}
}

// kind is the kind of lock a lease is of: which table holds its rows.
type kind int

const (
	kindMutex     kind = iota // syncguard.Backend: a row in the lock table
	kindMultiLock             // multilock.Locker: a row per key of the set
	kindSemaphore             // semaphore.Semaphore: the permit's slot row
	kindRWLock                // rwlock.Locker: the reader's or writer's holder row
	numKinds
)

// holdFiles are the hold statements of each kind (sql/).
var holdFiles = [numKinds]string{"hold.sql", "hold_multilock.sql", "hold_semaphore.sql", "hold_rwlock.sql"}

func (k kind) String() string {
	return [numKinds]string{"mutex", "multilock", "semaphore", "rwlock"}[k]
}

// Lease is a held lease of any kind of lock: a *syncguard.Lease (of a
// syncguard.Backend, a semaphore.Semaphore or an rwlock Locker), a
// *multilock.Lease or a *semaphore.Permit (both embed one). Locker tells
// HoldLease the kind of lock, and so the tables that hold the lease.
type Lease interface {
	Key() string
	LockID() string
	Err() error
	Locker() syncguard.Locker
}

// kindOf finds the kind of a lease's Locker (through wrappers that
// Unwrap, as syncguard.As does) and the lock table it was configured
// with (syncguard.Config.TableName). No I/O.
func kindOf(l syncguard.Locker) (kind, string, bool) {
	if l == nil {
		return 0, "", false
	}
	if b, ok := syncguard.As[*syncguard.Backend](l); ok {
		return kindMutex, b.TableName(), true
	}
	if m, ok := syncguard.As[*multilock.Locker](l); ok {
		return kindMultiLock, m.Tables().Locks, true
	}
	if s, ok := syncguard.As[*semaphore.Semaphore](l); ok {
		return kindSemaphore, s.TableName(), true
	}
	if r, ok := syncguard.As[*rwlock.Locker](l); ok {
		return kindRWLock, r.RWLock().TableName(), true
	}
	return 0, "", false
}

// leaseOf returns the *syncguard.Lease inside lease, nil when there is
// none (a nil lease, or a *multilock.Lease or *semaphore.Permit without
// one); other implementations are taken as they are.
func leaseOf(lease Lease) (Lease, bool) {
	switch v := lease.(type) {
	case *syncguard.Lease:
		return v, v != nil
	case *multilock.Lease:
		if v != nil {
			return leaseOf(v.Lease)
		}
	case *semaphore.Permit:
		if v != nil {
			return leaseOf(v.Lease)
		}
	default:
		return lease, lease != nil
	}
	return nil, false
}

// checkLease finds the kind of lease and checks that it is held in this
// Guard's tables; bad input is InvalidArgument before any I/O.
func (g *Guard) checkLease(op string, lease Lease) (Lease, kind, error) {
	lease, ok := leaseOf(lease)
	if !ok {
		return nil, 0, kit.InvalidArg(op, "lease must not be nil")
	}
	k, table, ok := kindOf(lease.Locker())
	if !ok {
		e := kit.InvalidArg(op, fmt.Sprintf("cannot check a lease of Locker %T: HoldLease checks leases of a *syncguard.Backend, a "+
			"*multilock.Locker, a *semaphore.Semaphore or an *rwlock.Locker (a wrapper must implement Unwrap() syncguard.LockBackend)",
			lease.Locker()))
		e.Key = lease.Key()
		return nil, 0, e
	}
	want := g.table
	if k == kindMultiLock {
		want = g.tables["ml_locks"]
	}
	if table != want {
		e := kit.InvalidArg(op, fmt.Sprintf("the lease's %s keeps its rows under lock table %q, this Guard checks those of %q: "+
			"make the Guard with the Locker's syncguard.Config", k, table, want))
		e.Key = lease.Key()
		return nil, 0, e
	}
	return lease, k, nil
}

// holdSet is Hold for a multilock set: every key's row of the holding
// lockID, locked FOR SHARE (hold_multilock.sql); it holds when the rows
// are the set's keys, all of them, and live by the server's clock.
func (g *Guard) holdSet(ctx context.Context, tx syncguard.Tx, set, lockID string) (Held, error) {
	const op = "hold"
	keys, err := multilock.ParseKeys(set)
	if err != nil {
		if e, ok := err.(*syncguard.Error); ok {
			e.Op = op
		}
		return Held{}, err
	}
	var (
		h               Held
		expires, now, n int64
	)
	err = g.each(ctx, op, tx, kindMultiLock, set, lockID, func(scan func(...any) error) error {
		var (
			storage, user, fence sql.NullString
			exp, size            sql.NullInt64
			rowNow               int64
		)
		if err := scan(&storage, &user, &fence, &exp, &size, &rowNow); err != nil {
			return err
		}
		if now = max(now, rowNow); !storage.Valid {
			return nil
		}
		if len(h.Fences) == 0 || exp.Int64 < expires {
			expires = exp.Int64
		}
		n = size.Int64
		h.Fences = append(h.Fences, multilock.KeyFence{Key: user.String, Fence: syncguard.Fence(fence.String)})
		return nil
	})
	if err != nil {
		return Held{}, err
	}
	got := make([]string, len(h.Fences))
	for i, f := range h.Fences {
		got[i] = f.Key
	}
	slices.Sort(got)
	want := slices.Clone(keys)
	slices.Sort(want)
	switch {
	case len(h.Fences) == 0:
		return Held{}, lost(op, set, lockID, "no set has this lockId (released, taken over, or never acquired)")
	case int64(len(h.Fences)) != n:
		return Held{}, lost(op, set, lockID, fmt.Sprintf("this lockId holds %d of its set's %d keys (the others were taken over)", len(h.Fences), n))
	case !slices.Equal(got, want):
		return Held{}, &syncguard.Error{Op: op, Code: syncguard.ErrInvalidArgument, Key: set, LockID: lockID,
			Msg: "this lockId holds the lock of another set", Err: syncguard.ErrLockLost}
	case expires <= now:
		return Held{}, lost(op, set, lockID, fmt.Sprintf("expired %d ms ago by the server's clock", now-expires))
	}
	// Fences in the set's canonical order (ParseKeys'), the largest as Fence.
	order := make(map[string]int, len(keys))
	for i, k := range keys {
		order[k] = i
	}
	slices.SortFunc(h.Fences, func(a, b multilock.KeyFence) int { return order[a.Key] - order[b.Key] })
	for _, f := range h.Fences {
		h.Fence = max(h.Fence, f.Fence)
	}
	h.ExpiresAt, h.Now = time.UnixMilli(expires), time.UnixMilli(now)
	return h, nil
}
