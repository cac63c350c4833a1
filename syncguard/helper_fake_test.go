package syncguard

import (
	"context"
	"sync"
	"time"

	"github.com/syncguard/syncguard-go/internal/rules"
)

// FakeBackend is an in-memory LockBackend for the tests of this package.
// Its "server clock" is time.Now, so inside a testing/synctest bubble every
// timing is exact. It applies the core's validation and liveness rule.
//
// Programs and the examples use package syncguardtest instead, which
// cannot serve here: it imports syncguard, and a test of package syncguard
// itself cannot import it back.
type FakeBackend struct {
	// Latency is the simulated one-way network delay: an operation runs
	// Latency after the call and its answer arrives Latency after that.
	Latency time.Duration
	mu      sync.Mutex
	fail    func(ctx context.Context, op string) error
	lose    func(op string) error
	locks   map[string]*fakeLock // by storage key
	fences  map[string]int64
	calls   map[string]int
	at      map[string][]time.Time // server-side execution times per op
}

type fakeLock struct {
	key, lockID string
	expires     time.Time
	acquired    time.Time
	fence       Fence
}

// NewFakeBackend returns an empty FakeBackend.
func NewFakeBackend() *FakeBackend {
	return &FakeBackend{locks: map[string]*fakeLock{}, fences: map[string]int64{},
		calls: map[string]int{}, at: map[string][]time.Time{}}
}

var _ LockBackend = (*FakeBackend)(nil)

// do simulates one round trip around exec, honouring ctx like a driver:
// cancelled before sending, nothing runs; cancelled after the server ran
// exec, the effect stays but the answer is lost.
func (f *FakeBackend) do(ctx context.Context, op string, exec func(now time.Time)) error {
	if e := ctxErr(ctx, op); e != nil {
		return e
	}
	f.mu.Lock()
	fail := f.fail
	f.mu.Unlock()
	if fail != nil {
		if err := fail(ctx, op); err != nil {
			return err
		}
	}
	if err := fakeSleep(ctx, op, f.Latency); err != nil {
		return err
	}
	f.mu.Lock()
	now := time.Now()
	f.calls[op]++
	f.at[op] = append(f.at[op], now)
	exec(now)
	lose := f.lose
	f.mu.Unlock()
	if lose != nil {
		if err := lose(op); err != nil {
			return err
		}
	}
	return fakeSleep(ctx, op, f.Latency)
}

func fakeSleep(ctx context.Context, op string, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return fromContext(ctx, op, nil)
	}
}

func live(l *fakeLock, now time.Time) bool {
	return rules.IsLive(l.expires.UnixMilli(), now.UnixMilli())
}

// The checks of Backend, as error values (a nil *Error is not a nil error).
func fakeKey(op, key string) (rules.Key, error) {
	k, e := checkKey(op, key)
	if e != nil {
		return k, e
	}
	return k, nil
}

func fakeLockID(op, id string) error {
	if e := checkLockID(op, id); e != nil {
		return e
	}
	return nil
}

func fakeTTL(op string, ttl time.Duration) (int64, error) {
	ms, e := ttlMillis(op, ttl)
	if e != nil {
		return 0, e
	}
	return ms, nil
}

func (f *FakeBackend) Acquire(ctx context.Context, key string, ttl time.Duration) (AcquireResult, error) {
	const op = "acquire"
	k, err := fakeKey(op, key)
	if err != nil {
		return AcquireResult{}, err
	}
	ttlMs, err := fakeTTL(op, ttl)
	if err != nil {
		return AcquireResult{}, err
	}
	var res AcquireResult
	err = f.do(ctx, op, func(now time.Time) {
		if l := f.locks[k.Storage]; l != nil && live(l, now) {
			res = AcquireResult{Reason: ReasonLocked}
			return
		}
		f.fences[k.Fence]++
		ftext, _ := rules.FormatFence(f.fences[k.Fence])
		fence := Fence(ftext)
		l := &fakeLock{key: k.Norm, lockID: rules.GenerateLockID(), acquired: now,
			expires: now.Add(time.Duration(ttlMs) * time.Millisecond), fence: fence}
		f.locks[k.Storage] = l
		res = AcquireResult{OK: true, LockID: l.lockID, Fence: fence, ExpiresAt: l.expires}
	})
	return res, err
}

// byID returns the storage key and row of lockID, if any. Caller holds mu.
func (f *FakeBackend) byID(lockID string) (string, *fakeLock) {
	for k, l := range f.locks {
		if l.lockID == lockID {
			return k, l
		}
	}
	return "", nil
}

func reasonFor(l *fakeLock, now time.Time) string {
	if l != nil && !live(l, now) {
		return ReasonExpired
	}
	return ReasonNotFound
}

func (f *FakeBackend) Release(ctx context.Context, lockID string) (ReleaseResult, error) {
	const op = "release"
	if err := fakeLockID(op, lockID); err != nil {
		return ReleaseResult{}, err
	}
	var res ReleaseResult
	err := f.do(ctx, op, func(now time.Time) {
		k, l := f.byID(lockID)
		if l == nil || !live(l, now) {
			res.Reason = reasonFor(l, now)
			return
		}
		delete(f.locks, k)
		res.OK = true
	})
	return res, err
}

