package conformance

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/text/unicode/norm"

	"github.com/syncguard/syncguard-go/internal/rules"
	"github.com/syncguard/syncguard-go/syncguard"
)

// env is what a backend-tier case works with: the Target, a context
// bounded by the case's deadline, and assertion helpers. b and b2 are two
// views of the same locks (two pools for PostgreSQL).
//
// Helpers that end the case (t.Fatalf) are for the case's own goroutine
// only; goroutines a case starts report with t.Errorf and are joined
// before the case returns.
type env struct {
	t     *testing.T
	ctx   context.Context
	tg    Target
	b, b2 syncguard.LockBackend
}

func newEnv(t *testing.T, ctx context.Context, tg Target) *env {
	e := &env{t: t, ctx: ctx, tg: tg, b: tg.Backend, b2: tg.Backend}
	if len(tg.Others) > 0 {
		e.b2 = tg.Others[0]
	}
	return e
}

// backends returns Backend and Others.
func (e *env) backends() []syncguard.LockBackend {
	return append([]syncguard.LockBackend{e.tg.Backend}, e.tg.Others...)
}

// pick returns backend i of backends(), round robin.
func (e *env) pick(i int) syncguard.LockBackend {
	all := e.backends()
	return all[i%len(all)]
}

// nfc is the Unicode NFC form of s, the form keys are stored and hashed in
// (computed here independently of the library under test).
func nfc(s string) string { return norm.NFC.String(s) }

// key returns a fresh key unique to this case.
func (e *env) key(name string) string { return "conformance:" + name + ":" + randHex(6) }

func (e *env) skipUnless(ok bool, hook string) {
	e.t.Helper()
	if !ok {
		e.t.Skipf("needs Target.%s", hook)
	}
}

// --- assertion helpers: each failure names the rule first, then evidence.

func (e *env) must(err error, what string) {
	e.t.Helper()
	if err != nil {
		e.t.Fatalf("rule: %s must not fail; got %v", what, err)
	}
}

func (e *env) acquire(b syncguard.LockBackend, key string, ttl time.Duration) syncguard.AcquireResult {
	e.t.Helper()
	r, err := b.Acquire(e.ctx, key, ttl)
	if err != nil {
		e.t.Fatalf("rule: acquire of a valid key must not fail; key %q: %v", key, err)
	}
	return r
}

func (e *env) mustAcquire(b syncguard.LockBackend, key string, ttl time.Duration) syncguard.AcquireResult {
	e.t.Helper()
	r := e.acquire(b, key, ttl)
	if !r.OK {
		e.t.Fatalf("rule: acquire of a free key succeeds; key %q got OK=false reason %q", key, r.Reason)
	}
	return r
}

// hold acquires a fresh key named after name on the first pool.
func (e *env) hold(name string, ttl time.Duration) (string, syncguard.AcquireResult) {
	e.t.Helper()
	k := e.key(name)
	return k, e.mustAcquire(e.b, k, ttl)
}

// nextFenceAbove acquires key on the second pool, fails the case, naming
// rule, unless its fence is above prev, and releases it.
func (e *env) nextFenceAbove(key string, prev syncguard.Fence, rule string) {
	e.t.Helper()
	n := e.mustAcquire(e.b2, key, 30*time.Second)
	if n.Fence <= prev {
		e.t.Errorf("rule: %s; got %s after %s", rule, n.Fence, prev)
	}
	e.release(e.b2, n.LockID)
}

// reads is what the three reads say of a lock: IsLocked and LookupKey of
// key on the second pool, LookupID of lockID on idPool.
func (e *env) reads(key, lockID string, idPool syncguard.LockBackend) (locked bool, byKey, byID *syncguard.LockInfo) {
	e.t.Helper()
	locked = e.isLocked(e.b2, key)
	byKey, err := e.b2.LookupKey(e.ctx, key)
	e.must(err, "LookupKey")
	byID, err = idPool.LookupID(e.ctx, lockID)
	e.must(err, "LookupID")
	return locked, byKey, byID
}

func (e *env) isLocked(b syncguard.LockBackend, key string) bool {
	e.t.Helper()
	v, err := b.IsLocked(e.ctx, key)
	if err != nil {
		e.t.Fatalf("rule: IsLocked of a valid key must not fail; key %q: %v", key, err)
	}
	return v
}

func (e *env) release(b syncguard.LockBackend, id string) syncguard.ReleaseResult {
	e.t.Helper()
	r, err := b.Release(e.ctx, id)
	if err != nil {
		e.t.Fatalf("rule: release of a well-formed lockId must not fail: %v", err)
	}
	return r
}

