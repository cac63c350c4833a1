package rwlock

import (
	"context"
	"sync"
	"time"

	"github.com/syncguard/syncguard-go/internal/kit"
	"github.com/syncguard/syncguard-go/internal/rules"
	"github.com/syncguard/syncguard-go/internal/waiting"
	"github.com/syncguard/syncguard-go/syncguard"
)

// Waiting, as the mutex waits (docs/design.md, "Waiting for a contended
// key"): a waiter's attempts keep one lockId and one place in the key's
// queue; a release (or an attempt that finds the key freed by an expiry)
// hands the key on in its own commit and notifies the waiters it granted
// on the key's channel. The notification is a hint: the waiter's next
// attempt finds its lease. A waiter listens on its key's channel from its
// first attempt; when no notification can reach it (no listener, a
// transaction-mode pooler) it is queued as not notified, is never granted
// and polls, and still nobody behind a waiting writer passes it.

// channel is the notification channel of a storage key of table's
// read-write locks.
func channel(table, storage string) string { return waiting.Channel(channelPrefix(table), storage) }

func (rw *RWLock) newWaker() *waiting.Waker {
	db := rw.db
	if rw.notifyDB != nil {
		db = rw.notifyDB
	}
	return waiting.NewFor(waiting.Wiring{DB: rw.db, NotifyDB: rw.notifyDB, Dialect: rw.dialect, Logger: rw.logger, What: "syncguard rwlock",
		Notify: func(ctx context.Context, channel, payload string) error {
			_, err := db.ExecContext(ctx, waiting.NotifySQL, channel, payload)
			return err
		}})
}

// Queue implements syncguard.Queuer: the waiter of one Lock or WithLock
// call. With once, or for an invalid key, its attempts are plain ones.
func (l *Locker) Queue(key, identity string, once bool) syncguard.Waiter {
	if identity == "" {
		identity = l.rw.identity
	}
	w := &waiter{l: l, key: key, identity: identity}
	if !once {
		if _, err := rules.DeriveKey(key); err == nil {
			w.LockID = rules.GenerateLockID()
			w.queued = true
		}
	}
	return w
}

// waiter is one wait's syncguard.Waiter.
type waiter struct {
	waiting.Place
	l        *Locker
	key      string
	identity string
	queued   bool // false: plain attempts
	pace     kit.Flight

	mu      sync.Mutex
	storage string // its key's, from its first queued attempt on
}

// join registers the waiter's wake-up before a queued attempt (it
// listens at once) and reports whether a notification reaches it now.
func (w *waiter) join(storage string) bool {
	w.mu.Lock()
	if w.storage == "" {
		w.storage = storage
	}
	w.mu.Unlock()
	notified := w.Join(w.l.rw.waker, channel(w.l.rw.table, storage))
	w.Listen()
	return notified
}

// Attempt implements syncguard.Waiter.
func (w *waiter) Attempt(ctx context.Context, ttl time.Duration) (syncguard.AcquireResult, error) {
	q := w
	if !w.queued {
		q = nil
	}
	res, err := w.pace.Attempt(ctx, w.l.rw.relTO, func(err error) error { return w.l.rw.wrap(ctx, "acquire", err) },
		func(ctx context.Context) (syncguard.AcquireResult, error) {
			return w.l.acquire(ctx, w.key, ttl, w.identity, q)
		})
	if err == nil && res.OK && w.queued {
		w.Close()
	}
	return res, err
}

// Next implements syncguard.Waiter: the wake-up, a renewal at half the
// queue window, and polling while no notification reaches the waiter.
func (w *waiter) Next(retry time.Time) (<-chan struct{}, time.Time) {
	return w.pace.Next(retry, w.Hint(w.l.rw.window/2))
}

// Leave implements syncguard.Waiter: a release of the waiter's lockId,
// which makes its queue row a tombstone and passes on a lease granted to
// it meanwhile (and whatever its leaving frees: readers queued behind a
// writer that leaves). A Leave that fails leaves the release to the
// background.
func (w *waiter) Leave(ctx context.Context) error {
	return w.pace.Leave(ctx, w.l.rw.relTO, func(ctx context.Context, id string) error { _, err := w.l.Release(ctx, id); return err }, w.leave)
}

func (w *waiter) leave(ctx context.Context) error {
	w.mu.Lock()
	storage := w.storage
	w.mu.Unlock()
	return w.Place.Leave(ctx, func(ctx context.Context) (bool, bool, error) {
		r, err := w.l.rw.release(ctx, w.LockID, storage)
		return r.OK, true, err
	}, func() { w.l.rw.releaseInBackground(w.LockID, storage) })
}
