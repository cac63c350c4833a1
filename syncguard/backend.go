package syncguard

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/syncguard/syncguard-go/driver"
	"github.com/syncguard/syncguard-go/internal/rules"
)

var _ LockBackend = (*Backend)(nil)

// New returns a Backend for db. cfg may be nil. It validates the
// configuration and finds the driver's dialect, but does no I/O: call
// SetupSchema once (or apply SchemaSQL with your migrations) before use.
func New(db *sql.DB, cfg *Config) (*Backend, error) {
	if db == nil {
		return nil, invalidArg("new", "db must not be nil")
	}
	r, err := cfg.resolve()
	if err != nil {
		return nil, err
	}
	if r.Dialect == nil {
		d, ok := driver.Lookup(db.Driver())
		if !ok {
			return nil, &Error{Op: "new", Code: ErrInvalidArgument, Msg: fmt.Sprintf(
				"no syncguard dialect registered for database/sql driver %T: import an adapter, "+
					`_ "github.com/syncguard/syncguard-go/pq" (lib/pq) or _ "github.com/syncguard/syncguard-go/pgxstd" (pgx/v5/stdlib), `+
					"or set Config.Dialect (registered: %s)", db.Driver(), strings.Join(driver.Registered(), ", "))}
		}
		r.Dialect = d
	}
	if r.Logger == nil {
		r.Logger = slog.Default()
	}
	return &Backend{shared: newShared(db, r)}, nil
}

func newShared(db *sql.DB, r resolved) *shared {
	s := &shared{db: db, cfg: r, sql: renderStatements(r.TableName, r.FenceTableName), cl: classifier{dialect: r.Dialect, table: r.TableName, fenceTable: r.FenceTableName}}
	for i := range s.unprep {
		s.unprep[i] = unpreparedMark + s.sql.ops[i]
		if s.sql.funcs[i] != "" {
			s.unprepFn[i] = unpreparedMark + s.sql.funcs[i]
		}
	}
	if os, ok := r.Dialect.(driver.OneShot); ok {
		s.oneShotArgs = os.OneShotArgs()
	}
	if r.DisablePrepare {
		s.prep.Store(prepOff)
	}
	s.waitCfg.window = defaultWaitWindow
	s.waker = newWaker(s)
	s.orphans = &orphanQueue{s: s}
	return s
}

// releaseStmt is the release statement for the tables there are.
func (s *shared) releaseStmt() int {
	switch {
	case s.noQueue.Load():
		return stmtReleasePlain
	case s.noHolders.Load():
		return stmtReleaseQueue
	}
	return stmtRelease
}

// keepStmt is release_keep.sql for the tables there are.
func (s *shared) keepStmt() int {
	if s.noQueue.Load() {
		return stmtReleaseKeepPlain
	}
	return stmtReleaseKeep
}

// WithTx returns a view of b whose operations run inside tx: the lock row
// and the fence increment commit or roll back with the caller's own writes.
// A lock taken in tx is invisible to other sessions until tx commits, and
// until tx ends other acquirers of the same key (or of another key with the
// same 32-bit advisory lock hash: "Transactions" in docs/design.md) are told
// it is locked. Show a fence obtained in tx to nothing outside tx before it
// commits: a rollback hands that fence out again.
//
// If any operation in tx fails, roll tx back: a failed Acquire may still
// have written its row into tx. Serialization failures (40001) inside tx
// are the caller's to retry. A Lease made on the view must end before tx
// does. tx is usually a *sql.Tx; any Tx works (see Tx for the ORMs). A nil
// tx gives b's pool behaviour.
func (b *Backend) WithTx(tx Tx) *Backend {
	if t, ok := tx.(*sql.Tx); tx == nil || ok && t == nil {
		return &Backend{shared: b.shared}
	}
	if t := unwrapSQLTx(tx); t != nil {
		tx = t
	}
	v := &Backend{shared: b.shared, tx: tx}
	v.stmtTx, _ = tx.(stmtTx)
	return v
}

// Capabilities reports Backend "postgres", fencing, and server time.
func (b *Backend) Capabilities() Capabilities {
	return Capabilities{Backend: "postgres", SupportsFencing: true, TimeAuthority: "server"}
}

// TableName reports the resolved lock table name.
func (b *Backend) TableName() string { return b.shared.cfg.TableName }

// FenceTableName reports the resolved fence counter table name.
func (b *Backend) FenceTableName() string { return b.shared.cfg.FenceTableName }

