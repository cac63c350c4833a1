package syncguardtest_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/syncguard/syncguard-go/internal/kit"
	"github.com/syncguard/syncguard-go/syncguard"
	"github.com/syncguard/syncguard-go/syncguardtest"
)

// lockRound: a holder releases after 100 ms; three Lock waiters, each a
// process of its own (a WithIdentity view), queued 1 ms apart, each
// holding 10 ms. It returns the order they got the key in, with the fake
// time at which each got it. With optIdentity, each Lock names its holder
// in LockOptions.Identity ("opt-" and the view's), which its locks carry
// instead of the view's.
func lockRound(t *testing.T, optIdentity bool) string {
	var out string
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		locks := syncguardtest.New()
		start := time.Now()
		held, err := locks.Acquire(ctx, "k", time.Minute)
		if err != nil || !held.OK {
			t.Fatal(held, err)
		}
		var (
			mu  sync.Mutex
			got []string
		)
		var wg sync.WaitGroup
		for i := range 3 {
			id := fmt.Sprintf("w%d", i)
			opts := &syncguard.LockOptions{TTL: 10 * time.Second}
			if optIdentity {
				opts.Identity = "opt-" + id
			}
			wg.Go(func() {
				err := syncguard.WithLock(ctx, locks.WithIdentity(id), "k", func(context.Context, *syncguard.Lease) error {
					mu.Lock()
					got = append(got, id+"@"+time.Since(start).String())
					mu.Unlock()
					time.Sleep(10 * time.Millisecond)
					return nil
				}, opts)
				if err != nil {
					t.Error(id, err)
				}
			})
			time.Sleep(time.Millisecond)
		}
		time.Sleep(100 * time.Millisecond)
		if r, err := locks.Release(ctx, held.LockID); err != nil || !r.OK {
			t.Fatal(r, err)
		}
		// Handed over in the release's step: held by the first waiter.
		want := "w0"
		if optIdentity {
			want = "opt-w0"
		}
		if info, _ := locks.LookupKey(ctx, "k"); info == nil || info.Identity != want || info.Fence <= held.Fence {
			t.Errorf("right after the release: %+v, want %s's lock", info, want)
		}
		wg.Wait()
		out = strings.Join(got, " ")
	})
	return out
}

// TestLockOrderUnderSynctest: three waiters of Lock get the key in the
// order they queued, each in the very instant of the release before it,
// on every run, whether their identity is their view's or Lock's.
func TestLockOrderUnderSynctest(t *testing.T) {
	const want = "w0@103ms w1@113ms w2@123ms"
	for _, opt := range []bool{false, true} {
		for i := range runs {
			if got := lockRound(t, opt); got != want {
				t.Fatalf("run %d (LockOptions.Identity %v): %s, want %s", i+1, opt, got, want)
			}
		}
	}
}

// A crashed holder's lock is not extended; its lease reports the loss,
// and the first waiter takes the key when the lock is no longer live
// (expiry + 1 s tolerance), not before; the waiter behind it comes next.
func TestCrashHandsTheKeyToTheFirstWaiterAtExpiry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		locks := syncguardtest.New()
		holder, err := syncguard.Lock(ctx, locks.WithIdentity("a"), "k", &syncguard.LockOptions{TTL: 3 * time.Second, AutoExtend: true})
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan string, 2)
		for _, id := range []string{"b", "c"} {
			go func() {
				l, err := syncguard.Lock(ctx, locks.WithIdentity(id), "k", &syncguard.LockOptions{TTL: 3 * time.Second, Identity: id,
					Acquisition: syncguard.AcquisitionOptions{Timeout: time.Minute}})
				if err != nil {
					t.Error(id, err)
					got <- id + " failed"
					return
				}
				got <- fmt.Sprintf("%s %v", id, locks.Now().Sub(holder.ExpiresAt()))
				l.Close()
			}()
			time.Sleep(time.Millisecond)
		}
		if !locks.Crash(holder.LockID()) {
			t.Fatal("Crash: no such lock")
		}
		<-holder.Done()
		if !errors.Is(holder.Err(), syncguard.ErrLockLost) {
			t.Errorf("the crashed holder's lease: %v, want ErrLockLost", holder.Err())
		}
		if _, err := holder.Release(ctx); !errors.Is(err, syncguard.ErrServiceUnavailable) {
			t.Errorf("a crashed holder's release: %v, want ServiceUnavailable", err)
		}
		if first := <-got; first != "b 1s" {
			t.Errorf("first: %q, want b at the holder's expiry + 1 s", first)
		}
		if second := <-got; !strings.HasPrefix(second, "c ") {
			t.Errorf("second: %q, want c", second)
		}
	})
}

