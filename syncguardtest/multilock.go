package syncguardtest

import (
	"context"
	"github.com/syncguard/syncguard-go/internal/kit"
	"slices"
	"sync"
	"time"

	"github.com/syncguard/syncguard-go/internal/rules"
	"github.com/syncguard/syncguard-go/multilock"
	"github.com/syncguard/syncguard-go/syncguard"
)

// MultiLock is an in-memory set locker with the behaviour of package
// multilock's Locker on PostgreSQL, for the unit tests of code that locks
// several keys at once: all keys of a set or none, a fence per key
// (strictly increasing, its own counter), expiry with the spec's
// tolerance on its clock (time.Now: a testing/synctest bubble's fake
// clock inside one), and the same queue: a waiter keeps one place for
// all its keys; a set goes to a waiter only when every key is free and no
// live waiter placed earlier wants any of them; a release, a waiter's
// leaving and any step that finds a holding expired hand what they free
// to the waiters so admitted, in that step, and wake them. It is a
// syncguard.LockBackend and Queuer of encoded sets (multilock.Keys) and a
// multilock.SetLocker. Make one with NewMultiLock; safe for concurrent
// use. It is independent of Backend: a key held here does not exclude
// the mutex of the same name, as on PostgreSQL.
type MultiLock struct {
	identity string
	*mlStore
}

type mlStore struct {
	mu     sync.Mutex
	locks  map[string]*mlHold // by key
	byID   map[string]*mlHold
	fences map[string]int64 // by key
	queue  []*mlWaiter      // in place order
	seq    uint64
}

type mlHold struct {
	id               string
	fences           []multilock.KeyFence
	expiresMs, acqMs int64
	identity         string
}

var (
	_ syncguard.LockBackend = (*MultiLock)(nil)
	_ kit.Queuer            = (*MultiLock)(nil)
	_ multilock.SetLocker   = (*MultiLock)(nil)
)

// NewMultiLock returns an empty in-memory set locker.
func NewMultiLock() *MultiLock {
	return &MultiLock{mlStore: &mlStore{locks: map[string]*mlHold{}, byID: map[string]*mlHold{}, fences: map[string]int64{}}}
}

// WithIdentity returns a view of m whose holdings carry identity.
func (m *MultiLock) WithIdentity(identity string) *MultiLock {
	return &MultiLock{identity: identity, mlStore: m.mlStore}
}

func nowMs() int64 { return time.Now().UnixMilli() }

func (s *mlStore) live(h *mlHold, now int64) bool { return h != nil && rules.IsLive(h.expiresMs, now) }

// free reports whether no key of keys is held by a live holding.
func (s *mlStore) free(keys []string, now int64) bool {
	for _, k := range keys {
		if s.live(s.locks[k], now) {
			return false
		}
	}
	return true
}

// busyUntil is when the last live holding of keys stops being live.
func (s *mlStore) retryIn(keys []string, now int64) time.Duration {
	var d time.Duration
	for _, k := range keys {
		if h := s.locks[k]; s.live(h, now) {
			d = max(d, time.Duration(h.expiresMs+rules.ToleranceMs+1-now)*time.Millisecond)
		}
	}
	return d
}

// ahead reports whether a live waiter placed before w (before anyone when
// w is nil or not queued) wants one of keys.
func (s *mlStore) ahead(w *mlWaiter, keys []string) bool {
	for _, o := range s.queue {
		if o == w {
			return false
		}
		if o.liveWaiter() && overlaps(o.keys, keys) {
			return true
		}
	}
	return false
}

func overlaps(a, b []string) bool {
	for _, k := range a {
		if slices.Contains(b, k) {
			return true
		}
	}
	return false
}

// take holds keys for ttlMs: each key's fence +1.
func (s *mlStore) take(keys []string, ttlMs int64, identity string, now int64) (*mlHold, error) {
	for _, k := range keys {
		if s.fences[k] >= rules.FenceMax {
			return nil, &syncguard.Error{Op: "acquire", Code: syncguard.ErrInternal, Msg: "the fence counter of a key of the set reached its maximum"}
		}
	}
	h := &mlHold{id: rules.GenerateLockID(), expiresMs: now + ttlMs, acqMs: now, identity: identity}
	for _, k := range keys {
		s.fences[k]++
		f, _ := rules.FormatFence(s.fences[k])
		h.fences = append(h.fences, multilock.KeyFence{Key: k, Fence: syncguard.Fence(f)})
		if old := s.locks[k]; old != nil {
			delete(s.byID, old.id)
		}
		s.locks[k] = h
	}
	s.byID[h.id] = h
	return h, nil
}

