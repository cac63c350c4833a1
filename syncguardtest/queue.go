package syncguardtest

import (
	"context"
	"time"

	"github.com/syncguard/syncguard-go/internal/kit"
	"github.com/syncguard/syncguard-go/internal/rules"
	"github.com/syncguard/syncguard-go/internal/waiting"
	"github.com/syncguard/syncguard-go/syncguard"
)

// The queue of waiters of syncguard.Lock and WithLock, as the PostgreSQL
// backend keeps it (docs/design.md, "Waiting"), behind Queue:
//
//   - Lock asks Queue for one waiter per wait and makes every attempt
//     through it; a waiter takes its place in the key's queue at its first
//     contended attempt and keeps it for the whole wait;
//   - an attempt takes a free key only when no live waiter is queued before
//     it (a plain Acquire, before anyone): a free key with live waiters
//     goes to the first of them;
//   - a release, and any step that finds the key no longer live (an
//     attempt, Expire, Delete, Advance, Heal), hands the key to the first
//     live waiter in that same step: a lock with the waiter's last TTL and
//     identity and the key's next fence, and a value on the waiter's wake
//     channel; its next attempt returns that lock, with HandedOver;
//   - a waiter is live while it attempts: not after queueWindow without an
//     attempt that reached the store (measured on time.Now, the waiters'
//     own clock, so that Advance does not age them), and gone after a
//     minute; a waiter of a partitioned process is not handed the key (no
//     notification would reach it), which stays free for it, and nobody
//     behind may take it, until its place lapses;
//   - Leave takes the waiter out of the queue and passes on a key handed
//     to it meanwhile.
//
// The fake keeps strict arrival order: every waiter attends. On
// PostgreSQL a waiter far back whose approach comes late is passed until
// it attempts again (it keeps its place, not its turn); a test that holds
// on the fake's order holds there for waiters within 3 of the head.

// queueWindow is how long after its last attempt a waiter stays live: the
// PostgreSQL backend's queue window. Its waiters renew after two thirds of it.
const queueWindow = 15 * time.Second

// deadWaiter: a waiter not seen for this long leaves the queue.
const deadWaiter = time.Minute

var _ kit.Queuer = (*Backend)(nil)

// waiter is the kit.Wait of one wait.
type waiter struct {
	b        *Backend // the view it was made on: its process and identity
	key      string   // as passed to Queue
	identity string
	plain    bool          // once, or a WithTx view: single attempts, no place
	wake     chan struct{} // a value when a step hands it the key
	pace     kit.Pace

	// Under mu.
	norm  string    // the normalized key, from its first valid attempt
	seq   uint64    // its place in the queue; 0: not queued
	ttlMs int64     // of its last attempt: a hand-off's TTL
	seen  time.Time // time.Now at its last attempt that reached the store
	lock  *record   // the lock taken as this waiter: handed to it, or taken by an attempt whose answer may have been lost
}

// Queue implements kit.Queuer: the waiter of one wait of Lock or
// WithLock for key, whose locks carry identity ("": the view's, as set by
// WithIdentity). With once, or on a WithTx view, its attempts are plain
// single ones (with identity) and it takes no place in the queue. It does
// nothing until its first attempt, which reports an invalid key.
func (b *Backend) Queue(key, identity string, once bool) kit.Wait {
	if identity == "" {
		identity = b.identity
	}
	return &waiter{b: b, key: key, identity: identity, plain: once || b.tx != nil, wake: make(chan struct{}, 1)}
}

// Attempt implements kit.Wait: one acquire as the waiter. It
// returns the lock a step handed the waiter (HandedOver: how long that lock
// existed), takes a free key when no live waiter is queued before it, or
// else queues the waiter (or renews its place) and reports "locked" with
// RetryIn: until the holder's lock is no longer live, or until the place
// of a waiter before it lapses when the key is free but kept for that one.
func (w *waiter) Attempt(ctx context.Context, ttl time.Duration) (syncguard.AcquireResult, error) {
	q := w
	if w.plain {
		q = nil
	}
	return w.pace.Attempt(func() (syncguard.AcquireResult, error) { return w.b.acquire(ctx, w.key, ttl, w.identity, q) })
}

// Next implements kit.Wait: the wake channel and a renewal at
// half the queue window; never poll (every waiter is reachable). A plain
// waiter has none: Lock waits for its retries and the holder's expiry.
func (w *waiter) Next(retry time.Time) (<-chan struct{}, time.Time) {
	return fakeNext(&w.pace, retry, w.plain, w.wake, queueWindow*2/3)
}

// fakeNext is the Next of the fakes' waiters: woken by hand-offs and
// renewing after renew; a plain one (no place) waits for the retries and
// the holder's expiry.
func fakeNext(p *kit.Pace, retry time.Time, plain bool, wake <-chan struct{}, renew time.Duration) (<-chan struct{}, time.Time) {
	if plain {
		return p.Next(retry, waiting.Hint{})
	}
	return p.Next(retry, waiting.Hint{Wake: wake, Renew: renew})
}

// Leave implements kit.Wait: the waiter leaves the queue, a lock
// taken as it (handed to it, or taken by an attempt whose answer was lost)
// is released, and a free key goes to the next live waiter. It is no Call
// (no hook, failure, latency or count), but a partitioned process cannot
// leave: it gets ServiceUnavailable, and its place lapses after the queue
// window, its lock at its TTL.
func (w *waiter) Leave(context.Context) error {
	if w.plain {
		return nil
	}
	b := w.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.proc.partitioned {
		return partitionErr(Call{Op: OpRelease, Key: w.key, Tx: b.tx})
	}
	if w.norm == "" {
		return nil // no attempt reached the store
	}
	now := b.nowMs()
	b.dequeue(w)
	if r := w.lock; r != nil {
		w.lock = nil
		if b.locks[r.key] == r && b.live(r, now) != nil {
			delete(b.locks, r.key)
			delete(b.byID, r.lockID)
		}
	}
	b.handOff(w.norm, now, nil)
	return nil
}