// A partitioned process cannot reach the database until healed: its
// holder loses its lock at its TTL, which goes to the next waiter; its
// waiter, first in the queue, is skipped once its place is no longer live
// (15 s), and keeps its place for when it is healed.
func TestPartition(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		locks := syncguardtest.New()
		a, b, c := locks.WithIdentity("a"), locks.WithIdentity("b"), locks.WithIdentity("c")
		opts := func(id string) *syncguard.LockOptions {
			return &syncguard.LockOptions{TTL: 5 * time.Second, AutoExtend: true, Identity: id, Acquisition: syncguard.AcquisitionOptions{Timeout: time.Minute}}
		}
		holder, err := syncguard.Lock(ctx, a, "k", opts("a"))
		if err != nil {
			t.Fatal(err)
		}
		a.Partition()
		if _, err := a.IsLocked(ctx, "k"); !errors.Is(err, syncguard.ErrServiceUnavailable) {
			t.Errorf("a partitioned process's call: %v", err)
		}
		if ok, err := b.IsLocked(ctx, "k"); !ok || err != nil {
			t.Errorf("another process: %v, %v; want held", ok, err)
		}
		<-holder.Done()
		if !errors.Is(holder.Err(), syncguard.ErrLockLost) {
			t.Errorf("the partitioned holder's lease: %v, want ErrLockLost", holder.Err())
		}
		lb, err := syncguard.Lock(ctx, b, "k", opts("b"))
		if err != nil {
			t.Fatal(err)
		}
		if since := locks.Now().Sub(holder.ExpiresAt()); since != time.Second {
			t.Errorf("b took the key %v after a's expiry, want 1 s (the tolerance)", since)
		}
		a.Heal()

		// c queues first, then a; c is partitioned: at b's release its
		// place is still live, then a gets the key once it is not.
		lc := make(chan error, 1)
		go func() {
			l, err := syncguard.Lock(ctx, c, "k", opts("c"))
			if err == nil {
				l.Close()
			}
			lc <- err
		}()
		time.Sleep(time.Millisecond)
		la := make(chan *syncguard.Lease, 1)
		go func() {
			l, err := syncguard.Lock(ctx, a, "k", opts("a"))
			if err != nil {
				t.Error(err)
			}
			la <- l
		}()
		time.Sleep(time.Millisecond)
		c.Partition()
		released := time.Now()
		lb.Close()
		l := <-la
		if waited := time.Since(released); waited < 7*time.Second || waited > 15*time.Second {
			t.Errorf("a, behind partitioned c, got the key %v after the release; want when c's queue window (15 s) lapses", waited)
		}
		c.Heal()
		l.Close()
		if err := <-lc; err != nil {
			t.Errorf("c after its partition healed: %v", err)
		}
	})
}

// A waiter that gives up leaves the queue: the next one gets the key at
// the release.
func TestGivingUpLeavesTheQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		locks := syncguardtest.New()
		held, _ := locks.Acquire(ctx, "k", time.Minute)
		opts := func(id string) *syncguard.LockOptions {
			return &syncguard.LockOptions{Identity: id, Acquisition: syncguard.AcquisitionOptions{Timeout: time.Minute}}
		}
		cctx, cancel := context.WithCancel(ctx)
		first := make(chan error, 1)
		go func() {
			_, err := syncguard.Lock(cctx, locks, "k", opts("first"))
			first <- err
		}()
		time.Sleep(time.Millisecond)
		second := make(chan *syncguard.Lease, 1)
		go func() {
			l, err := syncguard.Lock(ctx, locks, "k", opts("second"))
			if err != nil {
				t.Error(err)
			}
			second <- l
		}()
		time.Sleep(time.Millisecond)
		cancel()
		if err := <-first; !errors.Is(err, syncguard.ErrAborted) {
			t.Errorf("the cancelled waiter: %v, want Aborted", err)
		}
		released := time.Now()
		locks.Release(ctx, held.LockID)
		l := <-second
		if time.Since(released) != 0 {
			t.Errorf("the waiter behind one that gave up got the key %v after the release", time.Since(released))
		}
		l.Close()
	})
}

