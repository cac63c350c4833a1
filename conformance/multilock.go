package conformance

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/syncguard/syncguard-go/internal/kit"
	"github.com/syncguard/syncguard-go/internal/rules"
	"github.com/syncguard/syncguard-go/multilock"
	"github.com/syncguard/syncguard-go/syncguard"
)

// MultiLocker is a set locker under test (package multilock's Locker, the
// fake of package syncguardtest): a syncguard.LockBackend and Queuer of
// encoded sets (multilock.Keys) that reports per-key fences.
type MultiLocker interface {
	syncguard.LockBackend
	kit.Queuer
	multilock.SetLocker
}

// MultiLockHarness describes a set locker under test, for RunMultiLock.
type MultiLockHarness struct {
	// New returns the Target of one case, fresh (no key of the case
	// held). Called once per case, on the case's goroutine. Required.
	New func(t *testing.T) MultiLockTarget
	// CaseTimeout bounds every case. Default 60 s.
	CaseTimeout time.Duration
}

// MultiLockTarget is one set locker under test and its companions.
type MultiLockTarget struct {
	// Locker is the set locker under test. Required.
	Locker MultiLocker
	// Others are more views of the same locks (other pools, processes).
	// Default: none (Locker plays every part).
	Others []MultiLocker
	// Mutex, when set, is a syncguard mutex on the same database or store
	// (same Config): the independence case checks that a key held there
	// and the same key held through the set locker do not exclude each
	// other.
	Mutex syncguard.Locker
	// Unreachable, when set, is the same set locker with every I/O
	// failing: bad input must be rejected before any I/O.
	Unreachable MultiLocker
}

// multiCases are the cases of RunMultiLock, by name.
var multiCases = []struct {
	name string
	run  func(e *mlEnv)
}{
	{"AllOrNothing", (*mlEnv).allOrNothing},
	{"FencePerKey", (*mlEnv).fencePerKey},
	{"CrossedOrderNoDeadlock", (*mlEnv).crossedOrder},
	{"MutualExclusionOverlapping", (*mlEnv).overlapping},
	{"OneTimeoutForTheSet", (*mlEnv).oneTimeout},
	{"EarlierWaiterFirst", (*mlEnv).earlierFirst},
	{"DisjointSetsAtOnce", (*mlEnv).disjointAtOnce},
	{"ReleaseAndExtendTheSet", (*mlEnv).releaseExtend},
	{"Validation", (*mlEnv).validation},
	{"ExpiredHolderTakenOver", (*mlEnv).expired},
	{"IndependentOfMutex", (*mlEnv).independent},
}

// RunMultiLock runs the cases of locking several keys at once (package
// multilock) against the set locker h.New makes, one subtest per rule:
// all or nothing, a fence per key strictly increasing, no deadlock
// whatever order the keys are named in, mutual exclusion of overlapping
// sets, one timeout for the whole wait, FIFO across keys (a waiter placed
// earlier goes first on every key it wants), sets with no key in common
// held at once (also while a waiter for an overlapping set is queued),
// release and extend of the whole set, validation before I/O, takeover
// of an expired holding, and independence from the mutex of the same
// key. Failures name the rule.
func RunMultiLock(t *testing.T, h MultiLockHarness) {
	t.Helper()
	if h.New == nil {
		t.Fatal("conformance: MultiLockHarness.New is required")
	}
	timeout := h.CaseTimeout
	if timeout <= 0 {
		timeout = 60 * time.Second
	}
	p := newPace(t, 0, nil)
	for _, c := range multiCases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := kindCaseContext(p, timeout)
			defer cancel()
			tg := h.New(t)
			if tg.Locker == nil {
				t.Fatal("setup: MultiLockTarget.Locker is nil")
			}
			c.run(&mlEnv{t: t, ctx: ctx, tg: tg, prefix: fmt.Sprintf("mlc-%s-%08x:", c.name, rand.Uint32())})
		})
	}
}

type mlEnv struct {
	t      *testing.T
	ctx    context.Context
	tg     MultiLockTarget
	prefix string
}

// key is a key of the case's own.
func (e *mlEnv) key(name string) string { return e.prefix + name }

func (e *mlEnv) set(names ...string) string {
	ks := make([]string, len(names))
	for i, n := range names {
		ks[i] = e.key(n)
	}
	return multilock.Keys(ks...)
}

func (e *mlEnv) keys(names ...string) []string {
	ks := make([]string, len(names))
	for i, n := range names {
		ks[i] = e.key(n)
	}
	return ks
}

