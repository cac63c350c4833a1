package syncguardtest

import (
	"context"
	"errors"
	"fmt"
	"github.com/syncguard/syncguard-go/internal/kit"
	"sort"
	"sync"
	"time"

	"github.com/syncguard/syncguard-go/internal/errwrap"
	"github.com/syncguard/syncguard-go/internal/rules"
	"github.com/syncguard/syncguard-go/syncguard"
)

// RWLock is an in-memory read-write lock with the rules of package
// rwlock: shared and exclusive leases on one key, a FIFO queue in which a
// waiting writer blocks later readers, a hand-off in one step to the run
// of readers at the head of the queue or to the writer there, a per-key
// writer fence (strictly increasing) and, on a reader's lease, its writer
// generation (the key's latest writer fence when it was admitted). Expiry
// follows the spec's liveness rule (1 s tolerance) on the fake's clock,
// which Advance moves. Shared and Exclusive are syncguard.LockBackends and
// queues (a Queue method) for syncguard.Lock and WithLock.
type RWLock struct {
	mu      sync.Mutex
	offset  time.Duration
	keys    map[string]*rwKey
	byID    map[string]*rwLease
	seq     uint64
	shared  *RWSide
	exclusi *RWSide
}

type rwKey struct {
	norm    string
	fence   int64
	leases  map[string]*rwLease
	waiters []*rwWaiter // in arrival order
}

type rwLease struct {
	key       *rwKey
	lockID    string
	exclusive bool
	expiresMs int64
	acquired  int64
	fence     int64
}

// NewRWLock returns an empty in-memory read-write lock.
func NewRWLock() *RWLock {
	rw := &RWLock{keys: map[string]*rwKey{}, byID: map[string]*rwLease{}}
	rw.shared, rw.exclusi = &RWSide{rw: rw}, &RWSide{rw: rw, exclusive: true}
	return rw
}

// Shared returns the side of shared (read) leases.
func (rw *RWLock) Shared() *RWSide { return rw.shared }

// Exclusive returns the side of exclusive (write) leases.
func (rw *RWLock) Exclusive() *RWSide { return rw.exclusi }

// Advance moves the fake's clock forward by d (leases expire by it) and
// hands on what expired.
func (rw *RWLock) Advance(d time.Duration) {
	rw.mu.Lock()
	defer rw.mu.Unlock()
	rw.offset += d
	for _, k := range rw.keys {
		rw.step(k)
	}
}

// WriterFence returns key's latest writer fence (all zeros: none yet).
func (rw *RWLock) WriterFence(ctx context.Context, key string) (syncguard.Fence, error) {
	k, err := rwCheck(ctx, "rwlock.writerFence", key)
	if err != nil {
		return "", err
	}
	rw.mu.Lock()
	defer rw.mu.Unlock()
	var n int64
	if s := rw.keys[k.Storage]; s != nil {
		n = s.fence
	}
	return rwFence(n), nil
}

func rwFence(n int64) syncguard.Fence {
	f, _ := rules.FormatFence(n)
	return syncguard.Fence(f)
}

func (rw *RWLock) nowMs() int64 { return time.Now().Add(rw.offset).UnixMilli() }

func rwCheck(ctx context.Context, op, key string) (rules.Key, error) {
	k, err := rules.DeriveKey(key)
	if err != nil {
		var ae *rules.ArgError
		msg := err.Error()
		if errors.As(err, &ae) {
			msg = ae.Msg
		}
		return k, &syncguard.Error{Op: op, Code: syncguard.ErrInvalidArgument, Key: key, Msg: msg}
	}
	if err := ctx.Err(); err != nil {
		e := errwrap.Wrap(ctx, op, nil, err)
		e.Key = key
		return k, e
	}
	return k, nil
}

func rwCheckID(ctx context.Context, op, id string) error {
	if err := rules.ValidateLockID(id); err != nil {
		return &syncguard.Error{Op: op, Code: syncguard.ErrInvalidArgument, LockID: id, Msg: err.Error()}
	}
	if err := ctx.Err(); err != nil {
		return errwrap.Wrap(ctx, op, nil, err)
	}
	return nil
}