// forwarding is a Locker of a caller's own (tracing, metrics) that
// forwards Queue; polling is one that does not.
type (
	forwarding struct{ kit.Queuer }
	polling    struct{ syncguard.Locker }
)

// Through a caller's wrapper that forwards Queue, a waiter keeps its place
// and is handed the key at the release, as on the real backend; through
// one that does not, Lock polls: its plain attempts find the key at the
// next retry.
func TestHandOffThroughCallersWrapper(t *testing.T) {
	for _, tc := range []struct {
		name string
		wrap func(kit.Queuer) syncguard.Locker
		now  bool
	}{
		{"forwarding Queue", func(q kit.Queuer) syncguard.Locker { return forwarding{q} }, true},
		{"without Queue", func(q kit.Queuer) syncguard.Locker { return polling{q} }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx := context.Background()
				locks := syncguardtest.New()
				held, _ := locks.Acquire(ctx, "k", time.Minute)
				got := make(chan *syncguard.Lease, 1)
				go func() {
					l, err := syncguard.Lock(ctx, tc.wrap(locks.WithIdentity("w")), "k", nil)
					if err != nil {
						t.Error(err)
					}
					got <- l
				}()
				time.Sleep(500 * time.Millisecond)
				released := time.Now()
				locks.Release(ctx, held.LockID)
				l := <-got
				if l == nil {
					return
				}
				if l.Fence() <= held.Fence {
					t.Errorf("fence %s, want above %s", l.Fence(), held.Fence)
				}
				if waited := time.Since(released); tc.now && waited != 0 || !tc.now && (waited == 0 || waited > time.Second) {
					t.Errorf("got the key %v after the release; want %s", waited, map[bool]string{true: "at once", false: "at the next retry (within 1 s)"}[tc.now])
				}
				l.Close()
			})
		})
	}
}

// The seam itself: a queued attempt, the hand-off in the release's step
// with a wake-up, and the waiter's next attempt returning the handed lock
// with its age, its TTL counted from the release.
func TestWaiterHandOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		locks := syncguardtest.New()
		held, _ := locks.Acquire(ctx, "k", time.Minute)
		w := locks.Queue("k", "w", false)
		r, err := w.Attempt(ctx, 10*time.Second)
		if err != nil || r.OK || r.Reason != syncguard.ReasonLocked || r.RetryIn != time.Minute+time.Second {
			t.Fatalf("a contended attempt: %+v, %v; want locked, RetryIn the holder's TTL + 1 s", r, err)
		}
		wake, at := w.Next(time.Time{})
		if renew := at.Sub(time.Now()); wake == nil || renew != 10*time.Second {
			t.Errorf("Next: %v, in %v; want a wake channel, renew in 10 s (two thirds of the queue window)", wake, renew)
		}
		time.Sleep(time.Second)
		released := locks.Now()
		locks.Release(ctx, held.LockID)
		select {
		case <-wake:
		default:
			t.Fatal("the release did not wake the waiter it handed the key to")
		}
		info, _ := locks.LookupKey(ctx, "k")
		if info == nil || info.Identity != "w" || info.Fence <= held.Fence || !info.ExpiresAt.Equal(released.Add(10*time.Second)) {
			t.Fatalf("right after the release: %+v; want w's lock, its TTL from the release", info)
		}
		time.Sleep(2 * time.Second)
		r, err = w.Attempt(ctx, 10*time.Second)
		if err != nil || !r.OK || r.Fence != info.Fence || r.HandedOver != 2*time.Second || !r.ExpiresAt.Equal(info.ExpiresAt) {
			t.Fatalf("the attempt after the hand-off: %+v, %v; want the handed lock (fence %s), HandedOver 2 s", r, err, info.Fence)
		}
		if rel, _ := locks.Release(ctx, r.LockID); !rel.OK {
			t.Errorf("releasing the handed lock: %+v", rel)
		}
	})
}

