package rwlock

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/syncguard/syncguard-go/internal/pooler"
	"github.com/syncguard/syncguard-go/internal/rules"
	"github.com/syncguard/syncguard-go/internal/waiting"
	"github.com/syncguard/syncguard-go/syncguard"
)

// Statements go out unprepared, in one round trip (pooler.Unprepared):
// safe behind a transaction-mode pooler without a probe.

func (rw *RWLock) unprepared() pooler.Querier { return pooler.Unprepared(rw.db, rw.oneShot) }

// query runs query and scans its one row.
func (rw *RWLock) query(ctx context.Context, query string, args []any, dest ...any) error {
	return pooler.QueryRow(ctx, rw.unprepared(), query, args, dest...)
}

// run is query, run once more in an explicit READ COMMITTED transaction
// after a serialization failure or deadlock (40001, 40P01: the session's
// default isolation level is higher, or an extend met a concurrent
// delete); neither committed anything.
func (rw *RWLock) run(ctx context.Context, query string, args []any, dest ...any) error {
	err := rw.query(ctx, query, args, dest...)
	if err == nil || ctx.Err() != nil {
		return err
	}
	if st := rw.dialect.Inspect(err).SQLState; st != "40001" && st != "40P01" {
		return err
	}
	tx, err := rw.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // no-op after Commit
	if err := pooler.QueryRow(ctx, pooler.Unprepared(tx, rw.oneShot), query, args, dest...); err != nil {
		return err
	}
	return tx.Commit()
}

// sentArg records that the statement went out (database/sql converts
// arguments just before sending), so that an error before it means the
// attempt took nothing.
type sentArg struct {
	v    string
	sent atomic.Bool
}

func (a *sentArg) Value() (driver.Value, error) {
	a.sent.Store(true)
	return a.v, nil
}

// acquire is one attempt as a plain caller (q nil) or as waiter q.
func (l *Locker) acquire(ctx context.Context, key string, ttl time.Duration, ident string, q *waiter) (syncguard.AcquireResult, error) {
	const op = "acquire"
	rw := l.rw
	k, err := checkKey(op, key)
	if err != nil {
		return syncguard.AcquireResult{}, err
	}
	ttlMs, e := ttlMillis(op, ttl)
	if e != nil {
		e.Key = key
		return syncguard.AcquireResult{}, e
	}
	if err := ctx.Err(); err != nil {
		e := rw.wrap(ctx, op, err)
		e.Key = key
		return syncguard.AcquireResult{}, e
	}
	lockID := rules.GenerateLockID()
	window, notified := sql.NullInt64{}, false
	if q != nil {
		lockID = q.LockID
		w := rw.window
		if dl, ok := ctx.Deadline(); ok {
			w = max(min(w, time.Until(dl)), time.Millisecond)
		}
		window = sql.NullInt64{Int64: w.Milliseconds(), Valid: true}
		notified = q.join(k.Storage)
	}
	var d struct {
		ok, exhausted, again              sql.NullBool
		fence, expires, acquired, retryAt sql.NullInt64
		now                               int64
		woke                              sql.NullString
	}
	sent := &sentArg{v: lockID}
	args := []any{k.Storage, sent, k.Norm, l.exclusive, ttlMs, window, notified,
		sql.NullString{String: ident, Valid: ident != ""}, rw.notifyDB == nil}
	err = rw.run(ctx, rw.sqlAcquire, args, &d.ok, &d.fence, &d.expires, &d.acquired, &d.now, &d.retryAt, &d.exhausted, &d.woke, &d.again)
	if err != nil {
		e := rw.wrap(ctx, op, err)
		e.Key = key
		if sent.sent.Load() && outcomeUnknown(ctx, e) {
			if q == nil {
				rw.releaseInBackground(lockID, "")
			} else {
				q.Unknown.Store(true)
			}
		}
		return syncguard.AcquireResult{}, e
	}
	rw.wake(ctx, k.Storage, d.woke)
	if d.exhausted.Bool {
		return syncguard.AcquireResult{}, &syncguard.Error{Op: op, Code: syncguard.CodeInternal, Key: key,
			Msg: fmt.Sprintf("writer fence counter for this key reached its maximum (%d); nothing was committed", int64(rules.FenceMax))}
	}
	if !d.ok.Bool {
		res := syncguard.AcquireResult{Reason: syncguard.ReasonLocked}
		if d.again.Bool {
			// a queued writer found only statements in flight (readers'
			// releases that may not see its place): it attempts again
			res.RetryIn = againIn
		} else if d.retryAt.Valid {
			res.RetryIn = max(time.Duration(d.retryAt.Int64+rules.ToleranceMs+1-d.now)*time.Millisecond, 0)
		}
		return res, nil
	}
	if !d.fence.Valid || !d.expires.Valid {
		return syncguard.AcquireResult{}, &syncguard.Error{Op: op, Code: syncguard.CodeInternal, Key: key, Msg: "malformed row returned by acquire"}
	}
	var age time.Duration
	if q != nil && d.acquired.Valid {
		age = time.Duration(max(d.now-d.acquired.Int64, 0)) * time.Millisecond
	}
	return syncguard.AcquireResult{OK: true, LockID: lockID, Fence: fence(d.fence.Int64),
		ExpiresAt: time.UnixMilli(d.expires.Int64), HandedOver: age}, nil
}

