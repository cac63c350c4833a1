package txguard

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/syncguard/syncguard-go/driver"
	"github.com/syncguard/syncguard-go/internal/errwrap"
	"github.com/syncguard/syncguard-go/internal/kit"
	"github.com/syncguard/syncguard-go/internal/rules"
	"github.com/syncguard/syncguard-go/internal/sqltx"
	"github.com/syncguard/syncguard-go/multilock"
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
	table, err := tableName(cfg)
	if err != nil {
		return nil, err
	}
	var d driver.Dialect
	if cfg != nil {
		d = cfg.Dialect
	}
	if d == nil {
		if db == nil {
			return nil, invalidArg(op, "db must not be nil when cfg.Dialect is not set")
		}
		var ok bool
		if d, ok = driver.Lookup(db.Driver()); !ok {
			return nil, invalidArg(op, fmt.Sprintf("no syncguard dialect registered for database/sql driver %T: import an adapter "+
				`(_ "github.com/syncguard/syncguard-go/pq" or _ "github.com/syncguard/syncguard-go/pgxstd") or set Config.Dialect (registered: %s)`,
				db.Driver(), strings.Join(driver.Registered(), ", ")))
		}
	}
	g := &Guard{table: table, tables: kindTables(table), dialect: d}
	for k, f := range holdFiles {
		g.holds[k] = stripComments(render(f, table, nil))
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
// tx is what Backend.WithTx accepts (syncguard.Tx): a *sql.Tx, a *sqlx.Tx,
// GORM's tx.Statement.ConnPool (a *sql.Tx or a *gorm.PreparedStmtTX), bun's
// bunTx.Tx. When tx embeds a *sql.Tx, Hold runs on that (docs/orm.md).
// It must be the transaction of the writes: a pool (*sql.DB) fits the
// interface too, but its row lock would end with its own statement.
func (g *Guard) Hold(ctx context.Context, tx syncguard.Tx, key, lockID string) (Held, error) {
	return g.holdRow(ctx, tx, kindMutex, key, lockID)
}

// holdRow is Hold for a lease of one row: a mutex's lock row, a
// semaphore permit's slot, an rwlock reader's or writer's holder row.
func (g *Guard) holdRow(ctx context.Context, tx syncguard.Tx, kd kind, key, lockID string) (Held, error) {
	const op = "hold"
	k, err := rules.DeriveKey(key)
	if err != nil {
		e := ruleErr(op, err)
		e.Key = key
		return Held{}, e
	}
	if e := kit.CheckLockID(op, lockID); e != nil {
		return Held{}, e
	}
	tx, e := callerTx(op, tx)
	if e != nil {
		return Held{}, e
	}
	if err := ctx.Err(); err != nil {
		return Held{}, g.wrap(ctx, op, key, lockID, err)
	}
	var (
		rowKey, fence sql.NullString
		expires       sql.NullInt64
		now           int64
	)
	if err := tx.QueryRowContext(ctx, g.holds[kd], lockID).Scan(&rowKey, &fence, &expires, &now); err != nil {
		return Held{}, g.wrap(ctx, op, key, lockID, err)
	}
	switch {
	case !rowKey.Valid:
		what := map[kind]string{kindMutex: "lock", kindSemaphore: "permit", kindRWLock: "reader or writer"}[kd]
		return Held{}, lost(op, key, lockID, "no "+what+" has this lockId (released, taken over, or never acquired)")
	case rowKey.String != k.Storage:
		return Held{}, &syncguard.Error{Op: op, Code: syncguard.CodeInvalidArgument, Key: key, LockID: lockID,
			Msg: "this lockId holds the lock of another key", Err: syncguard.ErrLockLost}
	case expires.Int64 <= now:
		return Held{}, lost(op, key, lockID, fmt.Sprintf("expired %d ms ago by the server's clock", now-expires.Int64))
	}
	return Held{Fence: syncguard.Fence(fence.String), ExpiresAt: time.UnixMilli(expires.Int64), Now: time.UnixMilli(now)}, nil
}

// HoldLease is Hold for a lease of any kind of lock, with the same
// guarantee: no takeover of what the lease holds can commit before tx
// ends. It reads the kind from the lease's Locker (Lease.Locker, through
// wrappers that Unwrap) and checks, in the tables of the Guard's
// syncguard.Config, and locks until tx ends:
//
//   - a mutex lease (syncguard.Backend): its lock row, FOR KEY SHARE;
//   - a semaphore permit (semaphore.Semaphore, *semaphore.Permit): its
//     slot's row, FOR KEY SHARE;
//   - an rwlock reader or writer (rwlock Locker): its holder row, FOR
//     KEY SHARE;
//   - a multilock set (*multilock.Lease): the row of every key of the
//     set, FOR SHARE (the holding's own extends then wait for tx too),
//     and Held.Fences gets each key's fence.
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
	switch e.SQLState {
	case SQLStateLeaseLost:
		return &syncguard.Error{Op: "write", Code: syncguard.CodeInvalidArgument, SQLState: e.SQLState,
			Msg: g.dialect.Inspect(err).Message, Err: errors.Join(syncguard.ErrLockLost, err)}
	case SQLStateStaleFence:
		return &syncguard.Error{Op: "write", Code: syncguard.CodeInvalidArgument, SQLState: e.SQLState,
			Msg: g.dialect.Inspect(err).Message, Err: errors.Join(ErrStaleFence, err)}
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

// callerTx checks tx and returns the *sql.Tx it embeds (an ORM's wrapper,
// as Backend.WithTx unwraps it), else tx itself.
func callerTx(op string, tx syncguard.Tx) (syncguard.Tx, *syncguard.Error) {
	if sqltx.IsNil(tx) {
		return nil, invalidArg(op, "tx must not be nil: Hold locks the lease in the caller's transaction")
	}
	if t := sqltx.Unwrap(tx); t != nil {
		return t, nil
	}
	return tx, nil
}

func lost(op, key, lockID, why string) *syncguard.Error {
	return &syncguard.Error{Op: op, Code: syncguard.CodeInvalidArgument, Key: key, LockID: lockID,
		Msg: "lease not held: " + why + "; roll the transaction back", Err: syncguard.ErrLockLost}
}

var (
	invalidArg = kit.InvalidArg
	ruleErr    = kit.RuleErr
)
