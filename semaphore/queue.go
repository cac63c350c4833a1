package semaphore

import (
	"context"
	"sync"
	"time"

	"github.com/syncguard/syncguard-go/internal/kit"
	"github.com/syncguard/syncguard-go/internal/rules"
	"github.com/syncguard/syncguard-go/internal/waiting"
	"github.com/syncguard/syncguard-go/syncguard"
)

// listenRank: a waiter within this many places of the head listens on
// its key's channel (as syncguard's Backend does).
const listenRank = 3

// Queue implements syncguard.Queuer: the waiter of one Lock or WithLock
// call for a permit of key. Its attempts run under one lockId and keep
// its place in the key's queue of waiters; a release hands its slot to
// the first waiter in its own commit. With once, or for an invalid key,
// the attempts are plain ones (no place in the queue).
func (s *Semaphore) Queue(key, identity string, once bool) syncguard.Waiter {
	if identity == "" {
		identity = s.identity
	}
	w := &waiter{s: s, key: key, identity: identity}
	k, err := rules.DeriveKey(key)
	if once || err != nil {
		w.plain = true
		return w
	}
	w.storage, w.LockID = k.Storage, rules.GenerateLockID()
	w.channel = waiting.Channel(s.prefix, k.Storage)
	return w
}

// waiter is a Semaphore's syncguard.Waiter.
type waiter struct {
	waiting.Place
	s             *Semaphore
	key, identity string
	plain         bool
	storage       string
	channel       string

	mu             sync.Mutex
	rank, rank0    int64     // the last attempt's rank, the first's
	rankAt, joined time.Time // when they were seen
	pace           kit.Flight
}

// Attempt implements syncguard.Waiter: an acquire as the waiter.
func (w *waiter) Attempt(ctx context.Context, ttl time.Duration) (syncguard.AcquireResult, error) {
	q := w
	if w.plain {
		q = nil
	}
	res, err := w.pace.Attempt(ctx, w.s.relTO, func(err error) error { return w.s.wrap(ctx, "acquire", w.key, err) },
		func(ctx context.Context) (syncguard.AcquireResult, error) {
			return w.s.acquire(ctx, w.key, ttl, w.identity, q)
		})
	if err == nil && res.OK && !w.plain {
		w.Close()
	}
	return res, err
}

// join registers the waiter's wake-up before a queued attempt and reports
// whether a notification reaches it now.
func (w *waiter) join(int64) bool {
	return w.Join(w.s.waker, w.channel)
}

// contended records a failed queued attempt's rank and, near the head,
// asks for the key's channel.
func (w *waiter) contended(rank int64) {
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.joined.IsZero() {
		w.rank0, w.joined = rank, now
	}
	w.rank, w.rankAt = rank, now
	if rank <= w.near() {
		w.Listen()
	}
}

// near is the rank within which a waiter listens: a release hands it a
// permit soon (listenRank beyond the permits).
func (w *waiter) near() int64 { return int64(w.s.permits) + listenRank }

// next is when the waiter attempts again without a cue: to renew its row
// (half its window), or, further back than near, as it nears it at the
// pace the queue moved since it joined (doubling while it has not moved),
// as syncguard's Backend spaces its waiters.
func (w *waiter) next() time.Duration {
	renew := w.s.window / 2
	if w.rank <= w.near() {
		return renew
	}
	waited := w.rankAt.Sub(w.joined)
	if moved := w.rank0 - w.rank; moved > 0 {
		waited = waited * time.Duration(w.rank-w.near()) / time.Duration(2*moved)
	}
	return min(max(waited, approachMin), renew)
}

const approachMin = 10 * time.Millisecond

// Next implements syncguard.Waiter: woken by a hand-off's notification;
// renewing its row every half window; polling while near the head and no
// notification reaches it (a pooler in transaction mode).
func (w *waiter) Next(retry time.Time) (<-chan struct{}, time.Time) {
	var h waiting.Hint
	if !w.plain {
		w.mu.Lock()
		renew, near := w.next(), w.rank <= w.near()
		w.mu.Unlock()
		h = w.Hint(renew)
		h.Poll = h.Poll && near
	}
	return w.pace.Next(retry, h)
}

// Leave implements syncguard.Waiter: it takes the waiter out of the
// queue (a tombstone that an attempt still in flight cannot undo) and
// releases a slot handed to it meanwhile, which goes to the next waiter.
// When that finds neither, a hand-off may have been committing: a second
// statement sees it. A Leave that fails, or follows an attempt of unknown
// outcome, leaves the release to the background.
func (w *waiter) Leave(ctx context.Context) error {
	return w.pace.Leave(ctx, w.s.relTO, func(ctx context.Context, id string) error { _, err := w.s.Release(ctx, id); return err }, w.leave)
}

func (w *waiter) leave(ctx context.Context) error {
	if w.plain {
		return nil
	}
	return w.Place.Leave(ctx, func(ctx context.Context) (bool, bool, error) {
		r, left, err := w.s.release(ctx, w.LockID, w.storage)
		return r.OK, left, err
	}, func() { w.s.releaseInBackground(w.LockID) })
}

// newWaker wires the semaphore's LISTEN connection as syncguard's
// Backend does: on Config.NotifyDB when set, through the dialect's
// driver.Listener.
func (s *Semaphore) newWaker() *waiting.Waker {
	return waiting.NewFor(waiting.Wiring{DB: s.db, NotifyDB: s.notifyDB, Dialect: s.dialect, Notify: s.notify,
		Logger: s.logger, What: "syncguard semaphore"})
}

// notify sends a notification through NotifyDB when it is set, else the
// pool.
func (s *Semaphore) notify(ctx context.Context, channel, payload string) error {
	db := s.db
	if s.notifyDB != nil {
		db = s.notifyDB
	}
	_, err := db.ExecContext(ctx, waiting.NotifySQL, channel, payload)
	return err
}

// notifyAfter sends a hand-off's wake-up after its commit (NotifyDB):
// best effort, the waiter's next attempt finds its slot anyway.
func (s *Semaphore) notifyAfter(channel, payload string) {
	ctx, cancel := context.WithTimeout(context.Background(), s.relTO)
	defer cancel()
	_ = s.notify(ctx, channel, payload)
}

// NotificationStatus reports whether waiting on s is woken by
// notifications (true) or polls, and why, as
// syncguard.Backend.NotificationStatus does.
func (s *Semaphore) NotificationStatus(ctx context.Context) syncguard.NotificationStatus {
	st := s.waker.Status(ctx)
	return syncguard.NotificationStatus{Active: st.Active, Reason: st.Reason}
}