// Tracer returns Config.Tracer. Lock and WithLock find it through
// wrappers (As) when LockOptions.Tracer is nil.
func (b *Backend) Tracer() Tracer { return b.shared.cfg.Tracer }

// startOp starts the trace of one of b's operations (the callers check
// first that b has a Tracer: without one, nothing of this runs).
func (b *Backend) startOp(ctx context.Context, op, key, lockID string) (opTrace, context.Context) {
	return startOp(b.shared.cfg.Tracer, ctx, TraceOp{Op: op, Key: key, LockID: lockID, Locker: b})
}

// releaseTimeout is Config.ReleaseTimeout, for leases made on b.
func (b *Backend) releaseTimeout() time.Duration { return b.shared.cfg.ReleaseTimeout }

// Acquire implements LockBackend. It is a single attempt: OK == false
// means the key is held; use the lock helper for retries.
func (b *Backend) Acquire(ctx context.Context, key string, ttl time.Duration) (AcquireResult, error) {
	if b.shared.cfg.Tracer == nil {
		return b.acquire(ctx, key, ttl, b.shared.cfg.Identity, nil)
	}
	o, ctx := b.startOp(ctx, "acquire", key, "")
	r, err := b.acquire(ctx, key, ttl, b.shared.cfg.Identity, nil)
	o.end(r.OK, r.Reason, r.LockID, err)
	return r, err
}

// absentRetry: a queued waiter that found the key free without a row, its
// advisory lock held (a racing acquire, almost always), attempts again
// after this long, by when the racer's row is there.
const absentRetry = 5 * time.Millisecond

