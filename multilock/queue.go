package multilock

import (
	"context"
	"time"

	"github.com/syncguard/syncguard-go/internal/kit"
	"github.com/syncguard/syncguard-go/internal/rules"
	"github.com/syncguard/syncguard-go/internal/waiting"
	"github.com/syncguard/syncguard-go/syncguard"
)

// Queue implements syncguard.Queuer: the waiter of one Lock or WithLock
// call for set, whose holding carries identity ("": Config.Identity). Its
// attempts keep one place (the server's clock at its first attempt) in
// one queue for all its keys: a set is taken only when every key is free
// and no waiter placed earlier wants any of them, so waits on overlapping
// sets, whatever order their keys were named in, never deadlock, and
// the first waiter always gets its set once its keys' holders are gone.
// With once, or an invalid set, its attempts are plain ones.
func (l *Locker) Queue(set, identity string, once bool) syncguard.Waiter {
	if identity == "" {
		identity = l.identity
	}
	w := &waiter{l: l, set: set, identity: identity}
	ks, err := parse("lock", set)
	if once || err != nil {
		return w
	}
	w.q = &qstate{first: ks[0], channel: waiting.Channel(l.tables.channelPrefix(), ks[0].Storage)}
	w.q.LockID = rules.GenerateLockID()
	return w
}

// waiter is the syncguard.Waiter of a Locker.
type waiter struct {
	l        *Locker
	set      string
	identity string
	q        *qstate // nil: plain attempts
	pace     kit.Flight
}

// qstate is a queued waiter's place.
type qstate struct {
	waiting.Place
	first   rules.Key // its first key: the channel it listens on, its tombstone
	channel string
}

// Attempt implements syncguard.Waiter: an acquire as the waiter.
func (w *waiter) Attempt(ctx context.Context, ttl time.Duration) (syncguard.AcquireResult, error) {
	res, err := w.pace.Attempt(ctx, w.l.release, func(err error) error { return w.l.wrap(ctx, "acquire", err) },
		func(ctx context.Context) (syncguard.AcquireResult, error) {
			return w.l.acquire(ctx, w.set, ttl, w.identity, w.q)
		})
	if err == nil && res.OK && w.q != nil {
		w.q.Close()
	}
	return res, err
}

// Next implements syncguard.Waiter: the wake-up once queued, a renewal
// at half the queue window, and polling while the waiter's channel is not
// listened on (no release can hand it the set then).
func (w *waiter) Next(retry time.Time) (<-chan struct{}, time.Time) {
	var h waiting.Hint
	if w.q != nil {
		h = w.q.Hint(w.l.window / 2)
	}
	return w.pace.Next(retry, h)
}

// Leave implements syncguard.Waiter: the waiter's lockId is released as a
// waiter leaving, in one statement: its queue rows become a tombstone, a
// set handed to it meanwhile is released, and what that frees goes to
// the next waiters. A Leave that fails, or follows an attempt of unknown
// outcome, leaves the release to the background.
func (w *waiter) Leave(ctx context.Context) error {
	return w.pace.Leave(ctx, w.l.release, func(ctx context.Context, id string) error { _, err := w.l.Release(ctx, id); return err }, w.leave)
}

func (w *waiter) leave(ctx context.Context) error {
	q := w.q
	if q == nil {
		return nil
	}
	return q.Leave(ctx, func(ctx context.Context) (bool, bool, error) {
		first := q.first
		r, left, err := w.l.releaseAs(ctx, q.LockID, &first)
		return r.OK, left, err
	}, func() { go w.l.releaseInBackground(q.LockID) })
}
