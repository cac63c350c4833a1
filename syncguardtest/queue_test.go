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

	"github.com/syncguard/syncguard-go/syncguard"
	"github.com/syncguard/syncguard-go/syncguardtest"
)

// lockRound: a holder releases after 100 ms; three Lock waiters, each a
// process of its own, queued 1 ms apart, each holding 10 ms. It returns
// the order they got the key in, and (with identities) the fake time at
// which each got it.
func lockRound(t *testing.T, identity bool) string {
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
			if identity {
				opts.Identity = id
			}
			wg.Go(func() {
				err := syncguard.WithLock(ctx, locks.WithIdentity(id), "k", func(context.Context, *syncguard.Lease) error {
					mu.Lock()
					e := id
					if identity {
						e += "@" + time.Since(start).String()
					}
					got = append(got, e)
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
		if identity {
			// Handed over in the release's step: held by the first waiter.
			if info, _ := locks.LookupKey(ctx, "k"); info == nil || info.Identity != "w0" || info.Fence <= held.Fence {
				t.Errorf("right after the release: %+v, want w0's lock", info)
			}
		}
		wg.Wait()
		out = strings.Join(got, " ")
	})
	return out
}

// TestLockOrderUnderSynctest: three waiters of Lock get the key in the
// order they queued, on every run. With an identity (known to the fake as
// Lock's waiters) each gets it in the very instant of the release before
// it; without one, at its next retry.
func TestLockOrderUnderSynctest(t *testing.T) {
	for i := range runs {
		if got := lockRound(t, false); got != "w0 w1 w2" {
			t.Fatalf("run %d: order %s, want w0 w1 w2", i+1, got)
		}
	}
	const want = "w0@103ms w1@113ms w2@123ms"
	for i := range runs {
		if got := lockRound(t, true); got != want {
			t.Fatalf("run %d with identities: %s, want %s", i+1, got, want)
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
// (3 s), and keeps its place for when it is healed.
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
		if waited := time.Since(released); waited < 2*time.Second || waited > 3*time.Second {
			t.Errorf("a, behind partitioned c, got the key %v after the release; want within c's queue window (3 s)", waited)
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

// wrapper is a Locker of a caller's own that passes ctx on.
type wrapper struct{ syncguard.Locker }

// Through a caller's wrapper that passes ctx on, a waiter keeps its place
// and is handed the key at the release, as on the real backend.
func TestHandOffThroughCallersWrapper(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		locks := syncguardtest.New()
		held, _ := locks.Acquire(ctx, "k", time.Minute)
		got := make(chan *syncguard.Lease, 1)
		go func() {
			l, err := syncguard.Lock(ctx, wrapper{locks.WithIdentity("w")}, "k", &syncguard.LockOptions{Identity: "w"})
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
		if time.Since(released) != 0 || l.Fence() <= held.Fence {
			t.Errorf("through a wrapper: fence %s after %v, want above %s at once", l.Fence(), time.Since(released), held.Fence)
		}
		l.Close()
	})
}