func rwTTL(op string, ttl time.Duration) error {
	if ttl.Milliseconds() < 1 {
		return &syncguard.Error{Op: op, Code: syncguard.ErrInvalidArgument, Msg: fmt.Sprintf("ttl must be at least 1ms, got %v", ttl)}
	}
	return nil
}

// step deletes k's dead leases and hands the key on: with no writer's
// lease, the notified readers at the head up to the first waiting writer;
// with no lease at all, the writer at the head.
func (rw *RWLock) step(k *rwKey) {
	now := rw.nowMs()
	for id, l := range k.leases {
		if !rules.IsLive(l.expiresMs, now) {
			delete(k.leases, id)
			delete(rw.byID, id)
		}
	}
	live := k.waiters[:0]
	for _, w := range k.waiters {
		if !w.left && time.Since(w.seen) < queueWindow*4 {
			live = append(live, w)
		}
	}
	k.waiters = live
	for _, l := range k.leases {
		if l.exclusive {
			return
		}
	}
	any := len(k.leases) > 0
	for _, w := range k.waiters {
		if w.granted != nil || time.Since(w.seen) >= queueWindow {
			continue
		}
		if w.side.exclusive {
			if !any {
				w.granted = rw.take(k, w.lockID, true, w.ttlMs, now)
				w.signal()
			}
			return
		}
		w.granted = rw.take(k, w.lockID, false, w.ttlMs, now)
		w.signal()
		any = true
	}
}

func (rw *RWLock) take(k *rwKey, lockID string, excl bool, ttlMs, now int64) *rwLease {
	if excl {
		k.fence++
	}
	l := &rwLease{key: k, lockID: lockID, exclusive: excl, expiresMs: now + ttlMs, acquired: now, fence: k.fence}
	k.leases[lockID] = l
	rw.byID[lockID] = l
	return l
}

// admissible: a writer when no lease is live and no live waiter is ahead;
// a reader when no writer's lease is live and no live writer waits ahead.
func (rw *RWLock) admissible(k *rwKey, excl bool, me *rwWaiter) bool {
	for _, l := range k.leases {
		if excl || l.exclusive {
			return false
		}
	}
	for _, w := range k.waiters {
		if w == me {
			break
		}
		if w.granted == nil && time.Since(w.seen) < queueWindow && (excl || w.side.exclusive) {
			return false
		}
	}
	return true
}

// RWSide is one side of the fake RWLock.
type RWSide struct {
	rw        *RWLock
	exclusive bool
}

var (
	_ syncguard.LockBackend = (*RWSide)(nil)
	_ kit.Queuer            = (*RWSide)(nil)
)

// Acquire implements syncguard.Locker: one attempt that never queues.
func (s *RWSide) Acquire(ctx context.Context, key string, ttl time.Duration) (syncguard.AcquireResult, error) {
	return s.attempt(ctx, key, ttl, nil)
}

