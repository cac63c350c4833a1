package multilock

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/syncguard/syncguard-go/internal/kit"
	"github.com/syncguard/syncguard-go/internal/rules"
	"github.com/syncguard/syncguard-go/internal/waiting"
	"github.com/syncguard/syncguard-go/syncguard"
)

// Acquire implements syncguard.Locker: one attempt to take every key of
// set (Keys) for ttl, in one statement. OK == false (ReasonLocked) means a
// key is held, or a waiter queued earlier wants one of them (a plain
// attempt comes after every queued waiter). AcquireResult.Fence is the
// largest of the per-key fences (strictly increasing for the same set);
// Fences gives each key's.
func (l *Locker) Acquire(ctx context.Context, set string, ttl time.Duration) (syncguard.AcquireResult, error) {
	return l.acquire(ctx, set, ttl, l.k.Identity, nil)
}

// acquire is one attempt for holder ident; q, a waiter, makes it keep
// the waiter's place in the queue under the waiter's lockId.
func (l *Locker) acquire(ctx context.Context, set string, ttl time.Duration, ident string, q *kit.Waiter) (syncguard.AcquireResult, error) {
	const op = "acquire"
	ks, e := parse(op, set)
	var ttlMs int64
	if e == nil {
		ttlMs, e = kit.TTLMillis(op, ttl)
	}
	if e == nil && ctx.Err() != nil {
		e = l.k.Wrap(ctx, op, ctx.Err())
	}
	if e != nil {
		e.Key = set
		return syncguard.AcquireResult{}, e
	}
	lockID, window, notified := rules.GenerateLockID(), int64(0), false
	if q != nil {
		lockID = q.LockID
		window, notified = l.k.WindowMs(ctx), q.Join(l.k.Waker, q.Channel)
	}
	ks0 := setJSON(ks)
	args := []any{ks0, lockID, ttlMs, window, notified, sql.NullString{String: ident, Valid: ident != ""}}
	var d struct {
		ok, present, held bool
		expires, acquired sql.NullInt64
		fences            sql.NullString
		busyUntil         sql.NullInt64
		exhausted         bool
		ahead, now        int64
	}
	dest := []any{&d.ok, &d.present, &d.held, &d.expires, &d.acquired, &d.fences, &d.busyUntil, &d.exhausted, &d.ahead, &d.now}
	var err error
	for i := 0; ; i++ {
		err = l.runOp(ctx, opAcquire, args, dest...)
		if err == nil && !d.present && i < maxReruns {
			var one int
			err = l.k.Row(ctx, l.sql.placeholder+"\nRETURNING 1", []any{ks0}, &one)
			if err == sql.ErrNoRows {
				err = nil // a racer wrote them
			}
			if err == nil {
				continue
			}
		}
		if err == nil && !d.ok && i < maxReruns && ctx.Err() == nil {
			continue // stale: another statement changed a key since the snapshot
		}
		if err != nil && ctx.Err() == nil && i < maxReruns && l.rerun(err) {
			continue
		}
		break
	}
	if err != nil {
		e := l.k.WrapKey(ctx, op, set, "", err)
		if kit.OutcomeUnknown(ctx, e) {
			l.k.Unsure(&l.ops, q, lockID)
		}
		return syncguard.AcquireResult{}, e
	}
	if !d.ok || !d.held {
		if d.ok && d.exhausted {
			return syncguard.AcquireResult{}, &syncguard.Error{Op: op, Code: syncguard.ErrInternal, Key: set,
				Msg: fmt.Sprintf("the fence counter of a key of the set reached its maximum (%d); nothing was committed", int64(rules.FenceMax))}
		}
		res := syncguard.AcquireResult{Reason: syncguard.ReasonLocked}
		if d.busyUntil.Valid {
			res.RetryIn = kit.RetryIn(d.busyUntil.Int64, d.now)
		}
		if q != nil && d.ok {
			q.Listen()
		}
		return res, nil
	}
	fences := strings.Split(d.fences.String, ",")
	if !d.expires.Valid || len(fences) != len(ks) {
		return syncguard.AcquireResult{}, &syncguard.Error{Op: op, Code: syncguard.ErrInternal, Key: set, Msg: "malformed rows returned by acquire"}
	}
	kf := make([]KeyFence, len(ks))
	var top string
	for i, k := range ks {
		if _, err := rules.ParseFence(fences[i]); err != nil {
			return syncguard.AcquireResult{}, &syncguard.Error{Op: op, Code: syncguard.ErrInternal, Key: set, Msg: "malformed fence returned by acquire"}
		}
		kf[i] = KeyFence{Key: k.Norm, Fence: syncguard.Fence(fences[i])}
		top = max(top, fences[i])
	}
	if ctx.Err() != nil {
		// The commit may be on the primary only: not reported as done.
		l.k.Unsure(&l.ops, nil, lockID)
		return syncguard.AcquireResult{}, l.k.WrapKey(ctx, op, set, "", ctx.Err())
	}
	l.remember(lockID, kf)
	var age time.Duration
	if q != nil {
		age = kit.Since(d.acquired, d.now)
	}
	return syncguard.AcquireResult{OK: true, LockID: lockID, Fence: syncguard.Fence(top),
		ExpiresAt: time.UnixMilli(d.expires.Int64), HandedOver: age}, nil
}

