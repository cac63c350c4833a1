package syncguardtest

import (
	"context"
	"fmt"
	"github.com/syncguard/syncguard-go/internal/kit"
	"sync"
	"time"

	"github.com/syncguard/syncguard-go/internal/rules"
	"github.com/syncguard/syncguard-go/syncguard"
)

// Semaphore is an in-memory counting semaphore with the rules of package
// semaphore's PostgreSQL one, for unit tests: N permits per key, the
// number fixed by a key's first acquire (another number fails with
// InvalidArgument and takes nothing); each permit holds a slot 1..N whose
// fence counter strictly increases (each slot a fenced mutex); expiry by
// the spec's liveness rule (expiry plus 1 s) on the fake's clock
// (time.Now plus Advance); waiters in strict FIFO order (a later caller
// never takes a permit while an earlier live waiter waits); a release
// hands its slot to the first live waiter in the same step and wakes it.
// It has a queue (Queue), so syncguard.Lock waits on it; it passes
// conformance.RunSemaphore. Safe for concurrent use; Process returns
// another view (a process) of the same store.
type Semaphore struct {
	st       *semStore
	permits  int
	identity string
}

type semStore struct {
	mu     sync.Mutex
	offset time.Duration
	keys   map[string]*semKey   // by normalized key
	byID   map[string]semHolder // lockId -> its slot
}

type semKey struct {
	permits int
	slots   []semSlot // slot i+1
	queue   []*semWaiter
}

type semSlot struct {
	lockID              string
	expiresMs, acquired int64
	fence               int64
	identity            string
}

type semHolder struct {
	key  string
	slot int
}

var _ kit.Queuer = (*Semaphore)(nil)

// NewSemaphore returns an empty in-memory semaphore store and a view of
// it with permits permits per key (at least 1).
func NewSemaphore(permits int) *Semaphore {
	return &Semaphore{st: &semStore{keys: map[string]*semKey{}, byID: map[string]semHolder{}}, permits: max(permits, 1)}
}

// Process returns another view of the same store, as another process
// with permits permits per key would see it.
func (s *Semaphore) Process(permits int) *Semaphore {
	return &Semaphore{st: s.st, permits: max(permits, 1), identity: s.identity}
}

// WithIdentity returns a view whose permits carry identity.
func (s *Semaphore) WithIdentity(identity string) *Semaphore {
	return &Semaphore{st: s.st, permits: s.permits, identity: identity}
}

// Advance moves the store's clock forward by d: permits expire sooner.
func (s *Semaphore) Advance(d time.Duration) {
	s.st.mu.Lock()
	s.st.offset += d
	s.st.mu.Unlock()
}

// Slot returns the slot of the live or expired permit lockID.
func (s *Semaphore) Slot(lockID string) (int, bool) {
	s.st.mu.Lock()
	defer s.st.mu.Unlock()
	h, ok := s.st.byID[lockID]
	return h.slot, ok
}

// Holders returns the live permits of key: their slots and fences.
func (s *Semaphore) Holders(key string) map[int]syncguard.Fence {
	s.st.mu.Lock()
	defer s.st.mu.Unlock()
	out := map[int]syncguard.Fence{}
	k, err := rules.DeriveKey(key)
	if sk := s.st.keys[k.Norm]; err == nil && sk != nil {
		now := s.st.nowMs()
		for i, sl := range sk.slots {
			if sl.lockID != "" && rules.IsLive(sl.expiresMs, now) {
				f, _ := rules.FormatFence(sl.fence)
				out[i+1] = syncguard.Fence(f)
			}
		}
	}
	return out
}

func (st *semStore) nowMs() int64 { return time.Now().Add(st.offset).UnixMilli() }

func semInvalid(op, key, msg string) *syncguard.Error {
	return &syncguard.Error{Op: op, Code: syncguard.ErrInvalidArgument, Key: key, Msg: msg}
}

// Acquire implements syncguard.Locker: one plain attempt.
func (s *Semaphore) Acquire(ctx context.Context, key string, ttl time.Duration) (syncguard.AcquireResult, error) {
	return s.attempt(ctx, key, ttl, s.identity, nil)
}

