package conformance

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/syncguard/syncguard-go/syncguard"
)

// RWLockHarness describes a read-write lock under test (package rwlock on
// PostgreSQL, or syncguardtest's fake), for RunRWLock.
type RWLockHarness struct {
	// New returns a fresh target for one case (required); keys of one case
	// never meet another case's.
	New func(t *testing.T) RWLockTarget
	// CaseTimeout bounds every case. Default 60 s.
	CaseTimeout time.Duration
	// Parallel runs the cases in parallel.
	Parallel bool
}

// RWLockTarget is one case's read-write lock: its two sides, both
// syncguard.LockBackend with a queue (Queue).
type RWLockTarget struct {
	Shared, Exclusive syncguard.LockBackend
	// WriterFence returns the key's latest writer fence (required).
	WriterFence func(ctx context.Context, key string) (syncguard.Fence, error)
	// Polling says that no notification reaches the target's waiters (a
	// transaction-mode pooler): they find the key at their next attempt,
	// so a hand-off is not one commit for all; order still holds.
	Polling bool
}

// rwCase is one property of RunRWLock.
type rwCase struct {
	name string
	run  func(e *rwEnv)
}

var rwCases = []rwCase{
	{"ReadersOverlap", rwReadersOverlap},
	{"ReadersHoldTogether", rwReadersHoldTogether},
	{"WriterExcludesAll", rwWriterExcludes},
	{"WriterFences", rwWriterFences},
	{"QueuedWriterBlocksLaterReaders", rwWriterNotStarved},
	{"ReadersAdmittedTogether", rwReadersTogether},
	{"LeavingWriterFreesReaders", rwLeavingWriter},
	{"ExpiryFreesKey", rwExpiry},
	{"LeasesOfBothSides", rwLeases},
	{"InvalidInput", rwInvalid},
}

// RunRWLock runs the read-write lock conformance group: one subtest per
// property; a failure names the rule it breaks ("rule: ...").
func RunRWLock(t *testing.T, h RWLockHarness) {
	t.Helper()
	if h.New == nil {
		t.Fatal("conformance: RWLockHarness.New is required")
	}
	timeout := h.CaseTimeout
	if timeout <= 0 {
		timeout = 60 * time.Second
	}
	p := newPace(t, 0, nil)
	for _, c := range rwCases {
		t.Run(c.name, func(t *testing.T) {
			if h.Parallel {
				t.Parallel()
			}
			ctx, cancel := kindCaseContext(p, timeout)
			defer cancel()
			tg := h.New(t)
			if tg.Shared == nil || tg.Exclusive == nil || tg.WriterFence == nil {
				t.Fatal("setup: RWLockTarget needs Shared, Exclusive and WriterFence")
			}
			c.run(&rwEnv{t: t, ctx: ctx, tg: tg, key: fmt.Sprintf("rw/%s/%d", c.name, time.Now().UnixNano())})
		})
	}
}

type rwEnv struct {
	t   *testing.T
	ctx context.Context
	tg  RWLockTarget
	key string
}

func (e *rwEnv) side(excl bool) syncguard.LockBackend {
	if excl {
		return e.tg.Exclusive
	}
	return e.tg.Shared
}

func (e *rwEnv) acquire(excl bool, ttl time.Duration) (syncguard.AcquireResult, error) {
	return e.side(excl).Acquire(e.ctx, e.key, ttl)
}

func (e *rwEnv) mustAcquire(excl bool, rule string) syncguard.AcquireResult {
	e.t.Helper()
	r, err := e.acquire(excl, time.Minute)
	if err != nil || !r.OK {
		e.t.Fatalf("rule: %s: acquire (exclusive=%v) = %+v, %v", rule, excl, r, err)
	}
	return r
}

func (e *rwEnv) mustBusy(excl bool, rule string) {
	e.t.Helper()
	r, err := e.acquire(excl, time.Minute)
	if err != nil {
		e.t.Fatalf("rule: %s: acquire: %v", rule, err)
	}
	if r.OK {
		e.release(r.LockID)
		e.t.Fatalf("rule: %s: an acquire (exclusive=%v) succeeded", rule, excl)
	}
}

func (e *rwEnv) release(lockID string) {
	e.t.Helper()
	if r, err := e.tg.Shared.Release(e.ctx, lockID); err != nil || !r.OK {
		e.t.Fatalf("rule: a live lease's release succeeds: %+v, %v", r, err)
	}
}

