package multilock

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/syncguard/syncguard-go/internal/rules"
	"github.com/syncguard/syncguard-go/syncguard"
)

// Acquire implements syncguard.Locker: one attempt to take every key of
// set (Keys) for ttl, in one statement. OK == false (ReasonLocked) means a
// key is held, or a waiter queued earlier wants one of them (a plain
// attempt comes after every queued waiter). AcquireResult.Fence is the
// largest of the per-key fences (strictly increasing for the same set);
// Fences gives each key's.
func (l *Locker) Acquire(ctx context.Context, set string, ttl time.Duration) (syncguard.AcquireResult, error) {
	return l.acquire(ctx, set, ttl, l.identity, nil)
}

// acquire is one attempt for holder ident; q, a waiter, makes it keep
// the waiter's place in the queue under the waiter's lockId.
func (l *Locker) acquire(ctx context.Context, set string, ttl time.Duration, ident string, q *qstate) (syncguard.AcquireResult, error) {
	const op = "acquire"
	ks, e := parse(op, set)
	if e == nil {
		e = ttlMillis(op, ttl)
	}
	if e == nil {
		e = ctxErr(ctx, op, l)
	}
	if e != nil {
		e.Key = set
		return syncguard.AcquireResult{}, e
	}
	ttlMs := ttl.Milliseconds()
	lockID, window, notified := rules.GenerateLockID(), int64(0), false
	if q != nil {
		lockID = q.LockID
		w := l.window
		if dl, ok := ctx.Deadline(); ok {
			w = max(min(w, time.Until(dl)), time.Millisecond)
		}
		window, notified = w.Milliseconds(), q.Join(l.waker, q.channel)
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
			err = l.run(ctx, l.sql.placeholder+"\nRETURNING 1", []any{ks0}, &one)
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
		e := l.wrap(ctx, op, err)
		e.Key = set
		if unknownOutcome(ctx, e) {
			if q == nil {
				go l.releaseInBackground(lockID)
			} else {
				q.Unknown.Store(true)
			}
		}
		return syncguard.AcquireResult{}, e
	}
	if !d.ok || !d.held {
		if d.ok && d.exhausted {
			return syncguard.AcquireResult{}, &syncguard.Error{Op: op, Code: syncguard.CodeInternal, Key: set,
				Msg: fmt.Sprintf("the fence counter of a key of the set reached its maximum (%d); nothing was committed", int64(rules.FenceMax))}
		}
		res := syncguard.AcquireResult{Reason: syncguard.ReasonLocked}
		if d.busyUntil.Valid {
			res.RetryIn = max(time.Duration(d.busyUntil.Int64+rules.ToleranceMs+1-d.now)*time.Millisecond, 0)
		}
		if q != nil && d.ok {
			q.Listen()
		}
		return res, nil
	}
	fences := strings.Split(d.fences.String, ",")
	if !d.expires.Valid || len(fences) != len(ks) {
		return syncguard.AcquireResult{}, &syncguard.Error{Op: op, Code: syncguard.CodeInternal, Key: set, Msg: "malformed rows returned by acquire"}
	}
	kf := make([]KeyFence, len(ks))
	var top string
	for i, k := range ks {
		if _, err := rules.ParseFence(fences[i]); err != nil {
			return syncguard.AcquireResult{}, &syncguard.Error{Op: op, Code: syncguard.CodeInternal, Key: set, Msg: "malformed fence returned by acquire"}
		}
		kf[i] = KeyFence{Key: k.Norm, Fence: syncguard.Fence(fences[i])}
		top = max(top, fences[i])
	}
	if ctx.Err() != nil {
		// The commit may be on the primary only: not reported as done.
		go l.releaseInBackground(lockID)
		e := l.wrap(ctx, op, ctx.Err())
		e.Key = set
		return syncguard.AcquireResult{}, e
	}
	l.remember(lockID, kf)
	var age time.Duration
	if q != nil && d.acquired.Valid {
		age = time.Duration(max(d.now-d.acquired.Int64, 0)) * time.Millisecond
	}
	return syncguard.AcquireResult{OK: true, LockID: lockID, Fence: syncguard.Fence(top),
		ExpiresAt: time.UnixMilli(d.expires.Int64), HandedOver: age}, nil
}

// unknownOutcome reports whether a statement that failed with e may have
// committed: its context ended, or the connection failed.
func unknownOutcome(ctx context.Context, e *syncguard.Error) bool {
	st := e.SQLState
	return ctx.Err() != nil || (e.Code == syncguard.CodeServiceUnavailable || e.Code == syncguard.CodeNetworkTimeout) &&
		(st == "" || strings.HasPrefix(st, "08") || strings.HasPrefix(st, "57P"))
}

