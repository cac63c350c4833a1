package kit

import (
	"context"
	"sync"
	"time"

	"github.com/syncguard/syncguard-go/internal/rules"
	"github.com/syncguard/syncguard-go/internal/waiting"
	"github.com/syncguard/syncguard-go/syncguard"
)

// Ops are what a kind's waiters run.
type Ops struct {
	// Acquire is one attempt on key for identity: a plain one (q nil) or
	// as the queued waiter q, under its lockId and keeping its place.
	Acquire func(ctx context.Context, key string, ttl time.Duration, identity string, q *Waiter) (syncguard.AcquireResult, error)
	Release func(ctx context.Context, lockID string) (syncguard.ReleaseResult, error)
	// Leave releases q's lockId as a waiter leaving, which makes its queue
	// rows a tombstone (an attempt still in flight can neither queue it
	// again nor take the key) and passes on what was handed to it
	// meanwhile: whether it released a lease, and whether q's row was
	// there (waiting.Place.Leave).
	Leave func(ctx context.Context, q *Waiter) (ok, left bool, err error)
}

// Waiter is a kind's Wait, the waiter of one Lock or WithLock
// call: its attempts run under one lockId and keep one place in the
// queue when Queued (else they are plain ones), paced as every waiter is
// (Flight). Its Leave takes a queued waiter out (Ops.Leave), in the
// background when that fails or an attempt's outcome was unknown.
type Waiter struct {
	waiting.Place
	Queued   bool
	Key      string    // the key (a set) as the caller gave it
	First    rules.Key // its (first) key: the queue row that Leave makes a tombstone
	Channel  string    // the notification channel it listens on
	Identity string    // the holder's identity
	// Near, if not 0, paces the waiter by its rank (Contended): within
	// Near of the head it listens and renews its row every half window;
	// further back it attempts as it nears Near, at the pace the queue
	// moved since it joined (doubling while it has not moved), and polls
	// only when near, as syncguard's Backend spaces its waiters.
	Near int64

	b    *Base
	ops  *Ops
	pace Flight

	mu             sync.Mutex
	rank, rank0    int64     // the last attempt's rank, the first's
	rankAt, joined time.Time // when they were seen
}

// NewWaiter returns a waiter on key (first: its storage key, or a set's
// first) for identity ("": Config.Identity), queued with a lockId of its
// own or making plain attempts, listening on channel.
func (b *Base) NewWaiter(key string, first rules.Key, channel, identity string, queued bool, ops *Ops) *Waiter {
	if identity == "" {
		identity = b.Identity
	}
	w := &Waiter{Queued: queued, Key: key, First: first, Channel: channel, Identity: identity, b: b, ops: ops}
	if queued {
		w.LockID = rules.GenerateLockID()
	}
	return w
}

// Attempt implements Wait: one attempt, detached from ctx's
// end (Flight.Attempt).
func (w *Waiter) Attempt(ctx context.Context, ttl time.Duration) (syncguard.AcquireResult, error) {
	q := w
	if !w.Queued {
		q = nil
	}
	res, err := w.pace.Attempt(ctx, w.b.ReleaseTimeout, func(err error) error { return w.b.WrapKey(ctx, "acquire", w.Key, "", err) },
		func(ctx context.Context) (syncguard.AcquireResult, error) {
			return w.ops.Acquire(ctx, w.Key, ttl, w.Identity, q)
		})
	if err == nil && res.OK && w.Queued {
		w.Close()
	}
	return res, err
}

// Next implements Wait: the wake-up once queued, a renewal
// (half the window, or by rank: Near), and polling while no notification
// reaches the waiter.
func (w *Waiter) Next(retry time.Time) (<-chan struct{}, time.Time) {
	var h waiting.Hint
	if w.Queued && w.Near == 0 {
		h = w.Hint(w.b.Window / 2)
	} else if w.Queued {
		w.mu.Lock()
		renew, near := w.next(), w.rank <= w.Near
		w.mu.Unlock()
		h = w.Hint(renew)
		h.Poll = h.Poll && near
	}
	return w.pace.Next(retry, h)
}

// Contended records a failed queued attempt's rank and, within Near of
// the head, asks for the waiter's channel.
func (w *Waiter) Contended(rank int64) {
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.joined.IsZero() {
		w.rank0, w.joined = rank, now
	}
	w.rank, w.rankAt = rank, now
	if rank <= w.Near {
		w.Listen()
	}
}

// next is when the waiter attempts again without a cue (Near).
func (w *Waiter) next() time.Duration {
	renew := w.b.Window / 2
	if w.rank <= w.Near {
		return renew
	}
	waited := w.rankAt.Sub(w.joined)
	if moved := w.rank0 - w.rank; moved > 0 {
		waited = waited * time.Duration(w.rank-w.Near) / time.Duration(2*moved)
	}
	return min(max(waited, approachMin), renew)
}

const approachMin = 10 * time.Millisecond

// Leave implements Wait: the queued waiter leaves its queue
// (Ops.Leave, waiting.Place.Leave), and a lease that an attempt still
// running reports is released when it answers (Flight.Leave).
func (w *Waiter) Leave(ctx context.Context) error {
	release := func(ctx context.Context, id string) error { _, err := w.ops.Release(ctx, id); return err }
	return w.pace.Leave(ctx, w.b.ReleaseTimeout, release, func(ctx context.Context) error {
		if !w.Queued {
			return nil
		}
		out := func(ctx context.Context) (bool, bool, error) { return w.ops.Leave(ctx, w) }
		return w.Place.Leave(ctx, out, func() {
			w.b.Background(func(ctx context.Context) error { _, _, err := out(ctx); return err })
		})
	})
}

// Unsure takes care of an acquire of lockID that may have committed
// unanswered: the waiter q's Leave releases it (waiting.Place.Unknown); a
// plain attempt's (q nil) is released in the background (Ops.Release).
func (b *Base) Unsure(ops *Ops, q *Waiter, lockID string) {
	if q != nil {
		q.Unknown.Store(true)
		return
	}
	b.Background(func(ctx context.Context) error { _, err := ops.Release(ctx, lockID); return err })
}