// other returns the i-th other view, or the Locker.
func (e *mlEnv) other(i int) MultiLocker {
	if len(e.tg.Others) == 0 {
		return e.tg.Locker
	}
	return e.tg.Others[i%len(e.tg.Others)]
}

func (e *mlEnv) acquire(l MultiLocker, ttl time.Duration, names ...string) syncguard.AcquireResult {
	e.t.Helper()
	r, err := l.Acquire(e.ctx, e.set(names...), ttl)
	if err != nil {
		e.t.Fatalf("acquire %v: %v", names, err)
	}
	return r
}

func (e *mlEnv) mustAcquire(l MultiLocker, ttl time.Duration, names ...string) syncguard.AcquireResult {
	e.t.Helper()
	r := e.acquire(l, ttl, names...)
	if !r.OK {
		e.t.Fatalf("rule: a set whose keys are all free is taken; acquire %v got %+v", names, r)
	}
	return r
}

func (e *mlEnv) fences(l MultiLocker, lockID string) map[string]int64 {
	e.t.Helper()
	fs, err := l.Fences(e.ctx, lockID)
	if err != nil {
		e.t.Fatalf("Fences: %v", err)
	}
	out := map[string]int64{}
	for _, f := range fs {
		n, err := f.Fence.Int64()
		if err != nil {
			e.t.Fatalf("rule: a key's fence is 15 digits; got %q", f.Fence)
		}
		out[strings.TrimPrefix(f.Key, e.prefix)] = n
	}
	return out
}

func (e *mlEnv) release(l MultiLocker, lockID string) syncguard.ReleaseResult {
	e.t.Helper()
	r, err := l.Release(e.ctx, lockID)
	if err != nil {
		e.t.Fatalf("release: %v", err)
	}
	return r
}

func (e *mlEnv) isLocked(l MultiLocker, names ...string) bool {
	e.t.Helper()
	v, err := l.IsLocked(e.ctx, e.set(names...))
	if err != nil {
		e.t.Fatalf("IsLocked: %v", err)
	}
	return v
}

// allOrNothing: a set with one held key takes none of the others.
func (e *mlEnv) allOrNothing() {
	held := e.mustAcquire(e.tg.Locker, time.Minute, "b")
	if r := e.acquire(e.other(0), time.Minute, "a", "b", "c"); r.OK || r.Reason != syncguard.ReasonLocked {
		e.t.Fatalf("rule: a set with a held key is not taken (all or nothing); got %+v", r)
	}
	if e.isLocked(e.tg.Locker, "a") || e.isLocked(e.tg.Locker, "c") {
		e.t.Fatalf("rule: a failed set acquire takes none of its keys (all or nothing); a or c is held")
	}
	a := e.mustAcquire(e.other(0), time.Minute, "a", "c")
	e.release(e.tg.Locker, held.LockID)
	e.release(e.other(0), a.LockID)
	full := e.mustAcquire(e.other(0), time.Minute, "c", "b", "a")
	if !e.isLocked(e.tg.Locker, "a") || !e.isLocked(e.tg.Locker, "b") || !e.isLocked(e.tg.Locker, "c") {
		e.t.Fatalf("rule: a successful set acquire holds every key of the set")
	}
	e.release(e.other(0), full.LockID)
}

// fencePerKey: each key's fence strictly increases over every holding of
// any set containing it; AcquireResult.Fence is the set's largest.
func (e *mlEnv) fencePerKey() {
	last := map[string]int64{}
	for i, set := range [][]string{{"a", "b"}, {"a"}, {"b", "c"}, {"c", "a", "b"}, {"b"}} {
		l := e.other(i)
		r := e.mustAcquire(l, time.Minute, set...)
		fs := e.fences(l, r.LockID)
		if len(fs) != len(set) {
			e.t.Fatalf("rule: Fences gives one fence per key of the set; got %v for %v", fs, set)
		}
		var top int64
		for k, n := range fs {
			if n <= last[k] {
				e.t.Fatalf("rule: a key's fence strictly increases with every holding; %s got %d after %d", k, n, last[k])
			}
			last[k], top = n, max(top, n)
		}
		if f, _ := r.Fence.Int64(); f != top {
			e.t.Fatalf("rule: AcquireResult.Fence is the largest fence of the set; got %d, want %d", f, top)
		}
		e.release(l, r.LockID)
	}
}