// handOff grants every admitted live waiter its set and wakes it.
func (s *mlStore) handOff(now int64) {
	kept := s.queue[:0:0]
	for _, w := range s.queue {
		if time.Since(w.seen) > time.Minute {
			continue // dead
		}
		kept = append(kept, w)
	}
	s.queue = kept
	for _, w := range slices.Clone(s.queue) {
		if !w.liveWaiter() || !s.free(w.keys, now) || s.ahead(w, w.keys) {
			continue
		}
		h, err := s.take(w.keys, w.ttlMs, w.identity, now)
		if err != nil {
			continue // it attempts and gets the error itself
		}
		w.lock = h
		s.dequeue(w)
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
}

func (s *mlStore) dequeue(w *mlWaiter) {
	if i := slices.Index(s.queue, w); i >= 0 {
		s.queue = slices.Delete(s.queue, i, i+1)
	}
	w.queued = false
}

func result(h *mlHold) syncguard.AcquireResult {
	var top syncguard.Fence
	for _, f := range h.fences {
		top = max(top, f.Fence)
	}
	return syncguard.AcquireResult{OK: true, LockID: h.id, Fence: top, ExpiresAt: time.UnixMilli(h.expiresMs)}
}

func check(op, set string, ttl time.Duration, ctx context.Context) ([]string, error) {
	keys, err := multilock.ParseKeys(set)
	if err != nil {
		err.(*syncguard.Error).Op = op
		return nil, err
	}
	if ttl.Milliseconds() < 1 {
		return nil, &syncguard.Error{Op: op, Code: syncguard.ErrInvalidArgument, Key: set, Msg: "ttl must be at least 1ms"}
	}
	if err := ctx.Err(); err != nil {
		return nil, &syncguard.Error{Op: op, Code: syncguard.ErrAborted, Key: set, Err: err, Msg: "context done"}
	}
	return keys, nil
}

// Acquire implements syncguard.Locker: one plain attempt, after every
// live queued waiter.
func (m *MultiLock) Acquire(ctx context.Context, set string, ttl time.Duration) (syncguard.AcquireResult, error) {
	keys, err := check("acquire", set, ttl, ctx)
	if err != nil {
		return syncguard.AcquireResult{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := nowMs()
	m.handOff(now)
	if !m.free(keys, now) || m.ahead(nil, keys) {
		return syncguard.AcquireResult{Reason: syncguard.ReasonLocked, RetryIn: m.retryIn(keys, now)}, nil
	}
	h, err := m.take(keys, ttl.Milliseconds(), m.identity, now)
	if err != nil {
		return syncguard.AcquireResult{}, err
	}
	return result(h), nil
}

// Release implements syncguard.Locker.
func (m *MultiLock) Release(ctx context.Context, lockID string) (syncguard.ReleaseResult, error) {
	if err := rules.ValidateLockID(lockID); err != nil {
		return syncguard.ReleaseResult{}, &syncguard.Error{Op: "release", Code: syncguard.ErrInvalidArgument, Msg: err.Error()}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := nowMs()
	h := m.byID[lockID]
	if h == nil {
		return syncguard.ReleaseResult{Reason: syncguard.ReasonNotFound}, nil
	}
	if !m.live(h, now) {
		return syncguard.ReleaseResult{Reason: syncguard.ReasonExpired}, nil
	}
	m.drop(h)
	m.handOff(now)
	return syncguard.ReleaseResult{OK: true}, nil
}

func (s *mlStore) drop(h *mlHold) {
	delete(s.byID, h.id)
	for _, f := range h.fences {
		if s.locks[f.Key] == h {
			delete(s.locks, f.Key)
		}
	}
}

// Extend implements syncguard.Locker.
func (m *MultiLock) Extend(ctx context.Context, lockID string, ttl time.Duration) (syncguard.ExtendResult, error) {
	if err := rules.ValidateLockID(lockID); err != nil || ttl.Milliseconds() < 1 {
		return syncguard.ExtendResult{}, &syncguard.Error{Op: "extend", Code: syncguard.ErrInvalidArgument, Msg: "bad lockId or ttl"}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := nowMs()
	h := m.byID[lockID]
	switch {
	case h == nil:
		return syncguard.ExtendResult{Reason: syncguard.ReasonNotFound}, nil
	case !m.live(h, now):
		return syncguard.ExtendResult{Reason: syncguard.ReasonExpired}, nil
	}
	h.expiresMs = now + ttl.Milliseconds()
	return syncguard.ExtendResult{OK: true, ExpiresAt: time.UnixMilli(h.expiresMs)}, nil
}

// IsLocked implements syncguard.LockBackend: any key of set held.
func (m *MultiLock) IsLocked(ctx context.Context, set string) (bool, error) {
	keys, err := check("isLocked", set, time.Millisecond, ctx)
	if err != nil {
		return false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return !m.free(keys, nowMs()), nil
}

func (h *mlHold) info() *syncguard.LockInfo {
	ks := make([]string, len(h.fences))
	for i, f := range h.fences {
		ks[i] = f.Key
	}
	r := result(h)
	return &syncguard.LockInfo{KeyHash: syncguard.HashKey(multilock.Keys(ks...)), LockIDHash: syncguard.HashKey(h.id),
		ExpiresAt: r.ExpiresAt, AcquiredAt: time.UnixMilli(h.acqMs), Fence: r.Fence, Identity: h.identity}
}

// LookupKey implements syncguard.LockBackend: the live holding of every
// key of set, or nil.
func (m *MultiLock) LookupKey(ctx context.Context, set string) (*syncguard.LockInfo, error) {
	keys, err := check("lookup", set, time.Millisecond, ctx)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	h := m.locks[keys[0]]
	if !m.live(h, nowMs()) {
		return nil, nil
	}
	for _, k := range keys {
		if m.locks[k] != h {
			return nil, nil
		}
	}
	return h.info(), nil
}

// LookupID implements syncguard.LockBackend.
func (m *MultiLock) LookupID(ctx context.Context, lockID string) (*syncguard.LockInfo, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if h := m.byID[lockID]; m.live(h, nowMs()) {
		return h.info(), nil
	}
	return nil, nil
}

// Fences implements multilock.SetLocker.
func (m *MultiLock) Fences(ctx context.Context, lockID string) ([]multilock.KeyFence, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if h := m.byID[lockID]; h != nil {
		return slices.Clone(h.fences), nil
	}
	return nil, nil
}

// Capabilities implements syncguard.LockBackend.
func (m *MultiLock) Capabilities() syncguard.Capabilities {
	return syncguard.Capabilities{Backend: "memory", SupportsFencing: true, TimeAuthority: "client"}
}

// mlWaiter is the kit.Wait of one wait.
type mlWaiter struct {
	m        *MultiLock
	set      string
	identity string
	pace     kit.Pace
	plain    bool
	wake     chan struct{}

	// Under mu.
	keys   []string
	queued bool
	ttlMs  int64
	seen   time.Time
	lock   *mlHold
}

func (w *mlWaiter) liveWaiter() bool { return time.Since(w.seen) < queueWindow }

// Queue implements kit.Queuer.
func (m *MultiLock) Queue(set, identity string, once bool) kit.Wait {
	if identity == "" {
		identity = m.identity
	}
	return &mlWaiter{m: m, set: set, identity: identity, plain: once, wake: make(chan struct{}, 1)}
}

// Attempt implements kit.Wait.
func (w *mlWaiter) Attempt(ctx context.Context, ttl time.Duration) (syncguard.AcquireResult, error) {
	return w.pace.Attempt(func() (syncguard.AcquireResult, error) { return w.attempt(ctx, ttl) })
}

func (w *mlWaiter) attempt(ctx context.Context, ttl time.Duration) (syncguard.AcquireResult, error) {
	if w.plain {
		return w.m.Acquire(ctx, w.set, ttl)
	}
	keys, err := check("acquire", w.set, ttl, ctx)
	if err != nil {
		return syncguard.AcquireResult{}, err
	}
	s := w.m.mlStore
	s.mu.Lock()
	defer s.mu.Unlock()
	now := nowMs()
	w.keys, w.ttlMs, w.seen = keys, ttl.Milliseconds(), time.Now()
	if h := w.lock; h != nil {
		if s.byID[h.id] == h && s.live(h, now) {
			r := result(h)
			r.HandedOver = time.Duration(now-h.acqMs) * time.Millisecond
			return r, nil
		}
		w.lock = nil
	}
	if !w.queued {
		w.queued = true
		s.seq++
		s.queue = append(s.queue, w)
	}
	s.handOff(now)
	if h := w.lock; h != nil {
		return result(h), nil
	}
	return syncguard.AcquireResult{Reason: syncguard.ReasonLocked, RetryIn: s.retryIn(keys, now)}, nil
}

// Next implements kit.Wait: its wake channel, a renewal at half
// the queue window; never poll.
func (w *mlWaiter) Next(retry time.Time) (<-chan struct{}, time.Time) {
	return fakeNext(&w.pace, retry, w.plain, w.wake, queueWindow/2)
}

// Leave implements kit.Wait: out of the queue; a set handed to it
// meanwhile is released and handed on.
func (w *mlWaiter) Leave(context.Context) error {
	if w.plain {
		return nil
	}
	s := w.m.mlStore
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dequeue(w)
	if h := w.lock; h != nil {
		w.lock = nil
		if s.byID[h.id] == h {
			s.drop(h)
		}
	}
	s.handOff(nowMs())
	return nil
}