// attempt is one acquire of norm (key as passed) for ttlMs, as waiter w
// (nil: a plain one). Caller holds mu.
func (b *Backend) attempt(norm, key string, ttlMs int64, ident string, w *waiter, now int64) (syncguard.AcquireResult, error) {
	if w != nil {
		w.norm, w.ttlMs, w.seen = norm, ttlMs, time.Now()
		if r := w.lock; r != nil {
			if b.locks[norm] == r && b.live(r, now) != nil {
				res := acquired(r)
				res.HandedOver = time.Duration(now-r.acquired) * time.Millisecond
				return res, nil
			}
			w.lock = nil // lost meanwhile (Delete, Expire): it waits again
		}
	}
	if n := b.contend[norm]; n > 0 {
		b.contend[norm] = n - 1
		return syncguard.AcquireResult{Reason: syncguard.ReasonLocked}, nil
	}
	b.prune(norm)
	b.handOff(norm, now, w) // not to w itself: it takes the key below
	if b.live(b.locks[norm], now) == nil && !b.ahead(norm, w) {
		r, err := b.take(norm, key, ttlMs, ident, now)
		if err != nil {
			return syncguard.AcquireResult{}, err
		}
		if w != nil {
			b.dequeue(w)
			w.lock = r
		}
		return acquired(r), nil
	}
	if w != nil && w.seq == 0 {
		b.seq++
		w.seq = b.seq
		b.queues[norm] = append(b.queues[norm], w)
	}
	return syncguard.AcquireResult{Reason: syncguard.ReasonLocked, RetryIn: b.retryIn(norm, w, now)}, nil
}

// handOff gives the key norm, if it is not held by a live lock, to its
// first live waiter (other than except), and wakes that waiter: the lock
// carries the waiter's last TTL and identity and the key's next fence. A
// first waiter whose process is partitioned is not handed the key: it
// stays free for it (ahead) until its place lapses. Caller holds mu.
func (b *Backend) handOff(norm string, now int64, except *waiter) {
	if b.live(b.locks[norm], now) != nil {
		return
	}
	h := b.head(norm)
	if h == nil || h == except || h.b.proc.partitioned {
		return
	}
	r, err := b.take(norm, h.key, h.ttlMs, h.identity, now)
	if err == nil {
		b.dequeue(h)
		h.lock = r
	}
	// On an error (the fence counter exhausted) the waiter attempts and
	// gets it itself.
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

// handOffAll runs handOff for every key with waiters. Caller holds mu.
func (b *Backend) handOffAll() {
	now := b.nowMs()
	for norm := range b.queues {
		b.handOff(norm, now, nil)
	}
}

// liveWaiter reports whether w may be handed the key, or keep it from
// waiters queued behind it. Caller holds mu.
func liveWaiter(w *waiter) bool { return time.Since(w.seen) < queueWindow }

// ahead reports whether a live waiter of norm is queued before w (before
// anyone, for a waiter not queued and a plain attempt). Caller holds mu.
func (b *Backend) ahead(norm string, w *waiter) bool {
	for _, o := range b.queues[norm] {
		if o == w {
			return false
		}
		if liveWaiter(o) {
			return true
		}
	}
	return false
}

// head returns the first live waiter of norm, or nil. Caller holds mu.
func (b *Backend) head(norm string) *waiter {
	for _, w := range b.queues[norm] {
		if liveWaiter(w) {
			return w
		}
	}
	return nil
}

// retryIn is the RetryIn of w's contended attempt at now: until the
// holder's lock is no longer live, or, for a free key kept for a live
// waiter before w, until the first such place lapses. Caller holds mu.
func (b *Backend) retryIn(norm string, w *waiter, now int64) time.Duration {
	if r := b.live(b.locks[norm], now); r != nil {
		// From the clock's exact reading: Lock's attempts need not come on
		// the millisecond.
		return max(time.UnixMilli(r.expiresMs+rules.ToleranceMs).Sub(b.now()), time.Microsecond)
	}
	var d time.Duration
	for _, o := range b.queues[norm] {
		if o == w {
			break
		}
		if liveWaiter(o) {
			if lapse := time.Until(o.seen.Add(queueWindow)); d == 0 || lapse < d {
				d = lapse
			}
		}
	}
	return d
}

// dequeue takes w out of its key's queue, if it is in it. Caller holds mu.
func (b *Backend) dequeue(w *waiter) {
	if w.seq == 0 {
		return
	}
	w.seq = 0
	q := b.queues[w.norm]
	for i, o := range q {
		if o == w {
			q = append(q[:i:i], q[i+1:]...)
			break
		}
	}
	if len(q) == 0 {
		delete(b.queues, w.norm)
	} else {
		b.queues[w.norm] = q
	}
}

// prune drops the waiters of norm not seen for deadWaiter. Caller holds
// mu.
func (b *Backend) prune(norm string) {
	for _, w := range append([]*waiter(nil), b.queues[norm]...) {
		if time.Since(w.seen) > deadWaiter {
			b.dequeue(w)
		}
	}
}