// acquire is one attempt for holder ident; q, a waiter on the pool, makes
// it keep the waiter's place in the queue, under the waiter's lockId.
func (b *Backend) acquire(ctx context.Context, key string, ttl time.Duration, ident string, q *queueState) (AcquireResult, error) {
	const op = "acquire"
	k, e := checkKey(op, key)
	if e != nil {
		return AcquireResult{}, e
	}
	ttlMs, e := ttlMillis(op, ttl)
	if e == nil {
		e = ctxErr(ctx, op)
	}
	if e != nil {
		e.Key = key
		return AcquireResult{}, e
	}
	if b.shared.noQueue.Load() {
		q = nil
	}
	if b.shared.noHolders.Load() {
		ident = ""
	}
	var lockID string
	args := []any{k.Storage, nil, k.Fence, k.Norm, ttlMs}
	if q == nil {
		lockID = rules.GenerateLockID()
	} else {
		lockID = q.LockID
		// A queue row lives no longer than its wait.
		window := q.window()
		if dl, ok := ctx.Deadline(); ok {
			window = max(min(window, time.Until(dl)), time.Millisecond)
		}
		args = append(args, window.Milliseconds(), q.join(ttlMs))
	}
	var d struct { // one allocation (docs/design.md, Costs)
		gotID             sql.NullString
		expires, acquired sql.NullInt64
		fence             sql.NullString
		exhausted         bool
		now               int64
		absent, opened    bool
		rank              int64
	}
	sent := &sentArg{v: lockID}
	args[1] = sent
	if ident != "" {
		args = append(args, ident)
	}
	stmt := acquireStmts[b2i(q != nil)][b2i(ident != "")]
	dest := []any{&d.gotID, &d.expires, &d.acquired, &d.fence, &d.exhausted, &d.now, &d.absent, &d.opened, &d.rank}
	start := time.Now()
	err := b.run(ctx, stmt, args, dest...)
	if err != nil && ctx.Err() == nil && (ident != "" && b.shared.holdersLost(err) || q != nil && b.shared.queueLost(err)) {
		return b.acquire(ctx, key, ttl, ident, q) // without the missing table (noHolders, noQueue)
	}
	// A free key without a row whose advisory lock someone else holds: a
	// placeholder row if no acquire is in flight, then the attempt again.
	// A queued waiter answers locked the first time: the holder is almost
	// always a racing acquire, whose row its next attempt sees, and the
	// placeholder's look at pg_locks costs the server its lock manager
	// ("The advisory try-lock" in docs/design.md); seen twice in a row,
	// the waiter writes it. It attempts again soon: the key is free.
	skipped := q != nil && err == nil && !q.absent.Swap(d.absent) && d.absent
	if skipped {
		d.absent = false
	}
	for i, put := 0, false; err == nil && d.absent && i < 2 && ctx.Err() == nil; i++ {
		err = (&Backend{shared: b.shared}).run(ctx, stmtPlaceholder, []any{k.Storage, lockID, k.Norm}, &put)
		if err == nil && put {
			err = b.run(ctx, stmt, args, dest...)
		} else if err == nil {
			break // a racer's row, or its acquire in flight: locked
		}
	}
	if err != nil {
		e := b.shared.cl.wrap(ctx, op, err)
		e.Key = key
		// The statement may have committed unanswered: our lockId is
		// released in the background (orphans.go), a waiter's when it leaves.
		if b.tx == nil && sent.sent.Load() && outcomeUnknown(ctx, e) {
			if q == nil {
				b.shared.releaseInBackground(lockID, time.Duration(ttlMs)*time.Millisecond)
			} else {
				q.Unknown.Store(true)
			}
		}
		return AcquireResult{}, e
	}
	if b.tx == nil && ctx.Err() != nil {
		// The commit may be on the primary only (see unconfirmed); our
		// lockId, if it won, is released in the background.
		e := unconfirmed(ctx, op)
		e.Key = key
		if q == nil && d.gotID.Valid && d.gotID.String == lockID {
			b.shared.releaseInBackground(lockID, time.Duration(ttlMs)*time.Millisecond)
		}
		return AcquireResult{}, e
	}
	if d.exhausted {
		return AcquireResult{}, &Error{Op: op, Code: ErrInternal, Key: key,
			Msg: fmt.Sprintf("fence counter for this key reached its maximum (%d); nothing was committed", int64(rules.FenceMax))}
	}
	if !d.gotID.Valid || d.gotID.String != lockID {
		res := AcquireResult{OK: false, Reason: ReasonLocked}
		if d.expires.Valid {
			res.RetryIn = max(time.Duration(d.expires.Int64+rules.ToleranceMs+1-d.now)*time.Millisecond, 0)
		} else if skipped {
			res.RetryIn = absentRetry
		}
		if q != nil {
			var holder int64 // the live holder's fence, when there is one
			if d.gotID.Valid && d.fence.Valid {
				holder, _ = rules.ParseFence(d.fence.String)
			}
			q.contended(d.rank, holder, start, d.now)
		}
		return res, nil
	}
	fence, ferr := rules.ParseFence(d.fence.String)
	if !d.expires.Valid || !d.fence.Valid || ferr != nil {
		return AcquireResult{}, &Error{Op: op, Code: ErrInternal, Key: key, Msg: "malformed row returned by acquire"}
	}
	var age time.Duration
	if q != nil && d.acquired.Valid {
		age = time.Duration(max(d.now-d.acquired.Int64, 0)) * time.Millisecond
	}
	if fence > rules.FenceWarn {
		b.shared.cfg.Logger.Warn("syncguard: fence above warning threshold; plan a key rotation before it reaches the maximum",
			slog.String("keyHash", rules.HashKey(k.Norm)), slog.String("fence", d.fence.String),
			slog.Int64("warnThreshold", rules.FenceWarn), slog.Int64("max", rules.FenceMax))
	}
	if d.opened && b.tx == nil {
		b.shared.kept.add(lockID) // its release keeps the row (keep.go)
	}
	return AcquireResult{OK: true, LockID: lockID, Fence: Fence(d.fence.String), ExpiresAt: msToTime(d.expires.Int64), HandedOver: age}, nil
}

// outcomeUnknown reports whether an acquire that failed with e may have
// committed: its context ended, or the connection failed with no answer or
// a connection or shutdown class SQLSTATE (any other rejection did not).
func outcomeUnknown(ctx context.Context, e *Error) bool {
	st := e.SQLState
	return ctx.Err() != nil || (e.Code == ErrServiceUnavailable || e.Code == ErrNetworkTimeout) &&
		(st == "" || strings.HasPrefix(st, "08") || strings.HasPrefix(st, "57P"))
}

// unconfirmed is the error for an acquire or extend on the pool that
// returned its row after its context ended: a cancel that reached a commit
// waiting for a synchronous standby returns success for a commit only the
// primary has ("A cancelled acquire" in docs/errors.md).
func unconfirmed(ctx context.Context, op string) *Error {
	e := fromContext(ctx, op, nil)
	e.Msg += "; the statement returned after it, so it may have committed on the primary without reaching a synchronous standby: outcome unknown, not reported as done"
	return e
}