// Release implements syncguard.Locker: it deletes every key of the
// holding lockID, if it is live, in one statement, and hands what it frees
// to the waiters first in line in the same commit. OK only when every key
// was still held.
func (l *Locker) Release(ctx context.Context, lockID string) (syncguard.ReleaseResult, error) {
	r, _, err := l.releaseAs(ctx, lockID, nil)
	return r, err
}

// releaseAs is Release; leaving, a waiter's first key, makes lockID a
// waiter that leaves the queue (a tombstone), and tells whether it was in.
func (l *Locker) releaseAs(ctx context.Context, lockID string, leaving *rules.Key) (syncguard.ReleaseResult, bool, error) {
	const op = "release"
	if _, err := l.k.StartID(ctx, op, lockID, 0, false); err != nil {
		return syncguard.ReleaseResult{}, false, err
	}
	var d struct {
		fresh              bool
		deleted            int64
		n, seen            sql.NullInt64
		now                int64
		woke, wokeChannels sql.NullString
		left               bool
		granted, notified  int64
	}
	inCommit := l.k.NotifyDB == nil
	var tk, tf sql.NullString
	if leaving != nil {
		tk, tf = sql.NullString{String: leaving.Storage, Valid: true}, sql.NullString{String: leaving.Fence, Valid: true}
	}
	args := []any{lockID, inCommit, leaving != nil, tk, tf}
	err := l.runFresh(ctx, op, opRelease, args, &d.fresh, &d.fresh, &d.deleted, &d.n, &d.seen, &d.now, &d.woke, &d.wokeChannels, &d.left, &d.granted, &d.notified)
	if err != nil {
		return syncguard.ReleaseResult{}, false, l.k.WrapKey(ctx, op, "", lockID, err)
	}
	l.forget(lockID)
	l.k.Woke(ctx, d.woke.String, strings.Split(d.wokeChannels.String, ","), args[1] == false)
	if d.deleted > 0 && d.n.Valid && d.deleted == d.n.Int64 {
		return syncguard.ReleaseResult{OK: true}, d.left, nil
	}
	return syncguard.ReleaseResult{Reason: kit.FailReason(d.seen, d.now)}, d.left, nil
}

// Extend implements syncguard.Locker: the expiry of every key of the
// holding lockID becomes server now + ttl, in one statement, if every key
// is still held; it never revives an expired holding.
func (l *Locker) Extend(ctx context.Context, lockID string, ttl time.Duration) (syncguard.ExtendResult, error) {
	const op = "extend"
	ttlMs, err := l.k.StartID(ctx, op, lockID, ttl, true)
	if err != nil {
		return syncguard.ExtendResult{}, err
	}
	var d struct {
		fresh           bool
		extended        int64
		expires, seen   sql.NullInt64
		rows, now, bump int64
	}
	err = l.runFresh(ctx, op, opExtend, []any{lockID, ttlMs}, &d.fresh, &d.fresh, &d.extended, &d.expires, &d.seen, &d.rows, &d.now, &d.bump)
	if err == nil {
		err = ctx.Err()
	}
	if err != nil {
		return syncguard.ExtendResult{}, l.k.WrapKey(ctx, op, "", lockID, err)
	}
	if d.extended > 0 && d.expires.Valid {
		return syncguard.ExtendResult{OK: true, ExpiresAt: time.UnixMilli(d.expires.Int64)}, nil
	}
	return syncguard.ExtendResult{Reason: kit.FailReason(d.seen, d.now)}, nil
}

// runFresh runs statement o of op again, at most maxReruns times, while
// it finds a key changed since its snapshot (fresh false) or meets a
// serialization failure; a release whose wake-ups fill the notification
// queue (54000) runs again without them (args[1], in the commit, false).
func (l *Locker) runFresh(ctx context.Context, op string, o int, args []any, fresh *bool, dest ...any) error {
	for i := 0; ; i++ {
		err := l.runOp(ctx, o, args, dest...)
		switch {
		case ctx.Err() != nil || i >= maxReruns:
		case err != nil && o == opRelease && args[1] == true && l.k.Dialect.Inspect(err).SQLState == "54000":
			args[1] = false
			continue
		case err == nil && !*fresh || err != nil && l.rerun(err):
			continue
		}
		if err == nil && !*fresh {
			err = &syncguard.Error{Op: op, Code: syncguard.ErrServiceUnavailable,
				Msg: fmt.Sprintf("the keys kept changing under %d runs of the %s; nothing was done", maxReruns, op)}
		}
		return err
	}
}

// Queue implements kit.Queuer: the waiter of one Lock or WithLock
// call for set. Its attempts keep one place (the server's clock at its
// first attempt) in one queue for all its keys: a set is taken only when
// every key is free and no waiter placed earlier wants any of them, so
// waits on overlapping sets never deadlock, and the first waiter gets its
// set once its keys' holders are gone. It listens on its first key's
// channel, where its tombstone goes when it leaves. With once, or an
// invalid set, its attempts are plain ones.
func (l *Locker) Queue(set, identity string, once bool) kit.Wait {
	ks, e := parse("lock", set)
	var first rules.Key
	if e == nil {
		first = ks[0]
	}
	return l.k.NewWaiter(set, first, waiting.Channel(l.tables.channelPrefix(), first.Storage), identity, !once && e == nil, &l.ops)
}

func (l *Locker) leave(ctx context.Context, q *kit.Waiter) (bool, bool, error) {
	first := q.First
	r, left, err := l.releaseAs(ctx, q.LockID, &first)
	return r.OK, left, err
}