func (s *RWSide) attempt(ctx context.Context, key string, ttl time.Duration, w *rwWaiter) (syncguard.AcquireResult, error) {
	const op = "acquire"
	k, err := rwCheck(ctx, op, key)
	if err != nil {
		return syncguard.AcquireResult{}, err
	}
	if err := rwTTL(op, ttl); err != nil {
		return syncguard.AcquireResult{}, err
	}
	rw := s.rw
	rw.mu.Lock()
	defer rw.mu.Unlock()
	st := rw.keys[k.Storage]
	if st == nil {
		st = &rwKey{norm: k.Norm, leases: map[string]*rwLease{}}
		rw.keys[k.Storage] = st
	}
	rw.step(st)
	now := rw.nowMs()
	lockID := rules.GenerateLockID()
	if w != nil {
		lockID = w.lockID
		w.seen, w.ttlMs = time.Now(), ttl.Milliseconds()
		if l := st.leases[lockID]; l != nil {
			w.remove()
			return syncguard.AcquireResult{OK: true, LockID: lockID, Fence: rwFence(l.fence), ExpiresAt: time.UnixMilli(l.expiresMs),
				HandedOver: time.Duration(now-l.acquired) * time.Millisecond}, nil
		}
	}
	var l *rwLease
	if rw.admissible(st, s.exclusive, w) {
		l = rw.take(st, lockID, s.exclusive, ttl.Milliseconds(), now)
		if w != nil {
			w.remove()
		}
	} else if w != nil && !w.queued {
		w.queued, w.k = true, st
		st.waiters = append(st.waiters, w)
	}
	rw.step(st)
	if l == nil {
		res := syncguard.AcquireResult{Reason: syncguard.ReasonLocked}
		var until int64
		for _, x := range st.leases {
			if s.exclusive || x.exclusive {
				until = max(until, x.expiresMs)
			}
		}
		if until > 0 {
			res.RetryIn = time.Duration(until+rules.ToleranceMs+1-now) * time.Millisecond
		}
		return res, nil
	}
	return syncguard.AcquireResult{OK: true, LockID: lockID, Fence: rwFence(l.fence), ExpiresAt: time.UnixMilli(l.expiresMs)}, nil
}

// Release implements syncguard.Locker, handing on what it frees.
func (s *RWSide) Release(ctx context.Context, lockID string) (syncguard.ReleaseResult, error) {
	if err := rwCheckID(ctx, "release", lockID); err != nil {
		return syncguard.ReleaseResult{}, err
	}
	rw := s.rw
	rw.mu.Lock()
	defer rw.mu.Unlock()
	l := rw.byID[lockID]
	if l == nil {
		return syncguard.ReleaseResult{Reason: syncguard.ReasonNotFound}, nil
	}
	if !rules.IsLive(l.expiresMs, rw.nowMs()) {
		rw.step(l.key)
		return syncguard.ReleaseResult{Reason: syncguard.ReasonExpired}, nil
	}
	delete(l.key.leases, lockID)
	delete(rw.byID, lockID)
	rw.step(l.key)
	return syncguard.ReleaseResult{OK: true}, nil
}

// Extend implements syncguard.Locker; it never revives an expired lease.
func (s *RWSide) Extend(ctx context.Context, lockID string, ttl time.Duration) (syncguard.ExtendResult, error) {
	if err := rwCheckID(ctx, "extend", lockID); err != nil {
		return syncguard.ExtendResult{}, err
	}
	if err := rwTTL("extend", ttl); err != nil {
		return syncguard.ExtendResult{}, err
	}
	rw := s.rw
	rw.mu.Lock()
	defer rw.mu.Unlock()
	l := rw.byID[lockID]
	now := rw.nowMs()
	switch {
	case l == nil:
		return syncguard.ExtendResult{Reason: syncguard.ReasonNotFound}, nil
	case !rules.IsLive(l.expiresMs, now):
		return syncguard.ExtendResult{Reason: syncguard.ReasonExpired}, nil
	}
	l.expiresMs = now + ttl.Milliseconds()
	return syncguard.ExtendResult{OK: true, ExpiresAt: time.UnixMilli(l.expiresMs)}, nil
}

// IsLocked implements syncguard.LockBackend: a live lease that turns this
// side away (any for Exclusive, a writer's for Shared).
func (s *RWSide) IsLocked(ctx context.Context, key string) (bool, error) {
	i, err := s.LookupKey(ctx, key)
	return i != nil, err
}