// Release implements LockBackend. At most one Release of a lock succeeds.
// On the pool, for a lock with at most a minute left, its commit does not
// wait for the WAL flush: after a server crash the lock may come back,
// unowned, until its expiry ("Durability of a release" in docs/design.md).
// Inside WithTx it commits with the caller's transaction.
func (b *Backend) Release(ctx context.Context, lockID string) (ReleaseResult, error) {
	if b.shared.cfg.Tracer == nil {
		r, _, err := b.release(ctx, lockID, "")
		return r, err
	}
	o, ctx := b.startOp(ctx, "release", "", lockID)
	r, _, err := b.release(ctx, lockID, "")
	o.end(r.OK, r.Reason, "", err)
	return r, err
}

// release is Release, also telling whether lockID was a waiter that left
// the queue (queueWaiter.Leave, with its storage key as waiterKey).
func (b *Backend) release(ctx context.Context, lockID, waiterKey string) (ReleaseResult, bool, error) {
	const op = "release"
	if e := checkLockID(op, lockID); e != nil {
		return ReleaseResult{}, false, e
	}
	if e := ctxErr(ctx, op); e != nil {
		e.LockID = lockID
		return ReleaseResult{}, false, e
	}
	var d struct {
		deleted      sql.NullString
		seenExpires  sql.NullInt64
		now          int64
		woke, wokeOn sql.NullString // the payload and channel of the waiter woken
		leftQueue    bool
	}
	notifyInCommit := b.tx != nil || b.shared.cfg.NotifyDB == nil || b.shared.waker.PoolReaches()
	args := []any{lockID, b.tx == nil, notifyInCommit, sql.NullString{String: waiterKey, Valid: waiterKey != ""}}
	dest := []any{&d.deleted, &d.seenExpires, &d.now, &d.woke, &d.wokeOn, &d.leftQueue}
	stmt := b.shared.releaseStmt()
	var err error
	if kept := b.tx == nil && waiterKey == "" && b.shared.kept.take(lockID); kept {
		err = b.run(ctx, b.shared.keepStmt(), args[:1], dest...)
		if err == nil && d.deleted.Valid && d.deleted.String == lockID {
			return ReleaseResult{OK: true}, false, nil
		}
	}
	if err == nil || ctx.Err() == nil {
		err = b.run(ctx, stmt, args, dest...)
	}
	if err != nil && notifyInCommit && b.tx == nil && ctx.Err() == nil && b.shared.sqlState(err) == "54000" {
		// A full notification queue: the same release without wake-ups.
		args[2] = false
		err = b.run(ctx, stmt, args, dest...)
	}
	// Without the holders or the waiters table: the statement without them
	// (inside a transaction, which the error aborted, the caller's retry).
	for err != nil && ctx.Err() == nil && (b.shared.holdersLost(err) || b.shared.queueLost(err)) && stmt != b.shared.releaseStmt() && b.tx == nil {
		stmt = b.shared.releaseStmt()
		err = b.run(ctx, stmt, args, dest...)
	}
	if err != nil {
		e := b.shared.cl.wrap(ctx, op, err)
		e.LockID = lockID
		return ReleaseResult{}, false, e
	}
	if b.tx == nil && d.woke.Valid {
		woke := d.woke.String
		if ctx.Err() != nil { // the commit may be on the primary only (see unconfirmed): a plain wake-up, the waiter reads its row
			woke, _, _ = strings.Cut(woke, ":")
		}
		b.shared.waker.Wake(woke) // a waiter of this process handed the key: at once
		if !notifyInCommit {
			_ = b.shared.notify(ctx, d.wokeOn.String, d.woke.String)
		}
	}
	// Ownership (docs/spec.md, rule O2): the deleted row must be ours.
	if d.deleted.Valid && d.deleted.String == lockID {
		return ReleaseResult{OK: true}, d.leftQueue, nil
	}
	return ReleaseResult{OK: false, Reason: failReason(d.seenExpires, d.now)}, d.leftQueue, nil
}

// failReason tells why a release or extend did nothing, from its snapshot.
func failReason(seenExpires sql.NullInt64, now int64) string {
	if seenExpires.Valid && !rules.IsLive(seenExpires.Int64, now) {
		return ReasonExpired
	}
	return ReasonNotFound
}

// Extend implements LockBackend. The new expiry is server now + ttl,
// returned as ExpiresAt; an expired lock is never revived.
func (b *Backend) Extend(ctx context.Context, lockID string, ttl time.Duration) (ExtendResult, error) {
	if b.shared.cfg.Tracer == nil {
		return b.extend(ctx, lockID, ttl)
	}
	o, ctx := b.startOp(ctx, "extend", "", lockID)
	r, err := b.extend(ctx, lockID, ttl)
	o.end(r.OK, r.Reason, "", err)
	return r, err
}

