package rwlock

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/syncguard/syncguard-go/internal/kit"
	"github.com/syncguard/syncguard-go/internal/rules"
	"github.com/syncguard/syncguard-go/internal/waiting"
	"github.com/syncguard/syncguard-go/syncguard"
)

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
func (l *Locker) acquire(ctx context.Context, key string, ttl time.Duration, ident string, q *kit.Waiter) (syncguard.AcquireResult, error) {
	const op = "acquire"
	rw := l.rw
	k, ttlMs, err := rw.k.StartKey(ctx, op, key, ttl)
	if err != nil {
		return syncguard.AcquireResult{}, err
	}
	lockID, window, notified := rules.GenerateLockID(), sql.NullInt64{}, false
	if q != nil {
		lockID = q.LockID
		window = sql.NullInt64{Int64: rw.k.WindowMs(ctx), Valid: true}
		notified = q.Join(rw.k.Waker, q.Channel) // it listens at once
		q.Listen()
	}
	var d struct {
		ok, exhausted, again              sql.NullBool
		fence, expires, acquired, retryAt sql.NullInt64
		now                               int64
		woke                              sql.NullString
	}
	sent := &sentArg{v: lockID}
	args := []any{k.Storage, sent, k.Norm, l.exclusive, ttlMs, window, notified,
		sql.NullString{String: ident, Valid: ident != ""}, rw.k.NotifyDB == nil}
	err = rw.k.Row(ctx, rw.sqlAcquire, args, &d.ok, &d.fence, &d.expires, &d.acquired, &d.now, &d.retryAt, &d.exhausted, &d.woke, &d.again)
	if err != nil {
		e := rw.k.WrapKey(ctx, op, key, "", err)
		if sent.sent.Load() && kit.OutcomeUnknown(ctx, e) {
			rw.k.Unsure(&l.ops, q, lockID)
		}
		return syncguard.AcquireResult{}, e
	}
	rw.k.Woke(ctx, d.woke.String, []string{waiting.Channel(channelPrefix(rw.k.Table), k.Storage)}, rw.k.NotifyDB != nil)
	if d.exhausted.Bool {
		return syncguard.AcquireResult{}, &syncguard.Error{Op: op, Code: syncguard.ErrInternal, Key: key,
			Msg: fmt.Sprintf("writer fence counter for this key reached its maximum (%d); nothing was committed", int64(rules.FenceMax))}
	}
	if !d.ok.Bool {
		res := syncguard.AcquireResult{Reason: syncguard.ReasonLocked}
		if d.again.Bool {
			// a queued writer found only statements in flight (readers'
			// releases that may not see its place): it attempts again
			res.RetryIn = againIn
		} else if d.retryAt.Valid {
			res.RetryIn = kit.RetryIn(d.retryAt.Int64, d.now)
		}
		return res, nil
	}
	if !d.fence.Valid || !d.expires.Valid {
		return syncguard.AcquireResult{}, &syncguard.Error{Op: op, Code: syncguard.ErrInternal, Key: key, Msg: "malformed row returned by acquire"}
	}
	var age time.Duration
	if q != nil {
		age = kit.Since(d.acquired, d.now)
	}
	return syncguard.AcquireResult{OK: true, LockID: lockID, Fence: kit.Fence(d.fence.Int64),
		ExpiresAt: time.UnixMilli(d.expires.Int64), HandedOver: age}, nil
}

// againIn: how soon a queued writer attempts again when its attempt found
// the key row locked by readers' statements and no lease left to wait for
// (sql/functions.sql, acquire).
const againIn = 5 * time.Millisecond

// release deletes lockID's lease; wkey, the storage key of a waiter giving
// up, also ends its queue place.
func (rw *RWLock) release(ctx context.Context, lockID, wkey string) (syncguard.ReleaseResult, error) {
	const op = "release"
	if _, err := rw.k.StartID(ctx, op, lockID, 0, false); err != nil {
		return syncguard.ReleaseResult{}, err
	}
	var d struct {
		done         bool
		seen         sql.NullInt64
		now          int64
		woke, wokeOn sql.NullString
	}
	args := []any{lockID, sql.NullString{String: wkey, Valid: wkey != ""}, rw.k.NotifyDB == nil}
	if err := rw.k.Row(ctx, rw.sqlRelease, args, &d.done, &d.seen, &d.now, &d.woke, &d.wokeOn); err != nil {
		return syncguard.ReleaseResult{}, rw.k.WrapKey(ctx, op, "", lockID, err)
	}
	if d.wokeOn.Valid {
		rw.k.Woke(ctx, d.woke.String, []string{d.wokeOn.String}, rw.k.NotifyDB != nil)
	}
	if d.done {
		return syncguard.ReleaseResult{OK: true}, nil
	}
	return syncguard.ReleaseResult{Reason: kit.FailReason(d.seen, d.now)}, nil
}

// Extend implements syncguard.Locker: sets the lease's expiry to server
// now + ttl if it is live; never revives an expired one.
func (l *Locker) Extend(ctx context.Context, lockID string, ttl time.Duration) (syncguard.ExtendResult, error) {
	const op = "extend"
	ttlMs, err := l.rw.k.StartID(ctx, op, lockID, ttl, true)
	if err != nil {
		return syncguard.ExtendResult{}, err
	}
	var (
		got, seen sql.NullInt64
		now       int64
	)
	if err := l.rw.k.Row(ctx, l.rw.sqlExtend, []any{lockID, ttlMs}, &got, &seen, &now); err != nil {
		return syncguard.ExtendResult{}, l.rw.k.WrapKey(ctx, op, "", lockID, err)
	}
	if got.Valid {
		return syncguard.ExtendResult{OK: true, ExpiresAt: time.UnixMilli(got.Int64)}, nil
	}
	return syncguard.ExtendResult{Reason: kit.FailReason(seen, now)}, nil
}

// Queue implements kit.Queuer: the waiter of one Lock or WithLock
// call, which waits as the mutex's waiters do (docs/rwlock.md); it
// listens on its key's channel from its first attempt. With once, or for
// an invalid key, its attempts are plain ones.
func (l *Locker) Queue(key, identity string, once bool) kit.Wait {
	k, err := rules.DeriveKey(key)
	return l.rw.k.NewWaiter(key, k, waiting.Channel(channelPrefix(l.rw.k.Table), k.Storage), identity, !once && err == nil, &l.ops)
}

// leave is a waiter's release of its lockId, which makes its queue row a
// tombstone and passes on a lease granted to it meanwhile (and whatever
// its leaving frees: readers queued behind a writer that leaves).
func (rw *RWLock) leave(ctx context.Context, q *kit.Waiter) (bool, bool, error) {
	r, err := rw.release(ctx, q.LockID, q.First.Storage)
	return r.OK, true, err
}
