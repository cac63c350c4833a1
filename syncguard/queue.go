package syncguard

import (
	"context"
	"time"

	"github.com/syncguard/syncguard-go/internal/rules"
	"github.com/syncguard/syncguard-go/internal/waiting"
)

// Queue is for Lock and WithLock: it returns the waiter of one call for
// key, held by identity ("": Config.Identity). On the pool, the waiter's
// attempts run under one lockId and keep its place in the key's queue.
// Inside WithTx, with once, or when the key is invalid, its attempts are
// plain ones. A wrapper of a Backend keeps the queue by forwarding it.
func (b *Backend) Queue(key, identity string, once bool) waiter {
	if identity == "" {
		identity = b.shared.cfg.Identity
	}
	w := &queueWaiter{b: b, key: key, identity: identity}
	k, err := checkKey("lock", key)
	if b.tx != nil || once || err != nil {
		return w
	}
	w.q = &queueState{s: b.shared, storage: k.Storage, channel: waiting.Channel(waiting.Prefix(b.shared.cfg.TableName), k.Storage)}
	w.q.LockID = rules.GenerateLockID()
	return w
}

// queueWaiter is the waiter of a Backend.
type queueWaiter struct {
	b        *Backend
	key      string
	identity string
	q        *queueState // nil: plain attempts
	pace     waiting.Pace
	later    <-chan attemptOutcome // the outcome of an attempt the wait's end left running
}

// Attempt implements waiter: an acquire as the waiter. On the pool it is
// detached from ctx's end (waiting.Detach): an attempt still running when
// the wait ends finishes in the background, and Leave undoes it.
func (w *queueWaiter) Attempt(ctx context.Context, ttl time.Duration) (AcquireResult, error) {
	if w.q != nil {
		if res, ok := w.q.granted(ttl.Milliseconds()); ok {
			w.q.Close()
			return res, nil // a release handed it the key, and said so in its notification
		}
	}
	sent := time.Now()
	var o attemptOutcome
	if w.b.tx != nil || ctx.Err() != nil {
		o.res, o.err = w.b.acquire(ctx, w.key, ttl, w.identity, w.q)
	} else {
		var later <-chan attemptOutcome
		var ok bool
		o, later, ok = waiting.Detach(ctx, w.b.releaseTimeout(), func(actx context.Context) attemptOutcome {
			res, err := w.b.acquire(actx, w.key, ttl, w.identity, w.q)
			return attemptOutcome{res, err}
		})
		if !ok {
			w.later = later
			e := ctxErr(ctx, "acquire")
			e.Key = w.key
			return AcquireResult{}, e
		}
	}
	w.pace.Attempted(sent, o.err == nil, o.err == nil && o.res.OK, o.res.RetryIn)
	if o.err == nil && o.res.OK && w.q != nil {
		w.q.Close()
	}
	return o.res, o.err
}

type attemptOutcome struct {
	res AcquireResult
	err error
}

// Next implements waiter: woken once queued; its next attempt by its
// place (queueState.next); polling while it is within listenRank of the
// head and its key's channel is not listened on; without the caller's
// retries when further back.
func (w *queueWaiter) Next(retry time.Time) (<-chan struct{}, time.Time) {
	return w.pace.Next(retry, w.hint())
}

func (w *queueWaiter) hint() waiting.Hint {
	if w.q == nil {
		return waiting.Hint{}
	}
	h := w.q.Hint(w.q.next())
	w.q.mu.Lock()
	defer w.q.mu.Unlock()
	h.FarBack = h.Wake != nil && w.q.rank > listenRank
	h.Poll = h.Poll && !h.FarBack
	return h
}

// TracePlace reports, for traces (the benchmark's -trace), the waiter's
// rank and the holder's fence as its last attempt saw them (0: none or not
// queued), and whether its key's channel is listened on now (a release's
// grant reaches it).
func (w *queueWaiter) TracePlace() (rank, fence int64, listened bool) {
	if w.q == nil {
		return 0, 0, false
	}
	h := w.q.Hint(0) // joined: a wake-up; Poll: its channel is not listened on
	w.q.mu.Lock()
	defer w.q.mu.Unlock()
	return w.q.rank, w.q.fence, h.Wake != nil && !h.Poll
}