func (b *Backend) extend(ctx context.Context, lockID string, ttl time.Duration) (ExtendResult, error) {
	const op = "extend"
	if e := checkLockID(op, lockID); e != nil {
		return ExtendResult{}, e
	}
	ttlMs, e := ttlMillis(op, ttl)
	if e == nil {
		e = ctxErr(ctx, op)
	}
	if e != nil {
		e.LockID = lockID
		return ExtendResult{}, e
	}
	var d struct {
		updated     sql.NullString
		newExpires  sql.NullInt64
		seenExpires sql.NullInt64
		now         int64
	}
	err := b.run(ctx, stmtExtend, []any{lockID, ttlMs}, &d.updated, &d.newExpires, &d.seenExpires, &d.now)
	if err != nil {
		e := b.shared.cl.wrap(ctx, op, err)
		e.LockID = lockID
		return ExtendResult{}, e
	}
	if b.tx == nil && ctx.Err() != nil && d.updated.Valid {
		e := unconfirmed(ctx, op)
		e.LockID = lockID
		return ExtendResult{}, e
	}
	if d.updated.Valid && d.updated.String == lockID && d.newExpires.Valid {
		return ExtendResult{OK: true, ExpiresAt: msToTime(d.newExpires.Int64)}, nil
	}
	return ExtendResult{OK: false, Reason: failReason(d.seenExpires, d.now)}, nil
}

type lockRow struct {
	lockID            sql.NullString
	expires, acquired sql.NullInt64
	fence, userKey    sql.NullString
	now               int64
	identity          sql.NullString
}

func (r *lockRow) live() bool {
	return r.lockID.Valid && r.expires.Valid && rules.IsLive(r.expires.Int64, r.now)
}

func (b *Backend) readRow(ctx context.Context, op string, byID bool, arg string) (*lockRow, *Error) {
	if e := ctxErr(ctx, op); e != nil {
		return nil, e
	}
	var r lockRow
	holders := !b.shared.noHolders.Load()
	dest := []any{&r.lockID, &r.expires, &r.acquired, &r.fence, &r.userKey, &r.now, &r.identity}
	err := b.run(ctx, lookupStmts[b2i(byID)][b2i(holders)], []any{arg}, dest...)
	if err != nil && holders && ctx.Err() == nil && b.shared.holdersLost(err) {
		err = b.run(ctx, lookupStmts[b2i(byID)][0], []any{arg}, dest...)
	}
	if err != nil {
		return nil, b.shared.cl.wrap(ctx, op, err)
	}
	return &r, nil
}

// IsLocked implements LockBackend. It is a pure read unless
// Config.CleanupInIsLocked is set (see there).
func (b *Backend) IsLocked(ctx context.Context, key string) (bool, error) {
	if b.shared.cfg.Tracer == nil {
		return b.isLocked(ctx, key)
	}
	o, ctx := b.startOp(ctx, "isLocked", key, "")
	locked, err := b.isLocked(ctx, key)
	o.end(locked, "", "", err)
	return locked, err
}

func (b *Backend) isLocked(ctx context.Context, key string) (bool, error) {
	const op = "isLocked"
	k, e := checkKey(op, key)
	if e != nil {
		return false, e
	}
	r, e := b.readRow(ctx, op, false, k.Storage)
	if e != nil {
		e.Key = key
		return false, e
	}
	live := r.live()
	if !live && r.expires.Valid && b.shared.cfg.CleanupInIsLocked && r.expires.Int64 < r.now-rules.CleanupGraceMs {
		b.shared.maybeCleanup(ctx, k.Storage)
	}
	return live, nil
}

// maybeCleanup deletes one long-expired lock row in the background, at most
// once per CleanupInterval, one-shot (a rare statement). Failures are
// logged, never returned.
func (s *shared) maybeCleanup(parent context.Context, storageKey string) {
	now := time.Now().UnixNano()
	last := s.lastCleanup.Load()
	if now-last < int64(s.cfg.CleanupInterval) || !s.lastCleanup.CompareAndSwap(last, now) {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(parent), s.cfg.ReleaseTimeout)
		defer cancel()
		if err := (&Backend{shared: s}).oneShot(ctx, s.sql.cleanup, []any{storageKey}, nil); err != nil {
			s.cfg.Logger.Warn("syncguard: background cleanup failed", slog.String("keyHash", rules.HashKey(storageKey)),
				slog.String("code", string(s.cl.wrap(ctx, "cleanup", err).Code)))
		}
	}()
}