func (e *env) extend(b syncguard.LockBackend, id string, ttl time.Duration) syncguard.ExtendResult {
	e.t.Helper()
	r, err := b.Extend(e.ctx, id, ttl)
	if err != nil {
		e.t.Fatalf("rule: extend of a well-formed lockId must not fail: %v", err)
	}
	return r
}

// unchanged takes a snapshot of key's lock; the returned check fails the
// case, naming rule, when the lock is no longer what it was.
func (e *env) unchanged(key string) (check func(rule string)) {
	e.t.Helper()
	before := e.snapshot(key)
	return func(rule string) {
		e.t.Helper()
		if after := e.snapshot(key); after != before {
			e.t.Errorf("rule: %s; lock before %s after %s", rule, before, after)
		}
	}
}

// parallel runs fn on n goroutines, the w-th with pool pick(w), and waits
// for them.
func (e *env) parallel(n int, fn func(w int, b syncguard.LockBackend)) {
	var wg sync.WaitGroup
	for w := range n {
		b := e.pick(w)
		wg.Go(func() { fn(w, b) })
	}
	wg.Wait()
}

// race has n goroutines, the g-th on pools[g%len(pools)], acquire the free
// key at the same moment, and returns the winners. An acquire that fails
// fails the case, naming rule.
func (e *env) race(pools []syncguard.LockBackend, n int, key, rule string) []syncguard.AcquireResult {
	var (
		mu      sync.Mutex
		winners []syncguard.AcquireResult
		wg      sync.WaitGroup
		start   = make(chan struct{})
	)
	for g := range n {
		b := pools[g%len(pools)]
		wg.Go(func() {
			<-start
			r, err := b.Acquire(e.ctx, key, 30*time.Second)
			if err != nil {
				e.t.Errorf("rule: %s; acquire failed: %v", rule, err)
				return
			}
			if r.OK {
				mu.Lock()
				winners = append(winners, r)
				mu.Unlock()
			}
		})
	}
	close(start)
	wg.Wait()
	return winners
}

// snapshot describes the lock on key as a lookup sees it, to tell whether
// an operation changed it.
func (e *env) snapshot(key string) string {
	e.t.Helper()
	info, err := e.b.LookupKey(e.ctx, key)
	if err != nil {
		e.t.Fatalf("rule: LookupKey of a valid key must not fail; key %q: %v", key, err)
	}
	if info == nil {
		return "<no live lock>"
	}
	return fmt.Sprintf("{lock#%s fence %s acquired %d expires %d}", info.LockIDHash, info.Fence, ms(info.AcquiredAt), ms(info.ExpiresAt))
}

// count returns Target.Count, and false without it.
func (e *env) count() (int, bool) {
	e.t.Helper()
	if e.tg.Count == nil {
		return 0, false
	}
	n, err := e.tg.Count(e.ctx)
	if err != nil {
		e.t.Fatalf("setup: Target.Count: %v", err)
	}
	return n, true
}

// fenceNum parses a fence. It reports a malformed fence with t.Errorf (it
// is used from goroutines) and returns -1.
func fenceNum(t testing.TB, f syncguard.Fence) int64 {
	t.Helper()
	n, err := f.Int64()
	if err != nil {
		t.Errorf("rule: fences are 15 decimal digits; got %q", f)
		return -1
	}
	return n
}

// --- the backend's clock, the only clock that decides expiry.

// ms is t in Unix milliseconds, the unit of every stored time.
func ms(t time.Time) int64 { return t.UnixMilli() }

// tolMs is the spec's liveness tolerance: a lock is live while
// expires_at_ms > now_ms - tolMs.
const tolMs = rules.ToleranceMs

// ttlMs is d in whole milliseconds.
func ttlMs(d time.Duration) int64 { return d.Milliseconds() }

// nowMs reads the backend's clock.
func (e *env) nowMs() int64 {
	e.t.Helper()
	if e.tg.Now == nil {
		return ms(time.Now())
	}
	now, err := e.tg.Now(e.ctx)
	if err != nil {
		e.t.Fatalf("setup: reading the backend's clock: %v", err)
	}
	return ms(now)
}

// waitPast returns once the backend's clock has passed t (Unix ms).
func (e *env) waitPast(t int64) {
	e.t.Helper()
	if e.tg.WaitPast != nil {
		if err := e.tg.WaitPast(e.ctx, time.UnixMilli(t)); err != nil {
			e.t.Fatalf("setup: waiting for the backend's clock to pass %d: %v", t, err)
		}
		return
	}
	e.sleepPast(t)
}

// sleepPast sleeps in real time until the backend's clock has passed t,
// for cases about time as it passes for a running process (a lease that
// extends itself), which a jump of a controllable clock would not test.
func (e *env) sleepPast(t int64) {
	e.t.Helper()
	for {
		now := e.nowMs()
		if now > t {
			return
		}
		select {
		case <-time.After(time.Duration(t-now+5) * time.Millisecond):
		case <-e.ctx.Done():
			e.t.Fatalf("setup: the case deadline passed waiting for the backend's clock to pass %d", t)
		}
	}
}

