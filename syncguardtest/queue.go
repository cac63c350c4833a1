package syncguardtest

import (
	"context"
	"time"

	"github.com/syncguard/syncguard-go/internal/rules"
	"github.com/syncguard/syncguard-go/syncguard"
)

// The queue of waiters of syncguard.Lock and WithLock, as the PostgreSQL
// backend keeps it (docs/design.md, "Waiting"): a waiter queues at its
// first contended attempt and keeps its place; a release hands the key to
// the first live waiter in the same step; a crashed holder's key goes to
// the first live waiter once the lock is no longer live.
//
// The core passes Lock's waiter to a *syncguard.Backend in the attempt's
// context, through unexported means; the fake sees only what that context
// shows through exported API: its deadline (Lock bounds every attempt of
// one wait by the wait's deadline, so it is the same for all of them) and
// syncguard.ContextIdentity (non-empty only in an attempt of Lock given an
// Identity). So:
//
//   - a wait is identified by the view it goes through, the key, the
//     attempt context's deadline and the identity;
//   - an attempt whose context has an identity is certainly Lock's: when
//     contended it waits inside the fake (parks; parkLimit bounds it), and
//     a release hands it the key and returns at once (the wake-up of the
//     real backend);
//   - an attempt with a deadline and no identity may be Lock's: it queues,
//     and only the first live waiter may take the free key, but it learns
//     of it at its next retry.
//
// A waiter is live while it is parked, or for queueWindow after its last
// attempt (the real queue window), until its context's deadline.

// queueWindowMs is how long after its last attempt a waiter that is not
// parked stays live: the PostgreSQL backend's queue window.
const queueWindowMs = 3000

// maxPark bounds one parked attempt.
const maxPark = 2 * time.Second

// parkLimit is how long an attempt with this TTL may park: Lock's lease
// counts from the attempt's start, so a key handed over late in a long
// park would leave the lease too little of its TTL; a quarter of it, but 1 s
// when that leaves at least half (Lock's retry delay is at most 1 s
// without MaxRetries: the retry due during a park of 1 s or more follows
// at once, and the waiter stays parked), and 2 s at most.
func parkLimit(ttl time.Duration) time.Duration {
	return min(max(ttl/4, min(time.Second, ttl/2)), maxPark)
}

// deadWaiterMs: a waiter not seen for this long leaves the queue.
const deadWaiterMs = 60_000

// waitID identifies one wait of Lock across its attempts.
type waitID struct {
	view     *Backend
	key      string // normalized
	deadline int64  // UnixNano of the attempt context's deadline
	identity string // syncguard.ContextIdentity
}

// waiter is one wait in the queue of its key.
type waiter struct {
	id       waitID
	seq      uint64 // its place: the order of first contended attempts
	deadline time.Time
	ttlMs    int64  // of its last attempt: a hand-off's TTL
	ident    string // the holder identity a hand-off stores
	lastMs   int64  // the store's clock at its last attempt
	parked   bool
	wake     chan struct{} // closed to wake it while parked
	granted  *record       // the lock a release handed it
	proc     *process
}

// waitOf returns the wait of an acquire, or false when the attempt is a
// single one: a WithTx view (the real backend never queues there) or a
// context without a deadline (every attempt of Lock has one).
func (b *Backend) waitOf(ctx context.Context, norm string) (waitID, bool) {
	dl, ok := ctx.Deadline()
	if !ok || b.tx != nil {
		return waitID{}, false
	}
	return waitID{view: b, key: norm, deadline: dl.UnixNano(), identity: contextIdentity(ctx)}, true
}

// queue queues w (a new waiter when nil) or renews it after a contended
// attempt, and returns it when the attempt is to park. Caller holds mu.
func (b *Backend) queue(id waitID, w *waiter, ttlMs int64, ident string, now int64) *waiter {
	if w == nil {
		b.seq++
		w = &waiter{id: id, seq: b.seq, deadline: time.Unix(0, id.deadline), proc: b.proc}
		b.waits[id] = w
		b.queues[id.key] = append(b.queues[id.key], w)
	}
	w.ttlMs, w.ident, w.lastMs = ttlMs, ident, now
	if id.identity == "" {
		return nil
	}
	return w
}

