package conformance

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/syncguard/syncguard-go/syncguard"
)

// SemaphoreTarget is a counting semaphore under test: a syncguard.Queuer
// (so that syncguard.Lock waits in its queue) whose permits each hold a
// slot, as package semaphore's Semaphore and syncguardtest's Semaphore.
type SemaphoreTarget interface {
	syncguard.Queuer
	// Slot returns the slot (1..permits) of the permit lockID as this
	// target took or was handed it.
	Slot(lockID string) (int, bool)
}

// SemaphoreHarness builds the semaphores of RunSemaphore's cases.
type SemaphoreHarness struct {
	// New starts one case on a store of its own (fresh tables, a fresh
	// fake) and returns how to open semaphores on it: each call of the
	// returned function is another process's semaphore of permits permits
	// per key, on the same store. Required.
	New func(t testing.TB) func(permits int) SemaphoreTarget
	// CaseTimeout bounds every case. Default 60 s.
	CaseTimeout time.Duration
}

// RunSemaphore runs the semaphore group: at most N live holders, a slot
// held by one permit at a time with strictly increasing fences, FIFO
// order, the one-commit hand-off, a free permit kept for the earliest
// waiter, a crashed holder's permit returning at its TTL, the number of
// permits fixed by a key's first acquire, release and extend, and input
// validation. One subtest per property; a failure names the broken rule.
func RunSemaphore(t *testing.T, h SemaphoreHarness) {
	if h.New == nil {
		t.Fatal("conformance: SemaphoreHarness.New is required")
	}
	if h.CaseTimeout <= 0 {
		h.CaseTimeout = 60 * time.Second
	}
	for _, c := range semCases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), h.CaseTimeout)
			defer cancel()
			c.run(&semEnv{t: t, ctx: ctx, open: h.New(t)})
		})
	}
}

type semEnv struct {
	t    *testing.T
	ctx  context.Context
	open func(permits int) SemaphoreTarget
}

var semCases = []struct {
	name string
	run  func(e *semEnv)
}{
	{"AtMostNHolders", (*semEnv).atMostN},
	{"NHoldersAtOnce", (*semEnv).nAtOnce},
	{"FIFOOrder", (*semEnv).fifo},
	{"HandOffInReleaseCommit", (*semEnv).handOff},
	{"FreePermitKeptForEarliestWaiter", (*semEnv).keptForWaiter},
	{"CrashedHolderReturnsAtTTL", (*semEnv).crashed},
	{"PermitsFixedByFirstAcquire", (*semEnv).mismatch},
	{"ReleaseExtendAndLoss", (*semEnv).releaseExtend},
	{"Validation", (*semEnv).validation},
}

// waitOpts: a wait that only a release, a hand-off or an expiry ends
// before timeout (its scheduled retries an hour apart).
func waitOpts(ttl, timeout time.Duration) *syncguard.LockOptions {
	return &syncguard.LockOptions{TTL: ttl, Acquisition: syncguard.AcquisitionOptions{
		RetryDelay: time.Hour, Backoff: "fixed", Jitter: "none", Timeout: timeout}}
}

func (e *semEnv) lock(s SemaphoreTarget, key string, opts *syncguard.LockOptions) (*syncguard.Lease, int) {
	e.t.Helper()
	l, err := syncguard.Lock(e.ctx, s, key, opts)
	if err != nil {
		e.t.Fatalf("Lock: %v", err)
	}
	slot, ok := s.Slot(l.LockID())
	if !ok {
		e.t.Fatalf("rule: a held permit has a slot: Slot(%q) unknown", "lock#")
	}
	return l, slot
}

func (e *semEnv) acquire(s SemaphoreTarget, key string, ttl time.Duration) syncguard.AcquireResult {
	e.t.Helper()
	r, err := s.Acquire(e.ctx, key, ttl)
	if err != nil {
		e.t.Fatalf("Acquire: %v", err)
	}
	return r
}

func fenceOf(t testing.TB, f syncguard.Fence) int64 {
	n, err := f.Int64()
	if err != nil {
		t.Fatalf("rule: a permit's fence is 15 digits: %q: %v", f, err)
	}
	return n
}