func (f *FakeBackend) Extend(ctx context.Context, lockID string, ttl time.Duration) (ExtendResult, error) {
	const op = "extend"
	if err := fakeLockID(op, lockID); err != nil {
		return ExtendResult{}, err
	}
	ttlMs, err := fakeTTL(op, ttl)
	if err != nil {
		return ExtendResult{}, err
	}
	var res ExtendResult
	err = f.do(ctx, op, func(now time.Time) {
		_, l := f.byID(lockID)
		if l == nil || !live(l, now) {
			res.Reason = reasonFor(l, now)
			return
		}
		l.expires = now.Add(time.Duration(ttlMs) * time.Millisecond)
		res = ExtendResult{OK: true, ExpiresAt: l.expires}
	})
	return res, err
}

func (f *FakeBackend) IsLocked(ctx context.Context, key string) (bool, error) {
	const op = "isLocked"
	k, err := fakeKey(op, key)
	if err != nil {
		return false, err
	}
	var locked bool
	err = f.do(ctx, op, func(now time.Time) {
		l := f.locks[k.Storage]
		locked = l != nil && live(l, now)
	})
	return locked, err
}

func (f *FakeBackend) info(l *fakeLock, now time.Time) *LockInfoDebug {
	if l == nil || !live(l, now) {
		return nil
	}
	return &LockInfoDebug{
		LockInfo: LockInfo{KeyHash: HashKey(l.key), LockIDHash: HashKey(l.lockID),
			ExpiresAt: l.expires, AcquiredAt: l.acquired, Fence: l.fence},
		Key: l.key, LockID: l.lockID,
	}
}

func (f *FakeBackend) LookupKeyDebug(ctx context.Context, key string) (*LockInfoDebug, error) {
	const op = "lookup"
	k, err := fakeKey(op, key)
	if err != nil {
		return nil, err
	}
	var d *LockInfoDebug
	err = f.do(ctx, op, func(now time.Time) { d = f.info(f.locks[k.Storage], now) })
	return d, err
}

func (f *FakeBackend) LookupIDDebug(ctx context.Context, lockID string) (*LockInfoDebug, error) {
	const op = "lookup"
	if err := fakeLockID(op, lockID); err != nil {
		return nil, err
	}
	var d *LockInfoDebug
	err := f.do(ctx, op, func(now time.Time) {
		_, l := f.byID(lockID)
		d = f.info(l, now)
	})
	return d, err
}

func (f *FakeBackend) LookupKey(ctx context.Context, key string) (*LockInfo, error) {
	d, err := f.LookupKeyDebug(ctx, key)
	if d == nil {
		return nil, err
	}
	return &d.LockInfo, err
}

func (f *FakeBackend) LookupID(ctx context.Context, lockID string) (*LockInfo, error) {
	d, err := f.LookupIDDebug(ctx, lockID)
	if d == nil {
		return nil, err
	}
	return &d.LockInfo, err
}

func (f *FakeBackend) Capabilities() Capabilities {
	return Capabilities{Backend: "fake", SupportsFencing: true, TimeAuthority: "server"}
}

// --- test controls, as an operator or another process would act.

// SetFail installs fail (nil removes it). It is called at the start of
// every operation ("acquire", "release", "extend", "isLocked", "lookup")
// with the operation's context; a non-nil error is returned instead of
// running the operation. It may block.
func (f *FakeBackend) SetFail(fail func(ctx context.Context, op string) error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail = fail
}

// SetLoseAnswer installs lose (nil removes it). It is called after an
// operation ran on the "server"; a non-nil error is returned instead of the
// answer, as when the connection breaks after the commit: the effect stays,
// the caller learns nothing.
func (f *FakeBackend) SetLoseAnswer(lose func(op string) error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lose = lose
}

// Delete removes the lock row of lockID, as `DELETE ... WHERE lock_id = $1`.
func (f *FakeBackend) Delete(lockID string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if k, _ := f.byID(lockID); k != "" {
		delete(f.locks, k)
	}
}

// Expire moves the expiry of lockID's row far into the past.
func (f *FakeBackend) Expire(lockID string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, l := f.byID(lockID); l != nil {
		l.expires = time.Now().Add(-time.Hour)
	}
}

// SetFence makes the next acquire of key get fence n+1.
func (f *FakeBackend) SetFence(key string, n int64) {
	k, _ := rules.DeriveKey(key)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fences[k.Fence] = n
}

// Calls returns how many times op ran on the "server".
func (f *FakeBackend) Calls(op string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[op]
}

// Times returns when op ran on the "server", in order.
func (f *FakeBackend) Times(op string) []time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]time.Time(nil), f.at[op]...)
}

// ExpiresAt returns the server-side expiry of lockID's row (zero if none).
func (f *FakeBackend) ExpiresAt(lockID string) time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, l := f.byID(lockID); l != nil {
		return l.expires
	}
	return time.Time{}
}