// liveWaiter reports whether w may be handed the key, or keep it from
// waiters queued behind it. Caller holds mu.
func liveWaiter(w *waiter, now int64) bool {
	return w.parked || now-w.lastMs < queueWindowMs && time.Now().Before(w.deadline)
}

// ahead reports whether a live waiter of norm is queued before w (before
// anyone, for a waiter not queued yet). Caller holds mu.
func (b *Backend) ahead(norm string, w *waiter, now int64) bool {
	for _, o := range b.queues[norm] {
		if o == w {
			return false
		}
		if liveWaiter(o, now) {
			return true
		}
	}
	return false
}

// head returns the first live waiter of norm, or nil. Caller holds mu.
func (b *Backend) head(norm string, now int64) *waiter {
	for _, w := range b.queues[norm] {
		if liveWaiter(w, now) {
			return w
		}
	}
	return nil
}

// remove takes w out of the queue. Caller holds mu.
func (b *Backend) remove(w *waiter) {
	if b.waits[w.id] == w {
		delete(b.waits, w.id)
	}
	q := b.queues[w.id.key]
	for i, o := range q {
		if o == w {
			q = append(q[:i:i], q[i+1:]...)
			break
		}
	}
	if len(q) == 0 {
		delete(b.queues, w.id.key)
	} else {
		b.queues[w.id.key] = q
	}
}

// prune drops the waiters of norm whose wait is over: past their
// context's deadline, or not seen for a minute. Caller holds mu.
func (b *Backend) prune(norm string) {
	now := b.nowMs()
	for _, w := range append([]*waiter(nil), b.queues[norm]...) {
		if !w.parked && w.granted == nil && (!time.Now().Before(w.deadline) || now-w.lastMs > deadWaiterMs) {
			b.remove(w)
		}
	}
}

// claim returns the lock a release handed w, if it is still live, and
// takes w out of the queue. A waiter that was not parked learns of it
// only now: its lease counts from this attempt, so the lock's expiry is
// moved to now + TTL at least (an extend), never earlier. Caller holds mu.
func (b *Backend) claim(w *waiter, now int64) *record {
	if w == nil || w.granted == nil {
		return nil
	}
	r := w.granted
	w.granted = nil
	if b.locks[r.key] != r || b.live(r, now) == nil {
		return nil
	}
	b.remove(w)
	r.expiresMs = max(r.expiresMs, now+w.ttlMs)
	return r
}

// handOff gives the free key norm to its first live waiter when that
// waiter is parked (it returns with it at once), and wakes it. A first
// waiter that is not parked keeps the key free for itself (only it may
// take it) until its next attempt or its end. Caller holds mu.
func (b *Backend) handOff(norm string, now int64) {
	w := b.head(norm, now)
	if w == nil || !w.parked || w.proc.partitioned {
		b.kick(norm)
		return
	}
	r, err := b.take(norm, w.id.key, w.ttlMs, w.ident, now)
	if err == nil {
		w.granted = r
		b.remove(w)
		b.waits[w.id] = w // until it claims the grant
	}
	b.kick(norm) // w, and an error to report if the fence counter is exhausted
}

// kick wakes the parked waiters of norm to look again. Caller holds mu.
func (b *Backend) kick(norm string) {
	for _, w := range b.queues[norm] {
		wakeUp(w)
	}
	for _, w := range b.waits {
		if w.id.key == norm && w.granted != nil {
			wakeUp(w)
		}
	}
}

// kickAll wakes every parked waiter. Caller holds mu.
func (b *Backend) kickAll() {
	for _, w := range b.waits {
		wakeUp(w)
	}
}

func wakeUp(w *waiter) {
	if w.wake != nil {
		close(w.wake)
		w.wake = nil
	}
}