// lock is syncguard.Lock on one side, waiting up to the case's end.
type lockResult struct {
	lease *syncguard.Lease
	err   error
	at    time.Time
}

func (e *rwEnv) lockAsync(ctx context.Context, excl bool) <-chan lockResult {
	ch, _ := e.lockQueued(ctx, excl)
	return ch
}

// lockQueued is lockAsync that also closes queued when the wait's first
// attempt was turned away (the waiter is in the queue).
func (e *rwEnv) lockQueued(ctx context.Context, excl bool) (<-chan lockResult, <-chan struct{}) {
	ch, queued := make(chan lockResult, 1), make(chan struct{})
	var once sync.Once
	go func() {
		l, err := syncguard.Lock(ctx, e.side(excl), e.key, &syncguard.LockOptions{TTL: time.Minute,
			Acquisition: syncguard.AcquisitionOptions{Timeout: 45 * time.Second, RetryDelay: time.Hour, MaxRetries: 1,
				Backoff: "fixed", Jitter: "none"},
			OnAttempt: func(r syncguard.AcquireResult, err error) {
				if err == nil && !r.OK {
					once.Do(func() { close(queued) })
				}
			}})
		ch <- lockResult{l, err, time.Now()}
	}()
	return ch, queued
}

// queued waits until a plain shared acquire is turned away (a waiting
// writer, or a writer's lease, now blocks later readers), releasing any
// it gets.
func (e *rwEnv) waitTurnedAway(rule string) {
	e.t.Helper()
	for {
		r, err := e.acquire(false, time.Minute)
		if err != nil {
			e.t.Fatalf("rule: %s: %v", rule, err)
		}
		if !r.OK {
			return
		}
		e.release(r.LockID)
		select {
		case <-e.ctx.Done():
			e.t.Fatalf("rule: %s: the waiting writer never turned a later reader away", rule)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func (e *rwEnv) get(ch <-chan lockResult, rule string) *syncguard.Lease {
	e.t.Helper()
	select {
	case r := <-ch:
		if r.err != nil {
			e.t.Fatalf("rule: %s: %v", rule, r.err)
		}
		return r.lease
	case <-e.ctx.Done():
		e.t.Fatalf("rule: %s: no lease before the case's deadline", rule)
	}
	return nil
}

func (e *rwEnv) notYet(ch <-chan lockResult, d time.Duration, rule string) {
	e.t.Helper()
	select {
	case r := <-ch:
		if r.lease != nil {
			r.lease.Close()
		}
		e.t.Fatalf("rule: %s: got %v, %v", rule, r.lease != nil, r.err)
	case <-time.After(d):
	}
}

func rwReadersOverlap(e *rwEnv) {
	const rule = "readers overlap: shared leases of one key are held at once"
	var ids []string
	for range 5 {
		ids = append(ids, e.mustAcquire(false, rule).LockID)
	}
	for _, id := range ids {
		e.release(id)
	}
}

// rwReadersHoldTogether: rwReaders readers Lock the key at once, and each,
// once admitted, holds until all are: a lock that admits one reader at a
// time (or fewer than all) never lets them all in, and the case fails at
// a bound only such a bug reaches.
func rwReadersHoldTogether(e *rwEnv) {
	const rule = "readers share: readers that ask at once are all admitted while the others hold (no reader waits for another)"
	const rwReaders = 12
	ctx, cancel := context.WithTimeout(e.ctx, 30*time.Second)
	defer cancel()
	var (
		mu       sync.Mutex
		admitted int
		all      = make(chan struct{})
		wg       sync.WaitGroup
		errs     = make(chan error, rwReaders)
	)
	for range rwReaders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := syncguard.Lock(ctx, e.tg.Shared, e.key, &syncguard.LockOptions{TTL: time.Minute,
				Acquisition: syncguard.AcquisitionOptions{Timeout: 25 * time.Second}})
			if err != nil {
				errs <- err
				return
			}
			defer l.Close()
			mu.Lock()
			if admitted++; admitted == rwReaders {
				close(all)
			}
			mu.Unlock()
			select {
			case <-all:
			case <-ctx.Done():
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		e.t.Errorf("rule: %s: %v", rule, err)
	}
	select {
	case <-all:
	default:
		mu.Lock()
		e.t.Errorf("rule: %s: %d of %d readers admitted at once", rule, admitted, rwReaders)
		mu.Unlock()
	}
}

func rwWriterExcludes(e *rwEnv) {
	w := e.mustAcquire(true, "a free key takes a writer")
	e.mustBusy(false, "a writer's lease turns readers away")
	e.mustBusy(true, "a writer's lease turns writers away")
	e.release(w.LockID)
	r := e.mustAcquire(false, "a released writer frees the key")
	e.mustBusy(true, "a reader's lease turns writers away")
	e.release(r.LockID)
	e.release(e.mustAcquire(true, "a released reader frees the key").LockID)
}

func rwWriterFences(e *rwEnv) {
	const rule = "writer fences strictly increase per key; a reader's fence is the latest writer fence (its writer generation)"
	var last syncguard.Fence
	for i := range 3 {
		w := e.mustAcquire(true, rule)
		if w.Fence <= last {
			e.t.Fatalf("rule: %s: writer %d got fence %s after %s", rule, i, w.Fence, last)
		}
		last = w.Fence
		e.release(w.LockID)
		r := e.mustAcquire(false, rule)
		if r.Fence != last {
			e.t.Fatalf("rule: %s: reader got %s, latest writer fence %s", rule, r.Fence, last)
		}
		if f, err := e.tg.WriterFence(e.ctx, e.key); err != nil || f != last {
			e.t.Fatalf("rule: %s: WriterFence = %s, %v; want %s", rule, f, err, last)
		}
		e.release(r.LockID)
	}
}

func rwWriterNotStarved(e *rwEnv) {
	const rule = "FIFO: a queued writer blocks later readers and gets the key when the readers before it leave"
	r1 := e.mustAcquire(false, rule)
	wch := e.lockAsync(e.ctx, true)
	e.waitTurnedAway(rule)
	rch := e.lockAsync(e.ctx, false)
	e.notYet(rch, 200*time.Millisecond, rule+" (a reader behind the writer was admitted beside the first reader)")
	e.release(r1.LockID)
	w := e.get(wch, rule)
	e.notYet(rch, 200*time.Millisecond, rule+" (a reader overlapped the writer)")
	if _, err := w.Release(e.ctx); err != nil {
		e.t.Fatal(err)
	}
	e.get(rch, rule+" (the reader after the writer)").Close()
}

func rwReadersTogether(e *rwEnv) {
	const rule = "readers queued together are admitted together when the writer before them leaves"
	w := e.mustAcquire(true, rule)
	var chans []<-chan lockResult
	for range 3 {
		ch, queued := e.lockQueued(e.ctx, false)
		chans = append(chans, ch)
		select { // however long a loaded server takes to queue it
		case <-queued:
		case r := <-ch:
			e.t.Fatalf("rule: a reader waits while a writer holds the key; got %v, %v", r.lease, r.err)
		case <-e.ctx.Done():
			e.t.Fatalf("rule: %s: a reader's first attempt did not come back before the case timed out", rule)
		}
	}
	e.release(w.LockID)
	var leases []*syncguard.Lease
	for _, ch := range chans {
		leases = append(leases, e.get(ch, rule))
	}
	var acquired []time.Time
	for _, l := range leases {
		if err := l.Err(); err != nil {
			e.t.Fatalf("rule: %s: %v", rule, err)
		}
		info, err := e.tg.Shared.LookupID(e.ctx, l.LockID())
		if err != nil || info == nil {
			e.t.Fatalf("rule: %s: the readers hold at once: lookup = %v, %v", rule, info, err)
		}
		acquired = append(acquired, info.AcquiredAt)
	}
	// In the writer's release's commit when that release takes the key
	// row alone; when it meets a reader's statement on the row it hints
	// the readers instead, and each takes its lease at its own attempt
	// right after: not at its renewal (half the queue window, 7.5 s on
	// PostgreSQL), a spread only a reader the release missed reaches.
	if !e.tg.Polling {
		first, last := slices.MinFunc(acquired, time.Time.Compare), slices.MaxFunc(acquired, time.Time.Compare)
		if last.Sub(first) > 5*time.Second {
			e.t.Errorf("rule: %s, at once (one commit, or each at its attempt right after the release's hint): admitted at %v", rule, acquired)
		}
	}
	for _, l := range leases {
		l.Close()
	}
}

func rwLeavingWriter(e *rwEnv) {
	const rule = "a waiting writer that gives up frees the readers queued behind it"
	r1 := e.mustAcquire(false, rule)
	wctx, cancel := context.WithCancel(e.ctx)
	wch := e.lockAsync(wctx, true)
	e.waitTurnedAway(rule)
	rch := e.lockAsync(e.ctx, false)
	e.notYet(rch, 200*time.Millisecond, rule+" (before it gives up, the reader waits)")
	cancel()
	if r := <-wch; !errors.Is(r.err, syncguard.ErrAborted) {
		e.t.Fatalf("rule: a cancelled wait ends Aborted: %v", r.err)
	}
	e.get(rch, rule).Close()
	e.release(r1.LockID)
}

func rwExpiry(e *rwEnv) {
	const rule = "a writer's lease that is neither extended nor released ends at its TTL (plus the 1 s tolerance) and the next waiter gets the key"
	w, err := e.acquire(true, 300*time.Millisecond)
	if err != nil || !w.OK {
		e.t.Fatalf("rule: %s: %+v %v", rule, w, err)
	}
	start := time.Now()
	e.get(e.lockAsync(e.ctx, false), rule).Close()
	if d := time.Since(start); d < 300*time.Millisecond {
		e.t.Fatalf("rule: a live writer excludes readers: the reader got in after %v of a 300 ms lease", d)
	}
	if r, err := e.tg.Exclusive.Extend(e.ctx, w.LockID, time.Minute); err != nil || r.OK {
		e.t.Fatalf("rule: an expired lease is never extended: %+v, %v", r, err)
	}
	if r, err := e.tg.Exclusive.Release(e.ctx, w.LockID); err != nil || r.OK {
		e.t.Fatalf("rule: an expired lease's release fails: %+v, %v", r, err)
	}
}

func rwLeases(e *rwEnv) {
	const rule = "syncguard.Lock gives both sides leases with AutoExtend, Extend and Release"
	// a TTL with room for extends delayed by a loaded machine
	opts := &syncguard.LockOptions{TTL: autoExtendTTL(e.ctx), AutoExtend: true}
	var wg sync.WaitGroup
	var rs []*syncguard.Lease
	for range 2 {
		l, err := syncguard.Lock(e.ctx, e.tg.Shared, e.key, opts)
		if err != nil {
			e.t.Fatalf("rule: %s: %v", rule, err)
		}
		rs = append(rs, l)
	}
	time.Sleep(opts.TTL + 1200*time.Millisecond) // past the TTL and its 1 s tolerance: AutoExtend keeps them
	for _, l := range rs {
		if err := l.Err(); err != nil {
			e.t.Fatalf("rule: %s: a reader's lease was lost: %v", rule, err)
		}
	}
	e.mustBusy(true, rule+" (extended readers still exclude writers)")
	for _, l := range rs {
		wg.Add(1)
		go func() { defer wg.Done(); l.Close() }()
	}
	wg.Wait()
	w, err := syncguard.Lock(e.ctx, e.tg.Exclusive, e.key, opts)
	if err != nil {
		e.t.Fatalf("rule: %s: %v", rule, err)
	}
	if r, err := w.Extend(e.ctx, time.Minute); err != nil || !r.OK {
		e.t.Fatalf("rule: %s: Extend %+v %v", rule, r, err)
	}
	if r, err := w.Release(e.ctx); err != nil || !r.OK {
		e.t.Fatalf("rule: %s: Release %+v %v", rule, r, err)
	}
	if r, err := e.tg.Exclusive.Release(e.ctx, w.LockID()); err != nil || r.OK {
		e.t.Fatalf("rule: at most one release of a lease succeeds: %+v, %v", r, err)
	}
}

func rwInvalid(e *rwEnv) {
	const rule = "bad input is InvalidArgument"
	for _, s := range []syncguard.LockBackend{e.tg.Shared, e.tg.Exclusive} {
		if _, err := s.Acquire(e.ctx, "", time.Second); !errors.Is(err, syncguard.ErrInvalidArgument) {
			e.t.Errorf("rule: %s: empty key: %v", rule, err)
		}
		if _, err := s.Acquire(e.ctx, e.key, 0); !errors.Is(err, syncguard.ErrInvalidArgument) {
			e.t.Errorf("rule: %s: ttl 0: %v", rule, err)
		}
		if _, err := s.Release(e.ctx, "nope"); !errors.Is(err, syncguard.ErrInvalidArgument) {
			e.t.Errorf("rule: %s: bad lockId: %v", rule, err)
		}
		if _, err := s.Extend(e.ctx, "nope", time.Second); !errors.Is(err, syncguard.ErrInvalidArgument) {
			e.t.Errorf("rule: %s: bad lockId: %v", rule, err)
		}
	}
}