// serverClock estimates the backend's clock from the local one, for
// scheduling only: a case sleeps until about a backend time, then asserts
// on the times the operations themselves report.
type serverClock struct{ offsetMs int64 }

func (e *env) serverClock() serverClock {
	e.t.Helper()
	c0 := time.Now()
	s := e.nowMs()
	c1 := time.Now()
	return serverClock{offsetMs: s - c0.Add(c1.Sub(c0)/2).UnixMilli()}
}

func (c serverClock) now() int64 { return time.Now().UnixMilli() + c.offsetMs }

// sleepUntil sleeps until the estimated backend time reaches ms or ctx ends.
func (c serverClock) sleepUntil(ctx context.Context, ms int64) {
	d := time.Duration(ms-c.now()) * time.Millisecond
	if d <= 0 {
		return
	}
	select {
	case <-time.After(d):
	case <-ctx.Done():
	}
}

// outside tells how far v lies outside [lo, hi] (0 inside).
func outside(v, lo, hi int64) int64 {
	switch {
	case v < lo:
		return v - lo
	case v > hi:
		return v - hi
	}
	return 0
}

// errIs reports whether err matches the sentinel want, for messages.
func errIs(err, want error) bool { return err != nil && errors.Is(err, want) }

// debugLookuper is implemented by backends that also return the raw key
// and lockId of a lock (for debugging).
type debugLookuper interface {
	LookupKeyDebug(ctx context.Context, key string) (*syncguard.LockInfo, error)
	LookupIDDebug(ctx context.Context, lockID string) (*syncguard.LockInfo, error)
}

// keyOps runs every key operation of b once and returns its error by name.
func keyOps(ctx context.Context, b syncguard.LockBackend, key string, ttl time.Duration) map[string]error {
	m := map[string]error{
		"Acquire":   second(b.Acquire(ctx, key, ttl)),
		"IsLocked":  second(b.IsLocked(ctx, key)),
		"LookupKey": second(b.LookupKey(ctx, key)),
	}
	if d, ok := b.(debugLookuper); ok {
		m["LookupKeyDebug"] = second(d.LookupKeyDebug(ctx, key))
	}
	return m
}

// idOps runs every lockId operation of b once and returns its error by name.
func idOps(ctx context.Context, b syncguard.LockBackend, id string, ttl time.Duration) map[string]error {
	m := map[string]error{
		"Release":  second(b.Release(ctx, id)),
		"Extend":   second(b.Extend(ctx, id, ttl)),
		"LookupID": second(b.LookupID(ctx, id)),
	}
	if d, ok := b.(debugLookuper); ok {
		m["LookupIDDebug"] = second(d.LookupIDDebug(ctx, id))
	}
	return m
}

// allOps is keyOps and idOps together.
func allOps(ctx context.Context, b syncguard.LockBackend, key, id string, ttl time.Duration) map[string]error {
	m := keyOps(ctx, b, key, ttl)
	for k, v := range idOps(ctx, b, id, ttl) {
		m[k] = v
	}
	return m
}

func second[T any](_ T, err error) error { return err }

// ownKeys runs workers goroutines, the w-th on pool(w) with a fresh key of
// its own (named after prefix), for rounds rounds while the case runs;
// round reports problems through fail. It returns the first max of them,
// each prefixed with its worker and round.
func (e *env) ownKeys(workers, rounds, max int, prefix string, pool func(w int) syncguard.LockBackend,
	round func(b syncguard.LockBackend, key string, fail func(format string, args ...any))) *failures {
	fs := &failures{max: max}
	var wg sync.WaitGroup
	for w := range workers {
		b, k := pool(w), e.key(fmt.Sprintf("%s%d", prefix, w))
		wg.Go(func() {
			for i := 0; i < rounds && e.ctx.Err() == nil; i++ {
				round(b, k, func(format string, args ...any) {
					fs.add("worker %d round %d: "+format, append([]any{w, i}, args...)...)
				})
			}
		})
	}
	wg.Wait()
	return fs
}

// failures collects what concurrent workers saw go wrong, the first max
// of it, for one error naming the rule at the end.
type failures struct {
	max  int
	mu   sync.Mutex
	list []string
}

func (f *failures) add(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.list) < f.max {
		f.list = append(f.list, fmt.Sprintf(format, args...))
	}
}

func (f *failures) any() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.list) > 0
}

// String lists the failures, one per indented line.
func (f *failures) String() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return strings.Join(f.list, "\n  ")
}