// LookupKey implements syncguard.LockBackend: the writer's lease, or for
// Exclusive the reader's that expires last.
func (s *RWSide) LookupKey(ctx context.Context, key string) (*syncguard.LockInfo, error) {
	k, err := rwCheck(ctx, "lookup", key)
	if err != nil {
		return nil, err
	}
	rw := s.rw
	rw.mu.Lock()
	defer rw.mu.Unlock()
	st := rw.keys[k.Storage]
	if st == nil {
		return nil, nil
	}
	rw.step(st)
	var ls []*rwLease
	for _, l := range st.leases {
		if l.exclusive || s.exclusive {
			ls = append(ls, l)
		}
	}
	if len(ls) == 0 {
		return nil, nil
	}
	sort.Slice(ls, func(i, j int) bool { return ls[i].exclusive || !ls[j].exclusive && ls[i].expiresMs > ls[j].expiresMs })
	return rwInfo(ls[0]), nil
}

// LookupID implements syncguard.LockBackend.
func (s *RWSide) LookupID(ctx context.Context, lockID string) (*syncguard.LockInfo, error) {
	if err := rwCheckID(ctx, "lookup", lockID); err != nil {
		return nil, err
	}
	rw := s.rw
	rw.mu.Lock()
	defer rw.mu.Unlock()
	l := rw.byID[lockID]
	if l == nil || !rules.IsLive(l.expiresMs, rw.nowMs()) {
		return nil, nil
	}
	return rwInfo(l), nil
}

func rwInfo(l *rwLease) *syncguard.LockInfo {
	return &syncguard.LockInfo{KeyHash: rules.HashKey(l.key.norm), LockIDHash: rules.HashKey(l.lockID),
		ExpiresAt: time.UnixMilli(l.expiresMs), AcquiredAt: time.UnixMilli(l.acquired), Fence: rwFence(l.fence)}
}

// Capabilities implements syncguard.LockBackend.
func (s *RWSide) Capabilities() syncguard.Capabilities {
	return syncguard.Capabilities{Backend: "syncguardtest", SupportsFencing: true, TimeAuthority: "server"}
}

// Queue implements kit.Queuer.
func (s *RWSide) Queue(key, identity string, once bool) kit.Wait {
	return &rwWaiter{side: s, key: key, once: once, lockID: rules.GenerateLockID(), wake: make(chan struct{}, 1)}
}

// rwWaiter is one wait's place in a key's queue (fields under rw.mu).
type rwWaiter struct {
	side    *RWSide
	key     string
	once    bool
	pace    kit.Pace
	lockID  string
	wake    chan struct{}
	k       *rwKey
	queued  bool
	left    bool
	seen    time.Time
	ttlMs   int64
	granted *rwLease
}

func (w *rwWaiter) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// remove takes w out of its key's queue (under rw.mu).
func (w *rwWaiter) remove() {
	w.left = true
	if w.k == nil {
		return
	}
	for i, x := range w.k.waiters {
		if x == w {
			w.k.waiters = append(w.k.waiters[:i:i], w.k.waiters[i+1:]...)
			break
		}
	}
}

// Attempt implements kit.Wait.
func (w *rwWaiter) Attempt(ctx context.Context, ttl time.Duration) (syncguard.AcquireResult, error) {
	return w.pace.Attempt(func() (syncguard.AcquireResult, error) {
		if w.once {
			return w.side.Acquire(ctx, w.key, ttl)
		}
		return w.side.attempt(ctx, w.key, ttl, w)
	})
}

// Next implements kit.Wait: woken by hand-offs, renewing at half
// the queue window.
func (w *rwWaiter) Next(retry time.Time) (<-chan struct{}, time.Time) {
	return fakeNext(&w.pace, retry, w.once, w.wake, queueWindow/2)
}

// Leave implements kit.Wait: out of the queue, releasing a lease
// handed to it meanwhile, and handing on what its leaving frees.
func (w *rwWaiter) Leave(context.Context) error {
	rw := w.side.rw
	rw.mu.Lock()
	defer rw.mu.Unlock()
	w.remove()
	if w.k == nil {
		return nil
	}
	if l := w.k.leases[w.lockID]; l != nil {
		delete(w.k.leases, w.lockID)
		delete(rw.byID, w.lockID)
	}
	rw.step(w.k)
	return nil
}