// releaseInBackground releases lockID, of an attempt whose outcome is
// unknown, within the release timeout.
func (l *Locker) releaseInBackground(lockID string) {
	ctx, cancel := context.WithTimeout(context.Background(), l.release)
	defer cancel()
	_, _, _ = l.releaseAs(ctx, lockID, nil)
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
	if e := checkLockID(op, lockID); e != nil {
		return syncguard.ReleaseResult{}, false, e
	}
	if e := ctxErr(ctx, op, l); e != nil {
		e.LockID = lockID
		return syncguard.ReleaseResult{}, false, e
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
	inCommit := l.notifyDB == nil
	var tk, tf sql.NullString
	if leaving != nil {
		tk, tf = sql.NullString{String: leaving.Storage, Valid: true}, sql.NullString{String: leaving.Fence, Valid: true}
	}
	args := []any{lockID, inCommit, leaving != nil, tk, tf}
	dest := []any{&d.fresh, &d.deleted, &d.n, &d.seen, &d.now, &d.woke, &d.wokeChannels, &d.left, &d.granted, &d.notified}
	var err error
	for i := 0; ; i++ {
		err = l.runOp(ctx, opRelease, args, dest...)
		if err != nil && inCommit && ctx.Err() == nil && l.dialect.Inspect(err).SQLState == "54000" {
			args[1], inCommit = false, false // a full notification queue: no wake-ups in the commit
			continue
		}
		if (err == nil && !d.fresh || err != nil && l.rerun(err)) && i < maxReruns && ctx.Err() == nil {
			continue
		}
		break
	}
	if err != nil {
		e := l.wrap(ctx, op, err)
		e.LockID = lockID
		return syncguard.ReleaseResult{}, false, e
	}
	if !d.fresh {
		return syncguard.ReleaseResult{}, false, &syncguard.Error{Op: op, Code: syncguard.CodeServiceUnavailable, LockID: lockID,
			Msg: fmt.Sprintf("the keys kept changing under %d runs of the release; nothing was released", maxReruns)}
	}
	l.forget(lockID)
	if d.woke.Valid && d.woke.String != "" {
		payloads, channels := strings.Split(d.woke.String, ","), strings.Split(d.wokeChannels.String, ",")
		for i, p := range payloads {
			l.waker.Wake(p) // a waiter of this process: at once
			if !inCommit && i < len(channels) {
				_ = l.notify(ctx, channels[i], p)
			}
		}
	}
	if d.deleted > 0 && d.n.Valid && d.deleted == d.n.Int64 {
		return syncguard.ReleaseResult{OK: true}, d.left, nil
	}
	return syncguard.ReleaseResult{Reason: failReason(d.seen, d.now)}, d.left, nil
}

// Extend implements syncguard.Locker: the expiry of every key of the
// holding lockID becomes server now + ttl, in one statement, if every key
// is still held; it never revives an expired holding.
func (l *Locker) Extend(ctx context.Context, lockID string, ttl time.Duration) (syncguard.ExtendResult, error) {
	const op = "extend"
	if e := checkLockID(op, lockID); e != nil {
		return syncguard.ExtendResult{}, e
	}
	if e := ttlMillis(op, ttl); e != nil {
		e.LockID = lockID
		return syncguard.ExtendResult{}, e
	}
	if e := ctxErr(ctx, op, l); e != nil {
		e.LockID = lockID
		return syncguard.ExtendResult{}, e
	}
	var d struct {
		fresh           bool
		extended        int64
		expires, seen   sql.NullInt64
		rows, now, bump int64
	}
	dest := []any{&d.fresh, &d.extended, &d.expires, &d.seen, &d.rows, &d.now, &d.bump}
	var err error
	for i := 0; ; i++ {
		err = l.runOp(ctx, opExtend, []any{lockID, ttl.Milliseconds()}, dest...)
		if (err == nil && !d.fresh || err != nil && l.rerun(err)) && i < maxReruns && ctx.Err() == nil {
			continue
		}
		break
	}
	if err != nil {
		e := l.wrap(ctx, op, err)
		e.LockID = lockID
		return syncguard.ExtendResult{}, e
	}
	if !d.fresh {
		return syncguard.ExtendResult{}, &syncguard.Error{Op: op, Code: syncguard.CodeServiceUnavailable, LockID: lockID,
			Msg: fmt.Sprintf("the keys kept changing under %d runs of the extend; nothing was extended", maxReruns)}
	}
	if ctx.Err() != nil {
		e := l.wrap(ctx, op, ctx.Err())
		e.LockID = lockID
		return syncguard.ExtendResult{}, e
	}
	if d.extended > 0 && d.expires.Valid {
		return syncguard.ExtendResult{OK: true, ExpiresAt: time.UnixMilli(d.expires.Int64)}, nil
	}
	return syncguard.ExtendResult{Reason: failReason(d.seen, d.now)}, nil
}