// atMostN: 3 permits, 9 callers in 3 processes taking and releasing them
// at once: never more than 3 holders, never two on one slot, each slot's
// fences strictly increasing in the order it was held.
func (e *semEnv) atMostN() {
	const permits, callers, rounds = 3, 9, 8
	procs := []SemaphoreTarget{e.open(permits), e.open(permits), e.open(permits)}
	var (
		live, peak atomic.Int64
		mu         sync.Mutex
		bySlot     = map[int]int64{} // the last fence seen per slot
		holding    = map[int]bool{}
		errs       []string
	)
	opts := &syncguard.LockOptions{TTL: 30 * time.Second, Acquisition: syncguard.AcquisitionOptions{Timeout: 30 * time.Second}}
	var wg sync.WaitGroup
	for c := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := procs[c%len(procs)]
			for range rounds {
				l, err := syncguard.Lock(e.ctx, s, "sem", opts)
				if err != nil {
					mu.Lock()
					errs = append(errs, "Lock: "+err.Error())
					mu.Unlock()
					return
				}
				n := live.Add(1)
				for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
				}
				slot, _ := s.Slot(l.LockID())
				f := fenceOf(e.t, l.Fence())
				mu.Lock()
				if holding[slot] {
					errs = append(errs, fmt.Sprintf("rule: one permit per slot at a time: slot %d held twice", slot))
				}
				if f <= bySlot[slot] {
					errs = append(errs, fmt.Sprintf("rule: a slot's fences strictly increase: slot %d got %d after %d", slot, f, bySlot[slot]))
				}
				holding[slot], bySlot[slot] = true, f
				mu.Unlock()
				time.Sleep(10 * time.Millisecond)
				mu.Lock()
				holding[slot] = false
				mu.Unlock()
				live.Add(-1)
				if r, err := l.Release(e.ctx); err != nil || !r.OK {
					mu.Lock()
					errs = append(errs, fmt.Sprintf("rule: a live permit's release succeeds: %+v, %v", r, err))
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	for _, m := range errs {
		e.t.Error(m)
	}
	if p := peak.Load(); p > permits {
		e.t.Errorf("rule: at most N live holders: %d held a semaphore of %d at once", p, permits)
	}
	if len(bySlot) > permits {
		e.t.Errorf("rule: slots are 1..N: %d slots used for %d permits", len(bySlot), permits)
	}
	e.t.Logf("peak %d holders of %d; slots used %v", peak.Load(), permits, bySlot)
}

// nAtOnce: a semaphore of N admits N holders at once. N callers in
// separate processes each Lock, then wait until all N hold a permit
// before releasing: an implementation that admits fewer than N at once
// never gets there (its last caller waits for a permit that none of the
// others gives back), and the case fails at its timeout
// (SemaphoreHarness.CaseTimeout, 60 s by default: N round trips take
// milliseconds), which only such a bug reaches. Three rounds: on a fresh
// key, on permits released before, and on permits handed over (the
// callers queued behind N holders that then release).
func (e *semEnv) nAtOnce() {
	const permits = 4
	procs := make([]SemaphoreTarget, permits)
	for i := range procs {
		procs[i] = e.open(permits)
	}
	round := func(name string, pre func()) {
		ctx := e.ctx
		var (
			admitted atomic.Int64
			all      = make(chan struct{}) // closed by the N-th holder
			wg       sync.WaitGroup
			mu       sync.Mutex
			leases   []*syncguard.Lease
			errs     []string
		)
		for i := range permits {
			wg.Add(1)
			go func() {
				defer wg.Done()
				l, err := syncguard.Lock(ctx, procs[i], "n-at-once", &syncguard.LockOptions{TTL: 30 * time.Second,
					Acquisition: syncguard.AcquisitionOptions{Timeout: -1}}) // until the case's timeout
				if err != nil {
					mu.Lock()
					errs = append(errs, fmt.Sprintf("caller %d: %v", i, err))
					mu.Unlock()
					return
				}
				mu.Lock()
				leases = append(leases, l)
				mu.Unlock()
				if admitted.Add(1) == permits {
					close(all)
				}
				select {
				case <-all:
				case <-ctx.Done():
				}
			}()
		}
		if pre != nil {
			pre()
		}
		wg.Wait()
		select {
		case <-all:
		default:
			e.t.Fatalf("rule: a semaphore of %d admits %d holders at once (%s): only %d held a permit before the case's timeout; errors: %v",
				permits, permits, name, len(leases), errs)
		}
		for _, l := range leases {
			if r, err := l.Release(e.ctx); err != nil || !r.OK {
				e.t.Fatalf("release: %+v %v", r, err)
			}
		}
	}
	round("a fresh key", nil)
	round("permits released before", nil)
	// the N permits held by others first, the callers queued behind them:
	// each gets its permit by a hand-off
	holders := make([]*syncguard.Lease, 0, permits)
	for range permits {
		l, _ := e.lock(procs[0], "n-at-once", nil)
		holders = append(holders, l)
	}
	round("permits handed over", func() {
		time.Sleep(50 * time.Millisecond) // the callers queue (not required: a release finds them or they find the permit)
		for _, l := range holders {
			if r, err := l.Release(e.ctx); err != nil || !r.OK {
				e.t.Errorf("release: %+v %v", r, err)
			}
		}
	})
}

// fifo: 2 permits held; 5 waiters queue one after another; the holders
// release one by one and each waiter gets a permit in arrival order.
func (e *semEnv) fifo() {
	const permits, waiters = 2, 5
	s := e.open(permits)
	held := []*syncguard.Lease{}
	for range permits {
		l, _ := e.lock(s, "fifo", nil)
		held = append(held, l)
	}
	got := make(chan int, waiters)
	var leases sync.Map
	for i := range waiters {
		queued := make(chan struct{})
		var once sync.Once
		opts := waitOpts(30*time.Second, 30*time.Second)
		opts.OnAttempt = func(syncguard.AcquireResult, error) { once.Do(func() { close(queued) }) }
		w := e.open(permits) // each waiter its own process
		go func() {
			l, err := syncguard.Lock(e.ctx, w, "fifo", opts)
			if err != nil {
				e.t.Errorf("waiter %d: %v", i, err)
				got <- -1
				return
			}
			leases.Store(i, l)
			got <- i
		}()
		select {
		case <-queued:
		case <-e.ctx.Done():
			e.t.Fatal("waiter never attempted")
		}
	}
	order := []int{}
	release := func(l *syncguard.Lease) {
		if r, err := l.Release(e.ctx); err != nil || !r.OK {
			e.t.Fatalf("release: %+v %v", r, err)
		}
	}
	for _, l := range held {
		release(l)
		order = append(order, <-got)
	}
	for len(order) < waiters {
		v, _ := leases.Load(order[len(order)-permits])
		release(v.(*syncguard.Lease))
		order = append(order, <-got)
	}
	for i, w := range order {
		if w != i {
			e.t.Fatalf("rule: waiters get permits in FIFO order: got %v", order)
		}
	}
	leases.Range(func(_, v any) bool { v.(*syncguard.Lease).Close(); return true })
}

// handOff: a release with a queued waiter hands the permit to it in the
// release's commit: a plain Acquire right after the release finds no
// permit, and the waiter holds one.
func (e *semEnv) handOff() {
	s, other := e.open(1), e.open(1)
	h, slot := e.lock(s, "ho", nil)
	w := other.Queue("ho", "", false)
	if r, err := w.Attempt(e.ctx, 30*time.Second); err != nil || r.OK {
		e.t.Fatalf("a waiter of a held permit is refused: %+v %v", r, err)
	}
	if r, err := h.Release(e.ctx); err != nil || !r.OK {
		e.t.Fatalf("release: %+v %v", r, err)
	}
	if r := e.acquire(s, "ho", time.Second); r.OK {
		e.t.Fatal("rule: a release hands its permit to the first waiter in its own commit: a later caller took it")
	}
	r, err := w.Attempt(e.ctx, 30*time.Second)
	if err != nil || !r.OK {
		e.t.Fatalf("rule: a release hands its permit to the first waiter: the waiter's next attempt got %+v %v", r, err)
	}
	if s2, _ := other.Slot(r.LockID); s2 != slot {
		e.t.Errorf("rule: the hand-off passes the released slot: got slot %d, released %d", s2, slot)
	}
	if fenceOf(e.t, r.Fence) <= fenceOf(e.t, h.Fence()) {
		e.t.Errorf("rule: a hand-off's fence is above the releaser's: %s after %s", r.Fence, h.Fence())
	}
}

// keptForWaiter: a crashed holder's permit expires while a waiter is
// queued (and not attempting): a later caller never takes it; the waiter
// does.
func (e *semEnv) keptForWaiter() {
	s, other := e.open(1), e.open(1)
	// The TTL stretches by the slowdown: at load 30-40 the waiter's first
	// attempt came after 500 ms + the 1 s tolerance, to a permit already free.
	crashed := e.acquire(s, "kept", paceOf(e.ctx).scale(500*time.Millisecond))
	if !crashed.OK {
		e.t.Fatal("first acquire failed")
	}
	w := other.Queue("kept", "", false)
	if r, err := w.Attempt(e.ctx, 30*time.Second); err != nil || r.OK {
		e.t.Fatalf("a waiter of a held permit is refused: %+v %v", r, err)
	}
	// past the TTL and the 1 s tolerance: the permit is free
	time.Sleep(time.Until(crashed.ExpiresAt) + 1500*time.Millisecond)
	for range 3 {
		if r := e.acquire(s, "kept", time.Second); r.OK {
			e.t.Fatal("rule: a waiter is never overtaken by a later caller, even when a permit is free")
		}
	}
	if r, err := w.Attempt(e.ctx, 30*time.Second); err != nil || !r.OK {
		e.t.Fatalf("rule: the earliest waiter takes the free permit: %+v %v", r, err)
	} else if fenceOf(e.t, r.Fence) <= fenceOf(e.t, crashed.Fence) {
		e.t.Errorf("rule: fences strictly increase per slot: %s after %s", r.Fence, crashed.Fence)
	}
}

// crashed: a holder that neither extends nor releases: its permit goes to
// a waiter after its TTL plus the 1 s tolerance (server time), not before,
// and within TTL + 2 s.
func (e *semEnv) crashed() {
	const ttl = time.Second
	s, other := e.open(2), e.open(2)
	a := e.acquire(s, "crash", 30*time.Second)
	c := e.acquire(s, "crash", ttl) // the crashed holder
	if !a.OK || !c.OK {
		e.t.Fatal("first acquires failed")
	}
	start := time.Now()
	l, err := syncguard.Lock(e.ctx, other, "crash", waitOpts(30*time.Second, 20*time.Second))
	if err != nil {
		e.t.Fatalf("rule: a crashed holder's permit returns at its TTL: %v", err)
	}
	defer l.Close()
	took := time.Since(start)
	acquiredAt := l.ExpiresAt().Add(-30 * time.Second)
	if acquiredAt.Before(c.ExpiresAt.Add(time.Second)) {
		e.t.Errorf("rule: a permit is live until its expiry plus 1 s (server clock): taken at %v, the crashed holder's expiry %v",
			acquiredAt.Format(time.StampMilli), c.ExpiresAt.Format(time.StampMilli))
	}
	if took > ttl+2*time.Second+time.Second { // one more second: a loaded machine
		e.t.Errorf("rule: a killed holder's permit returns within TTL + 2 s: took %v", took)
	}
	e.t.Logf("crashed holder's permit (TTL %v) returned after %v", ttl, took.Round(time.Millisecond))
}

// mismatch: a key's first acquire fixes its number of permits; an acquire
// through a semaphore of another number fails with InvalidArgument and
// takes nothing.
func (e *semEnv) mismatch() {
	three, two := e.open(3), e.open(2)
	if !e.acquire(three, "n", 30*time.Second).OK {
		e.t.Fatal("first acquire failed")
	}
	_, err := two.Acquire(e.ctx, "n", 30*time.Second)
	if syncguard.CodeOf(err) != syncguard.ErrInvalidArgument {
		e.t.Fatalf("rule: an acquire naming another number of permits fails with InvalidArgument: %v", err)
	}
	if _, err := syncguard.Lock(e.ctx, two, "n", nil); syncguard.CodeOf(err) != syncguard.ErrInvalidArgument {
		e.t.Fatalf("rule: Lock through a semaphore of another number fails at once with InvalidArgument: %v", err)
	}
	for i := range 2 {
		if !e.acquire(three, "n", 30*time.Second).OK {
			e.t.Fatalf("rule: a refused acquire takes nothing: permit %d of 3 not free", i+2)
		}
	}
	if e.acquire(three, "n", 30*time.Second).OK {
		e.t.Fatal("rule: at most N holders: a 4th permit of 3")
	}
}

// releaseExtend: release and extend of a permit; the loss signal of a
// lease that is not extended; AutoExtend keeps it past its TTL.
func (e *semEnv) releaseExtend() {
	s := e.open(1)
	r := e.acquire(s, "rx", 30*time.Second)
	x, err := s.Extend(e.ctx, r.LockID, time.Minute)
	if err != nil || !x.OK || !x.ExpiresAt.After(r.ExpiresAt) {
		e.t.Fatalf("rule: extend moves a live permit's expiry: %+v %v", x, err)
	}
	if rr, err := s.Release(e.ctx, r.LockID); err != nil || !rr.OK {
		e.t.Fatalf("rule: release of a live permit: %+v %v", rr, err)
	}
	if rr, err := s.Release(e.ctx, r.LockID); err != nil || rr.OK || rr.Reason != syncguard.ReasonNotFound {
		e.t.Fatalf("rule: a second release finds nothing (not-found): %+v %v", rr, err)
	}
	if x, err := s.Extend(e.ctx, r.LockID, time.Minute); err != nil || x.OK {
		e.t.Fatalf("rule: a released permit is never extended: %+v %v", x, err)
	}
	short, err := syncguard.Lock(e.ctx, s, "rx", &syncguard.LockOptions{TTL: 300 * time.Millisecond})
	if err != nil {
		e.t.Fatal(err)
	}
	select {
	case <-short.Done():
		if !errors.Is(short.Err(), syncguard.ErrLockLost) {
			e.t.Fatalf("rule: a lost permit's lease ends with ErrLockLost: %v", short.Err())
		}
	case <-e.ctx.Done():
		e.t.Fatal("rule: a permit's lease signals its loss at its TTL")
	}
	time.Sleep(1500 * time.Millisecond) // past the tolerance
	// A TTL with room for extends delayed by a loaded machine (a runner
	// with both cores busy stalls statements for a second), then past its
	// TTL and the 1 s tolerance: only extends keep it held.
	auto, err := syncguard.Lock(e.ctx, s, "rx", &syncguard.LockOptions{TTL: 3 * time.Second, AutoExtend: true})
	if err != nil {
		e.t.Fatalf("rule: an expired permit is free: %v", err)
	}
	defer auto.Close()
	time.Sleep(4200 * time.Millisecond)
	if auto.Err() != nil {
		e.t.Fatalf("rule: AutoExtend keeps a permit: %v", auto.Err())
	}
	if e.acquire(s, "rx", time.Second).OK {
		e.t.Fatal("rule: an auto-extended permit stays held past its TTL")
	}
}

// validation: bad input is InvalidArgument.
func (e *semEnv) validation() {
	s := e.open(1)
	for name, f := range map[string]func() error{
		"empty key": func() error { _, err := s.Acquire(e.ctx, "", time.Second); return err },
		"ttl 0":     func() error { _, err := s.Acquire(e.ctx, "v", 0); return err },
		"lockId":    func() error { _, err := s.Release(e.ctx, "short"); return err },
		"extend":    func() error { _, err := s.Extend(e.ctx, "short", time.Second); return err },
	} {
		if syncguard.CodeOf(f()) != syncguard.ErrInvalidArgument {
			e.t.Errorf("rule: bad input (%s) is InvalidArgument", name)
		}
	}
}