// park is a contended attempt of Lock that waits inside the fake, as
// Lock waits for a wake-up on the real backend: until a release hands w
// the key, the key is free and w is first, the partition of its process,
// the attempt's context ends (the wait is over: w leaves the queue, and a
// key handed to it meanwhile goes to the next waiter), or a quarter of
// the TTL (2 s at most) has passed (Lock's lease counts from the
// attempt's start).
func (b *Backend) park(ctx context.Context, w *waiter, ttl time.Duration) (syncguard.AcquireResult, error) {
	locked := syncguard.AcquireResult{Reason: syncguard.ReasonLocked}
	limit := time.NewTimer(parkLimit(ttl))
	defer limit.Stop()
	for {
		b.mu.Lock()
		now := b.nowMs()
		if res, err, done := b.settle(w, now); done {
			b.mu.Unlock()
			return res, err
		}
		w.parked = true
		if w.wake == nil {
			w.wake = make(chan struct{})
		}
		wake, at := w.wake, b.nextChange(w, now)
		b.mu.Unlock()

		tick := stoppedTimer()
		if at > 0 {
			tick.Reset(time.UnixMilli(at).Sub(b.Now()))
		}
		again := false
		select {
		case <-wake:
			again = true
		case <-tick.C:
			again = true
		case <-limit.C:
		case <-ctx.Done():
		}
		tick.Stop()
		if again {
			continue
		}
		b.mu.Lock()
		now = b.nowMs()
		if ctx.Err() == nil {
			if res, err, done := b.settle(w, now); done {
				b.mu.Unlock()
				return res, err
			}
			w.parked, w.lastMs = false, now
		} else {
			b.leave(w, now)
		}
		b.mu.Unlock()
		return locked, nil
	}
}

// settle decides a parked attempt now, if it can. Caller holds mu.
func (b *Backend) settle(w *waiter, now int64) (syncguard.AcquireResult, error, bool) {
	if w.proc.partitioned {
		w.parked, w.lastMs = false, now
		return syncguard.AcquireResult{}, partitionErr(Call{Op: OpAcquire, Key: w.id.key}), true
	}
	if r := b.claim(w, now); r != nil {
		w.parked = false
		return acquired(r), nil, true
	}
	if b.live(b.locks[w.id.key], now) == nil && !b.ahead(w.id.key, w, now) {
		w.parked = false
		r, err := b.take(w.id.key, w.id.key, w.ttlMs, w.ident, now)
		if err != nil {
			return syncguard.AcquireResult{}, err, true
		}
		b.remove(w)
		return acquired(r), nil, true
	}
	return syncguard.AcquireResult{}, nil, false
}

// leave takes w out of the queue when its wait ended while it was parked;
// a key handed to it meanwhile goes on to the next waiter. Caller holds mu.
func (b *Backend) leave(w *waiter, now int64) {
	w.parked = false
	if r := w.granted; r != nil {
		w.granted = nil
		if b.locks[r.key] == r {
			delete(b.locks, r.key)
			delete(b.byID, r.lockID)
		}
	}
	b.remove(w)
	if b.live(b.locks[w.id.key], now) == nil {
		b.handOff(w.id.key, now)
	}
}

// nextChange is when, on the store's clock, what w waits for may change
// without anyone waking it: the holder's lock stops being live, or a
// waiter ahead of it that is not parked stops being live. 0: never.
// Caller holds mu.
func (b *Backend) nextChange(w *waiter, now int64) int64 {
	var at int64
	earliest := func(t int64) {
		if t > now && (at == 0 || t < at) {
			at = t
		}
	}
	if r := b.live(b.locks[w.id.key], now); r != nil {
		earliest(r.expiresMs + rules.ToleranceMs)
	}
	for _, o := range b.queues[w.id.key] {
		if o == w {
			break
		}
		if liveWaiter(o, now) && !o.parked {
			earliest(min(o.lastMs+queueWindowMs, now+time.Until(o.deadline).Milliseconds()+1))
		}
	}
	return at
}

func stoppedTimer() *time.Timer {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}

// contextIdentity is a placeholder while the fake moves to syncguard.Queuer.
func contextIdentity(context.Context) string { return "" }