// Leave releases the waiter's lockId: that deletes its queue row and
// passes on a key handed to it meanwhile. When it found neither, a
// hand-off may have been committing: its snapshot missed the lock row,
// and the queue row was gone when its delete got to it. A second
// statement sees that commit. A Leave that fails, or that follows an
// attempt of unknown outcome, leaves the release to the background.
// An attempt the wait's end left running cannot queue the waiter again
// (its row is a tombstone now) nor take the key after this; a lock it took
// before is released by this Leave or, when it answers, in the
// background.
func (w *queueWaiter) Leave(ctx context.Context) error {
	err := w.leave(ctx)
	if later := w.later; later != nil {
		w.later = nil
		go func() {
			if o := <-later; o.err == nil && o.res.OK {
				ctx, cancel := context.WithTimeout(context.Background(), w.b.releaseTimeout())
				defer cancel()
				_, _, _ = (&Backend{shared: w.b.shared}).release(ctx, o.res.LockID, "")
			}
		}()
	}
	return err
}

func (w *queueWaiter) leave(ctx context.Context) error {
	q := w.q
	if q == nil {
		return nil
	}
	return q.Leave(ctx, func(ctx context.Context) (bool, bool, error) {
		r, left, err := (&Backend{shared: q.s}).release(ctx, q.LockID, q.storage)
		return r.OK, left, err
	}, func() { q.s.releaseInBackground(q.LockID, time.Duration(q.ttl.Load())*time.Millisecond) })
}

// leave takes a wait's waiter that gave up out of its queue (bounded by
// the release timeout). The wait returns once it has left, but not after
// an outage (it leaves in the background), nor more than a tenth of the
// release timeout after an attempt the wait's end left unanswered (a
// half-open connection must not hold Lock past its Timeout). A waiter
// that cannot leave now cleans up after itself.
func leave(ctx context.Context, w waiter, timeout time.Duration, outage, unanswered bool) {
	left := make(chan struct{})
	go func() {
		defer close(left)
		lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
		defer cancel()
		_ = w.Leave(lctx)
	}()
	switch {
	case outage:
	case unanswered:
		select {
		case <-left:
		case <-time.After(timeout / 10):
		}
	default:
		<-left
	}
}

// waiterFor is the waiter of one wait for key on b: its queue's (a
// queuer's), else one that polls.
func waiterFor(b Locker, key string, c *lockConfig) waiter {
	if q, ok := b.(queuer); ok {
		if w := q.Queue(key, c.Identity, c.maxRetries == 0); w != nil {
			return w
		}
	}
	return &pollWaiter{b: b, key: key}
}

// pollWaiter is the waiter of a Locker without a queue: it attempts on
// the retry schedule and when the holder's lock, as its last attempt saw
// it, is no longer live.
type pollWaiter struct {
	b    Locker
	key  string
	pace waiting.Pace
}

// Attempt implements waiter: an Acquire.
func (w *pollWaiter) Attempt(ctx context.Context, ttl time.Duration) (AcquireResult, error) {
	return paced(&w.pace, func() (AcquireResult, error) { return w.b.Acquire(ctx, w.key, ttl) })
}

// Next implements waiter: the retry schedule and the holder's expiry.
func (w *pollWaiter) Next(retry time.Time) (<-chan struct{}, time.Time) {
	return w.pace.Next(retry, waiting.Hint{})
}

// Leave implements waiter: a polling waiter has no place to leave.
func (w *pollWaiter) Leave(context.Context) error { return nil }

// paced runs an attempt and tells p its outcome.
func paced(p *waiting.Pace, attempt func() (AcquireResult, error)) (AcquireResult, error) {
	sent := time.Now()
	res, err := attempt()
	p.Attempted(sent, err == nil, err == nil && res.OK, res.RetryIn)
	return res, err
}