func (s *Semaphore) attempt(ctx context.Context, key string, ttl time.Duration, ident string, w *semWaiter) (syncguard.AcquireResult, error) {
	const op = "acquire"
	k, err := rules.DeriveKey(key)
	if err != nil {
		return syncguard.AcquireResult{}, semInvalid(op, key, err.Error())
	}
	if ttl.Milliseconds() < 1 {
		return syncguard.AcquireResult{}, semInvalid(op, key, fmt.Sprintf("ttl must be at least 1ms, got %v", ttl))
	}
	if err := ctx.Err(); err != nil {
		return syncguard.AcquireResult{}, &syncguard.Error{Op: op, Code: syncguard.ErrAborted, Key: key, Err: err}
	}
	st := s.st
	st.mu.Lock()
	defer st.mu.Unlock()
	now, ttlMs := st.nowMs(), ttl.Milliseconds()
	sk := st.keys[k.Norm]
	lockID := rules.GenerateLockID()
	if w != nil {
		lockID, w.norm, w.ttlMs, w.ident, w.seen = w.lockID, k.Norm, ttlMs, ident, time.Now()
		if h, ok := st.byID[lockID]; ok && sk != nil {
			if sl := sk.slots[h.slot-1]; sl.lockID == lockID && rules.IsLive(sl.expiresMs, now) {
				res := semResult(sl)
				res.HandedOver = time.Duration(now-sl.acquired) * time.Millisecond
				return res, nil
			}
		}
	}
	if sk == nil {
		sk = &semKey{permits: s.permits, slots: make([]semSlot, s.permits)}
		st.keys[k.Norm] = sk
	}
	if sk.permits != s.permits {
		return syncguard.AcquireResult{}, &syncguard.Error{Op: op, Code: syncguard.ErrInvalidArgument, Key: key,
			Msg: fmt.Sprintf("this key is a semaphore of %d permits, not %d; nothing was taken", sk.permits, s.permits)}
	}
	ahead := 0
	for _, q := range sk.queue {
		if q == w {
			break
		}
		if q.live() && !st.holds(sk, q.lockID, now) {
			ahead++
		}
	}
	free, first := -1, int64(0)
	for i, sl := range sk.slots {
		if sl.lockID == "" || !rules.IsLive(sl.expiresMs, now) {
			if free < 0 {
				free = i
			}
		} else if first == 0 || sl.expiresMs < first {
			first = sl.expiresMs
		}
	}
	if ahead == 0 && free >= 0 {
		sl := st.take(sk, k.Norm, free, lockID, ttlMs, ident, now)
		if w != nil {
			sk.dequeue(w)
			st.wakeNext(sk, now)
		}
		return semResult(sl), nil
	}
	res := syncguard.AcquireResult{Reason: syncguard.ReasonLocked}
	if free < 0 {
		res.RetryIn = time.Duration(first+rules.ToleranceMs+1-now) * time.Millisecond
	}
	if w != nil && !w.queued {
		w.queued = true
		sk.queue = append(sk.queue, w)
	}
	return res, nil
}

func semResult(sl semSlot) syncguard.AcquireResult {
	f, _ := rules.FormatFence(sl.fence)
	return syncguard.AcquireResult{OK: true, LockID: sl.lockID, Fence: syncguard.Fence(f), ExpiresAt: time.UnixMilli(sl.expiresMs)}
}

// take gives slot i to lockID. Caller holds mu.
func (st *semStore) take(sk *semKey, norm string, i int, lockID string, ttlMs int64, ident string, now int64) semSlot {
	old := sk.slots[i]
	if old.lockID != "" {
		delete(st.byID, old.lockID)
	}
	sk.slots[i] = semSlot{lockID: lockID, expiresMs: now + ttlMs, acquired: now, fence: old.fence + 1, identity: ident}
	st.byID[lockID] = semHolder{key: norm, slot: i + 1}
	return sk.slots[i]
}

func (st *semStore) holds(sk *semKey, lockID string, now int64) bool {
	h, ok := st.byID[lockID]
	return ok && sk.slots[h.slot-1].lockID == lockID && rules.IsLive(sk.slots[h.slot-1].expiresMs, now)
}

// wakeNext wakes the first live waiter of sk that holds nothing while a
// slot is free: it may take it now.
func (st *semStore) wakeNext(sk *semKey, now int64) {
	for _, q := range sk.queue {
		if q.live() && !st.holds(sk, q.lockID, now) {
			q.signal()
			return
		}
	}
}

// Release implements syncguard.Locker: a live permit's slot goes to the
// first live waiter in the same step (woken), or becomes free.
func (s *Semaphore) Release(ctx context.Context, lockID string) (syncguard.ReleaseResult, error) {
	if err := rules.ValidateLockID(lockID); err != nil {
		return syncguard.ReleaseResult{}, &syncguard.Error{Op: "release", Code: syncguard.ErrInvalidArgument, Msg: err.Error()}
	}
	s.st.mu.Lock()
	defer s.st.mu.Unlock()
	return s.st.release(lockID), nil
}