// crossedOrder: two callers take {a, b} and {b, a} at once, round after
// round, through multilock.Lock: no error, no deadlock, never both at once.
func (e *mlEnv) crossedOrder() {
	const rounds = 60
	var mu sync.Mutex
	holders := 0
	opts := &syncguard.LockOptions{TTL: 30 * time.Second, Acquisition: syncguard.AcquisitionOptions{Timeout: 20 * time.Second}}
	for r := 0; r < rounds; r++ {
		var wg sync.WaitGroup
		errs := make(chan error, 2)
		for i, order := range [][]string{{"a", "b"}, {"b", "a"}} {
			l := e.tg.Locker
			if i == 1 {
				l = e.other(0)
			}
			wg.Go(func() {
				lease, err := multilock.Lock(e.ctx, l, e.keys(order...), opts)
				if err != nil {
					errs <- fmt.Errorf("round %d: %w", r, err)
					return
				}
				mu.Lock()
				holders++
				both := holders > 1
				mu.Unlock()
				if both {
					errs <- fmt.Errorf("rule: two holders of {a, b} at once (round %d)", r)
				}
				mu.Lock()
				holders--
				mu.Unlock()
				lease.Close()
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			e.t.Fatalf("rule: sets named in any order never deadlock and both get their turn: %v", err)
		}
	}
}

// overlapping: workers lock random overlapping sets; no key ever has two
// holders, and every lock succeeds.
func (e *mlEnv) overlapping() {
	names := []string{"a", "b", "c", "d", "e"}
	var mu sync.Mutex
	held := map[string]bool{}
	opts := &syncguard.LockOptions{TTL: 30 * time.Second, Acquisition: syncguard.AcquisitionOptions{Timeout: 30 * time.Second}}
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for w := range 5 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for i := 0; i < 20; i++ {
				set := slices.Clone(names)
				rng.Shuffle(len(set), func(i, j int) { set[i], set[j] = set[j], set[i] })
				set = set[:1+rng.IntN(3)]
				lease, err := multilock.Lock(e.ctx, e.other(w), e.keys(set...), opts)
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				for _, k := range set {
					if held[k] {
						errs <- fmt.Errorf("rule: a key is held by one set at a time: %s twice", k)
					}
					held[k] = true
				}
				mu.Unlock()
				time.Sleep(time.Millisecond)
				mu.Lock()
				for _, k := range set {
					held[k] = false
				}
				mu.Unlock()
				lease.Close()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		e.t.Fatalf("overlapping sets: %v", err)
	}
}

// oneTimeout: Acquisition.Timeout bounds the whole wait for a set of
// three held keys once, not once per key; the waiter that gave up leaves
// no place behind.
func (e *mlEnv) oneTimeout() {
	var held []syncguard.AcquireResult
	for _, k := range []string{"a", "b", "c"} {
		held = append(held, e.mustAcquire(e.tg.Locker, time.Minute, k))
	}
	// Stretched by the slowdown: at load 30-40 a first attempt had no
	// answer within 1 s (NetworkTimeout, rightly, not AcquisitionTimeout).
	timeout := paceOf(e.ctx).scale(time.Second)
	start := time.Now()
	_, err := multilock.Lock(e.ctx, e.other(0), e.keys("a", "b", "c"), &syncguard.LockOptions{TTL: time.Minute,
		Acquisition: syncguard.AcquisitionOptions{Timeout: timeout}})
	elapsed := time.Since(start)
	if !errors.Is(err, syncguard.ErrAcquisitionTimeout) {
		e.t.Fatalf("rule: a set whose keys stay held fails with AcquisitionTimeout; got %v", err)
	}
	if elapsed < timeout || elapsed > 2*timeout+timeout/2 {
		e.t.Fatalf("rule: one timeout for the whole set (%v), not one per key (%v for 3 keys); the wait took %v: %v", timeout, 3*timeout, elapsed, err)
	}
	for _, h := range held {
		e.release(e.tg.Locker, h.LockID)
	}
	r := e.mustAcquire(e.tg.Locker, time.Minute, "c")
	e.release(e.tg.Locker, r.LockID)
}

// earlierFirst: a waiter for {a, b} queued while a is held comes before a
// later waiter for b alone, although b is free: places agree across keys.
func (e *mlEnv) earlierFirst() {
	holder := e.mustAcquire(e.tg.Locker, time.Minute, "a")
	opts := &syncguard.LockOptions{TTL: time.Minute, Acquisition: syncguard.AcquisitionOptions{Timeout: 20 * time.Second}}
	order := make(chan string, 2)
	first := make(chan *multilock.Lease, 1)
	go func() {
		l, err := multilock.Lock(e.ctx, e.other(0), e.keys("a", "b"), opts)
		if err != nil {
			order <- "ab:" + err.Error()
			first <- nil
			return
		}
		order <- "ab"
		first <- l
	}()
	e.waitQueued(e.tg.Locker, "b")
	second := make(chan *multilock.Lease, 1)
	go func() {
		l, err := multilock.Lock(e.ctx, e.other(1), e.keys("b"), opts)
		if err != nil {
			order <- "b:" + err.Error()
			second <- nil
			return
		}
		order <- "b"
		second <- l
	}()
	time.Sleep(300 * time.Millisecond)
	select {
	case o := <-order:
		e.t.Fatalf("rule: a later waiter does not take a key an earlier-placed waiter wants (b is wanted by the waiter for {a, b}); got %q first", o)
	default:
	}
	if r := e.release(e.tg.Locker, holder.LockID); !r.OK {
		e.t.Fatalf("release: %+v", r)
	}
	if o := <-order; o != "ab" {
		e.t.Fatalf("rule: the waiter placed first gets its set first; got %q", o)
	}
	l1 := <-first
	select {
	case o := <-order:
		e.t.Fatalf("rule: b stays with the holder of {a, b}; the waiter for b got %q", o)
	case <-time.After(100 * time.Millisecond):
	}
	l1.Close()
	if o := <-order; o != "b" {
		e.t.Fatalf("rule: the later waiter gets b after the earlier one; got %q", o)
	}
	if l2 := <-second; l2 != nil {
		l2.Close()
	}
}

// waitQueued waits until a plain attempt on names is refused although
// none of them is held: a waiter is queued for one of them.
func (e *mlEnv) waitQueued(l MultiLocker, names ...string) {
	e.t.Helper()
	for e.ctx.Err() == nil {
		r := e.acquire(l, time.Minute, names...)
		if r.OK {
			e.release(l, r.LockID)
		} else if !e.isLocked(l, names...) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	e.t.Fatalf("the waiter never queued (a free key refused to a plain attempt)")
}

// releaseExtend: Extend moves every key's expiry at once; Release frees
// every key at once; a second release does nothing.
func (e *mlEnv) releaseExtend() {
	r := e.mustAcquire(e.tg.Locker, 5*time.Second, "a", "b", "c")
	x, err := e.other(0).Extend(e.ctx, r.LockID, time.Minute)
	if err != nil || !x.OK || !x.ExpiresAt.After(r.ExpiresAt) {
		e.t.Fatalf("rule: Extend of a live set succeeds and moves its expiry later; got %+v, %v", x, err)
	}
	for _, k := range []string{"a", "b", "c"} {
		info, err := e.tg.Locker.LookupKey(e.ctx, e.set(k))
		if err != nil || info == nil || !info.ExpiresAt.Equal(x.ExpiresAt) {
			e.t.Fatalf("rule: an extend moves every key's expiry at once; key %s: %+v, %v (want %v)", k, info, err, x.ExpiresAt)
		}
	}
	if info, err := e.tg.Locker.LookupID(e.ctx, r.LockID); err != nil || info == nil || info.Fence != r.Fence {
		e.t.Fatalf("rule: LookupID shows the live holding with its largest fence; got %+v, %v", info, err)
	}
	if rr := e.release(e.other(0), r.LockID); !rr.OK {
		e.t.Fatalf("rule: the release of a live set succeeds; got %+v", rr)
	}
	for _, k := range []string{"a", "b", "c"} {
		if e.isLocked(e.tg.Locker, k) {
			e.t.Fatalf("rule: a release frees every key of the set; %s still held", k)
		}
	}
	if rr := e.release(e.tg.Locker, r.LockID); rr.OK {
		e.t.Fatalf("rule: a second release of a set does nothing; got %+v", rr)
	}
	if x, err := e.tg.Locker.Extend(e.ctx, r.LockID, time.Minute); err != nil || x.OK {
		e.t.Fatalf("rule: a released set cannot be extended; got %+v, %v", x, err)
	}
}

// validation: bad sets are InvalidArgument before any I/O.
func (e *mlEnv) validation() {
	l := e.tg.Locker
	if e.tg.Unreachable != nil {
		l = e.tg.Unreachable
	}
	many := make([]string, multilock.MaxKeys+1)
	for i := range many {
		many[i] = fmt.Sprint("k", i)
	}
	bad := map[string]string{
		"empty set":          multilock.Keys(),
		"empty key":          multilock.Keys("a", ""),
		"duplicate key":      multilock.Keys("a", "b", "a"),
		"duplicate in NFC":   multilock.Keys("e\u0301", "\u00e9"),
		"too many keys":      multilock.Keys(many...),
		"too long key":       multilock.Keys(strings.Repeat("x", rules.MaxKeyBytes+1)),
		"NUL in key":         multilock.Keys("a\x00b"),
		"not an encoded set": "a",
	}
	for what, set := range bad {
		_, err := l.Acquire(e.ctx, set, time.Minute)
		if syncguard.CodeOf(err) != syncguard.ErrInvalidArgument {
			e.t.Errorf("rule: a bad set (%s) is InvalidArgument before any I/O; got %v", what, err)
		}
		if _, err := l.IsLocked(e.ctx, set); syncguard.CodeOf(err) != syncguard.ErrInvalidArgument {
			e.t.Errorf("rule: IsLocked of a bad set (%s) is InvalidArgument; got %v", what, err)
		}
	}
	if _, err := multilock.Lock(e.ctx, l, []string{"a", "a"}, nil); syncguard.CodeOf(err) != syncguard.ErrInvalidArgument {
		e.t.Errorf("rule: Lock with a duplicate key is InvalidArgument; got %v", err)
	}
	if _, err := l.Release(e.ctx, "short"); syncguard.CodeOf(err) != syncguard.ErrInvalidArgument {
		e.t.Errorf("rule: a malformed lockId is InvalidArgument; got %v", err)
	}
	if _, err := l.Acquire(e.ctx, multilock.Keys("a"), 0); syncguard.CodeOf(err) != syncguard.ErrInvalidArgument {
		e.t.Errorf("rule: a TTL under 1 ms is InvalidArgument; got %v", err)
	}
}

// expired: a holder that never releases loses its set at expiry (by the
// backend's clock, with the tolerance): a waiter for an overlapping set
// gets it then, not before.
func (e *mlEnv) expired() {
	held := e.mustAcquire(e.tg.Locker, 1500*time.Millisecond, "a", "b")
	lease, err := multilock.Lock(e.ctx, e.other(0), e.keys("b", "c"), &syncguard.LockOptions{TTL: time.Minute,
		Acquisition: syncguard.AcquisitionOptions{Timeout: 20 * time.Second}})
	if err != nil {
		e.t.Fatalf("rule: a crashed holder's keys go to the waiter at their expiry; got %v", err)
	}
	defer lease.Close()
	info, err := e.tg.Locker.LookupID(e.ctx, lease.LockID())
	if err != nil || info == nil {
		e.t.Fatalf("rule: the waiter holds its set; LookupID: %+v, %v", info, err)
	}
	if rules.IsLive(held.ExpiresAt.UnixMilli(), info.AcquiredAt.UnixMilli()) {
		e.t.Errorf("rule: a set is taken over only once the holding is no longer live (expiry + %d ms); acquired at %d, holder expired at %d",
			rules.ToleranceMs, info.AcquiredAt.UnixMilli(), held.ExpiresAt.UnixMilli())
	}
	if r := e.release(e.tg.Locker, held.LockID); r.OK {
		e.t.Errorf("rule: the expired holder's release does nothing; got %+v", r)
	}
}

// independent: the set locker's keys and the mutex's keys of the same
// name do not exclude each other.
func (e *mlEnv) independent() {
	if e.tg.Mutex == nil {
		e.t.Skip("MultiLockTarget.Mutex is not set")
	}
	m, err := e.tg.Mutex.Acquire(e.ctx, e.key("a"), time.Minute)
	if err != nil || !m.OK {
		e.t.Fatalf("mutex acquire: %+v, %v", m, err)
	}
	r := e.acquire(e.tg.Locker, time.Minute, "a", "b")
	if !r.OK {
		e.t.Fatalf("rule: a key held as a mutex does not block the set locker (separate tables); got %+v", r)
	}
	if f := e.fences(e.tg.Locker, r.LockID)["a"]; f != 1 {
		e.t.Errorf("rule: a set's key has its own fence counter, not the mutex's; got fence %d for a fresh key", f)
	}
	m2, err := e.tg.Mutex.Acquire(e.ctx, e.key("b"), time.Minute)
	if err != nil || !m2.OK {
		e.t.Fatalf("rule: a key held through the set locker does not block the mutex of the same name; got %+v, %v", m2, err)
	}
	e.release(e.tg.Locker, r.LockID)
	if rr, err := e.tg.Mutex.Release(e.ctx, m.LockID); err != nil || !rr.OK {
		e.t.Fatalf("rule: the mutex is untouched by the set's release; got %+v, %v", rr, err)
	}
}