// againIn: how soon a queued writer attempts again when its attempt found
// the key row locked by readers' statements and no lease left to wait for
// (sql/functions.sql, acquire).
const againIn = 5 * time.Millisecond

// outcomeUnknown reports whether a statement that failed with e may have
// committed (syncguard's rule: its context ended, or the connection failed
// without an answer).
func outcomeUnknown(ctx context.Context, e *syncguard.Error) bool {
	st := e.SQLState
	return ctx.Err() != nil || (e.Code == syncguard.CodeServiceUnavailable || e.Code == syncguard.CodeNetworkTimeout) &&
		(st == "" || strings.HasPrefix(st, "08") || strings.HasPrefix(st, "57P"))
}

// release deletes lockID's lease; wkey, the storage key of a waiter giving
// up, also ends its queue place.
func (rw *RWLock) release(ctx context.Context, lockID, wkey string) (syncguard.ReleaseResult, error) {
	const op = "release"
	if err := checkLockID(op, lockID); err != nil {
		return syncguard.ReleaseResult{}, err
	}
	if err := ctx.Err(); err != nil {
		e := rw.wrap(ctx, op, err)
		e.LockID = lockID
		return syncguard.ReleaseResult{}, e
	}
	var d struct {
		done         bool
		seen         sql.NullInt64
		now          int64
		woke, wokeOn sql.NullString
	}
	args := []any{lockID, sql.NullString{String: wkey, Valid: wkey != ""}, rw.notifyDB == nil}
	if err := rw.run(ctx, rw.sqlRelease, args, &d.done, &d.seen, &d.now, &d.woke, &d.wokeOn); err != nil {
		e := rw.wrap(ctx, op, err)
		e.LockID = lockID
		return syncguard.ReleaseResult{}, e
	}
	if d.wokeOn.Valid {
		rw.wakeOn(ctx, d.wokeOn.String, d.woke)
	}
	if d.done {
		return syncguard.ReleaseResult{OK: true}, nil
	}
	return syncguard.ReleaseResult{Reason: failReason(d.seen, d.now)}, nil
}

// wake wakes the waiters a statement granted: this process's at once, and
// with NotifyDB the others through it (else the statement's commit did).
func (rw *RWLock) wake(ctx context.Context, storage string, woke sql.NullString) {
	rw.wakeOn(ctx, channel(rw.table, storage), woke)
}

func (rw *RWLock) wakeOn(ctx context.Context, ch string, woke sql.NullString) {
	if !woke.Valid || woke.String == "" {
		return
	}
	for _, p := range strings.Split(woke.String, ",") {
		rw.waker.Wake(p)
		if rw.notifyDB != nil {
			_, _ = rw.notifyDB.ExecContext(ctx, waiting.NotifySQL, ch, p)
		}
	}
}

// releaseInBackground releases lockID (a lease or a waiter's place whose
// attempt may have committed unanswered) after the caller gave up on it,
// retrying for ReleaseTimeout; a lease it misses expires at its TTL.
func (rw *RWLock) releaseInBackground(lockID, wkey string) {
	go func() {
		deadline := time.Now().Add(rw.relTO)
		for wait := 50 * time.Millisecond; time.Now().Before(deadline); wait *= 2 {
			ctx, cancel := context.WithDeadline(context.Background(), deadline)
			_, err := rw.release(ctx, lockID, wkey)
			cancel()
			if err == nil {
				return
			}
			time.Sleep(wait)
		}
	}()
}