// release: caller holds mu.
func (st *semStore) release(lockID string) syncguard.ReleaseResult {
	h, ok := st.byID[lockID]
	if !ok {
		return syncguard.ReleaseResult{Reason: syncguard.ReasonNotFound}
	}
	sk, now := st.keys[h.key], st.nowMs()
	sl := sk.slots[h.slot-1]
	if !rules.IsLive(sl.expiresMs, now) {
		return syncguard.ReleaseResult{Reason: syncguard.ReasonExpired}
	}
	delete(st.byID, lockID)
	sk.slots[h.slot-1] = semSlot{fence: sl.fence}
	for _, q := range sk.queue {
		if q.lockID != lockID && q.live() && !st.holds(sk, q.lockID, now) {
			st.take(sk, h.key, h.slot-1, q.lockID, q.ttlMs, q.ident, now)
			sk.dequeue(q)
			q.signal()
			break
		}
	}
	return syncguard.ReleaseResult{OK: true}
}

// Extend implements syncguard.Locker.
func (s *Semaphore) Extend(ctx context.Context, lockID string, ttl time.Duration) (syncguard.ExtendResult, error) {
	if err := rules.ValidateLockID(lockID); err != nil {
		return syncguard.ExtendResult{}, &syncguard.Error{Op: "extend", Code: syncguard.ErrInvalidArgument, Msg: err.Error()}
	}
	if ttl.Milliseconds() < 1 {
		return syncguard.ExtendResult{}, semInvalid("extend", "", fmt.Sprintf("ttl must be at least 1ms, got %v", ttl))
	}
	st := s.st
	st.mu.Lock()
	defer st.mu.Unlock()
	h, ok := st.byID[lockID]
	if !ok {
		return syncguard.ExtendResult{Reason: syncguard.ReasonNotFound}, nil
	}
	sl, now := &st.keys[h.key].slots[h.slot-1], st.nowMs()
	if !rules.IsLive(sl.expiresMs, now) {
		return syncguard.ExtendResult{Reason: syncguard.ReasonExpired}, nil
	}
	sl.expiresMs = now + ttl.Milliseconds()
	return syncguard.ExtendResult{OK: true, ExpiresAt: time.UnixMilli(sl.expiresMs)}, nil
}

// semWaiter is the Semaphore's kit.Wait.
type semWaiter struct {
	s        *Semaphore
	key      string
	identity string
	pace     kit.Pace
	plain    bool
	lockID   string
	wake     chan struct{}
	// under the store's mu
	norm, ident string
	ttlMs       int64
	seen        time.Time
	queued      bool
}

// Queue implements kit.Queuer.
func (s *Semaphore) Queue(key, identity string, once bool) kit.Wait {
	if identity == "" {
		identity = s.identity
	}
	return &semWaiter{s: s, key: key, identity: identity, plain: once, lockID: rules.GenerateLockID(), wake: make(chan struct{}, 1)}
}

func (w *semWaiter) live() bool { return time.Since(w.seen) < queueWindow }

func (w *semWaiter) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (sk *semKey) dequeue(w *semWaiter) {
	for i, q := range sk.queue {
		if q == w {
			sk.queue = append(sk.queue[:i:i], sk.queue[i+1:]...)
			w.queued = false
			return
		}
	}
}

// Attempt implements kit.Wait.
func (w *semWaiter) Attempt(ctx context.Context, ttl time.Duration) (syncguard.AcquireResult, error) {
	q := w
	if w.plain {
		q = nil
	}
	return w.pace.Attempt(func() (syncguard.AcquireResult, error) { return w.s.attempt(ctx, w.key, ttl, w.identity, q) })
}

// Next implements kit.Wait: woken by a hand-off, renewing at
// half the queue window; never polling.
func (w *semWaiter) Next(retry time.Time) (<-chan struct{}, time.Time) {
	return fakeNext(&w.pace, retry, w.plain, w.wake, queueWindow/2)
}

// Leave implements kit.Wait: out of the queue; a slot handed to
// the waiter meanwhile goes to the next waiter.
func (w *semWaiter) Leave(context.Context) error {
	st := w.s.st
	st.mu.Lock()
	defer st.mu.Unlock()
	if w.norm == "" {
		return nil
	}
	sk := st.keys[w.norm]
	sk.dequeue(w)
	if st.holds(sk, w.lockID, st.nowMs()) {
		st.release(w.lockID)
	}
	st.wakeNext(sk, st.nowMs())
	return nil
}