// A plain Acquire never queues, and a free key with a live waiter queued
// goes to that waiter in the Acquire's step (a holder that expired: nobody
// released it).
func TestPlainAcquireRespectsTheQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		locks := syncguardtest.New()
		held, _ := locks.Acquire(ctx, "k", time.Second)
		w := locks.Queue("k", "w", false)
		if r, _ := w.Attempt(ctx, time.Minute); r.OK || r.RetryIn != 2*time.Second {
			t.Fatalf("a contended attempt: %+v; want locked, RetryIn 2 s", r)
		}
		if r, _ := locks.Acquire(ctx, "k", time.Minute); r.OK {
			t.Fatalf("a plain Acquire of a held key: %+v", r)
		}
		time.Sleep(2 * time.Second) // the holder's lock is no longer live; the waiter's place is
		if r, _ := locks.Acquire(ctx, "k", time.Minute); r.OK || r.Reason != syncguard.ReasonLocked {
			t.Fatalf("a plain Acquire of a free key with a live waiter queued: %+v, want locked", r)
		}
		if info, _ := locks.LookupKey(ctx, "k"); info == nil || info.Identity != "w" || info.Fence <= held.Fence {
			t.Fatalf("after the plain Acquire: %+v, want the waiter's lock", info)
		}
		wake, _ := w.Next(time.Time{})
		select {
		case <-wake:
		default:
			t.Error("the waiter was not woken")
		}
		if r, _ := w.Attempt(ctx, time.Minute); !r.OK || r.HandedOver != 0 {
			t.Errorf("the waiter's attempt: %+v, want the handed lock", r)
		}
	})
}

// A waiter that leaves passes a key handed to it meanwhile on to the next
// live waiter, in the same step.
func TestLeavePassesTheKeyOn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		locks := syncguardtest.New()
		held, _ := locks.Acquire(ctx, "k", time.Minute)
		w1, w2 := locks.Queue("k", "w1", false), locks.Queue("k", "w2", false)
		w1.Attempt(ctx, time.Minute)
		w2.Attempt(ctx, time.Minute)
		locks.Release(ctx, held.LockID)
		if info, _ := locks.LookupKey(ctx, "k"); info == nil || info.Identity != "w1" {
			t.Fatalf("after the release: %+v, want w1's lock", info)
		}
		if err := w1.Leave(ctx); err != nil {
			t.Fatal(err)
		}
		info, _ := locks.LookupKey(ctx, "k")
		if info == nil || info.Identity != "w2" {
			t.Fatalf("after w1 left: %+v, want w2's lock", info)
		}
		wake, _ := w2.Next(time.Time{})
		select {
		case <-wake:
		default:
			t.Error("w2 was not woken")
		}
		if r, _ := w2.Attempt(ctx, time.Minute); !r.OK || r.Fence != info.Fence {
			t.Errorf("w2's attempt: %+v, want the lock w1 passed on", r)
		}
		if locks.Len() != 1 {
			t.Errorf("%d lock records, want 1", locks.Len())
		}
	})
}

// A waiter that stops attempting is skipped once its queue window (15 s)
// passed, and keeps its place: when it attempts again it is first again.
func TestQueueWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		locks := syncguardtest.New()
		held, _ := locks.Acquire(ctx, "k", time.Minute)
		idle, w2, w3 := locks.Queue("k", "idle", false), locks.Queue("k", "w2", false), locks.Queue("k", "w3", false)
		for _, w := range []kit.Wait{idle, w2, w3} {
			w.Attempt(ctx, time.Minute)
		}
		for range 3 { // w2 and w3 renew every 5 s; idle does not
			time.Sleep(5 * time.Second)
			w2.Attempt(ctx, time.Minute)
			w3.Attempt(ctx, time.Minute)
		}
		locks.Release(ctx, held.LockID)
		if info, _ := locks.LookupKey(ctx, "k"); info == nil || info.Identity != "w2" {
			t.Fatalf("after the release: %+v, want w2's lock (idle's place lapsed)", info)
		}
		r2, _ := w2.Attempt(ctx, time.Minute)
		if r, _ := idle.Attempt(ctx, time.Minute); r.OK {
			t.Fatalf("idle's attempt while w2 holds: %+v", r)
		}
		w3.Attempt(ctx, time.Minute)
		locks.Release(ctx, r2.LockID)
		if info, _ := locks.LookupKey(ctx, "k"); info == nil || info.Identity != "idle" {
			t.Fatalf("after w2's release: %+v, want idle's lock (its place kept)", info)
		}
	})
}

// Advance past the holder's expiry hands the key to the first waiter in
// Advance's step.
func TestAdvanceHandsTheKeyOn(t *testing.T) {
	ctx := context.Background()
	locks := syncguardtest.New()
	held, _ := locks.Acquire(ctx, "k", time.Minute)
	w := locks.Queue("k", "w", false)
	w.Attempt(ctx, time.Minute)
	locks.Advance(2 * time.Minute)
	wake, _ := w.Next(time.Time{})
	select {
	case <-wake:
	default:
		t.Fatal("Advance past the holder's expiry did not wake the waiter")
	}
	if r, _ := w.Attempt(ctx, time.Minute); !r.OK || r.Fence <= held.Fence {
		t.Errorf("the waiter's attempt: %+v", r)
	}
}

// With once, and on a WithTx view, a waiter's attempts are plain ones:
// they carry the identity (Queue's, else the view's) but take no place,
// and no release hands them the key.
func TestPlainWaiters(t *testing.T) {
	ctx := context.Background()
	locks := syncguardtest.New()
	for _, tc := range []struct {
		name, identity string
		w              kit.Wait
	}{
		{"once", "w", locks.Queue("k", "w", true)},
		{"WithTx", "w", locks.WithTx(&stubTx{}).Queue("k", "w", false)},
		{"WithTx, the view's identity", "view", locks.WithIdentity("view").WithTx(&stubTx{}).Queue("k", "", false)},
	} {
		held, _ := locks.Acquire(ctx, "k", time.Minute)
		if r, _ := tc.w.Attempt(ctx, time.Minute); r.OK {
			t.Fatalf("%s: attempt of a held key: %+v", tc.name, r)
		}
		if wake, at := tc.w.Next(time.Time{}); wake != nil || time.Until(at) > time.Minute+time.Second {
			t.Errorf("%s: Next %v, in %v; want no wake-up, the holder's expiry (no renewal)", tc.name, wake, time.Until(at))
		}
		locks.Release(ctx, held.LockID)
		if info, _ := locks.LookupKey(ctx, "k"); info != nil {
			t.Fatalf("%s: the release handed the key to a plain waiter: %+v", tc.name, info)
		}
		r, _ := tc.w.Attempt(ctx, time.Minute)
		if info, _ := locks.LookupKey(ctx, "k"); !r.OK || info == nil || info.Identity != tc.identity {
			t.Errorf("%s: attempt of the free key: %+v, %+v; want identity %q", tc.name, r, info, tc.identity)
		}
		locks.Release(ctx, r.LockID)
		if err := tc.w.Leave(ctx); err != nil {
			t.Errorf("%s: Leave: %v", tc.name, err)
		}
	}
}

// An invalid key is reported by the first attempt, with Acquire's error.
func TestQueueInvalidKey(t *testing.T) {
	ctx := context.Background()
	locks := syncguardtest.New()
	_, want := locks.Acquire(ctx, "", time.Minute)
	_, err := locks.Queue("", "", false).Attempt(ctx, time.Minute)
	if err == nil || err.Error() != want.Error() {
		t.Errorf("Attempt of an invalid key: %v, want %v", err, want)
	}
	if err := locks.Queue("", "", false).Leave(ctx); err != nil {
		t.Errorf("Leave before any attempt: %v", err)
	}
}
