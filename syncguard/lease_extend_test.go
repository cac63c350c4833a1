package syncguard_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/syncguard/syncguard-go/syncguard"
	"github.com/syncguard/syncguard-go/syncguardtest"
)

// --- manual Extend, AutoExtend and ended leases; nested Close

// A manual Extend with a shorter TTL than the auto-extender's moves the
// guaranteed lifetime earlier; the auto-extender must reschedule from it
// instead of keeping its old timer (which fired after the lease was lost).
func TestAutoExtendReschedulesAfterShorterManualExtend(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := syncguardtest.New()
		sent := sendTimes(b, syncguardtest.OpExtend)
		start := time.Now()
		l, err := syncguard.Lock(t.Context(), b, "k", &syncguard.LockOptions{TTL: 3 * time.Second, AutoExtend: true, Logger: discardLogger()})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		time.Sleep(200 * time.Millisecond)
		if r, err := l.Extend(t.Context(), 300*time.Millisecond); err != nil || !r.OK {
			t.Fatalf("manual extend: %+v %v", r, err)
		}
		time.Sleep(10 * time.Second)
		if err := l.Err(); err != nil {
			t.Fatalf("the backend is healthy; the lease must not be lost: %v", err)
		}
		times := sent()
		if len(times) < 2 {
			t.Fatalf("want the manual extend and automatic ones, got %v", times)
		}
		// The first automatic extend is due a third of the manual extend's
		// granted lifetime (299ms/3) after it was sent, well before its
		// lostAt (200ms + 299ms - 29.9ms).
		if got, want := times[1].Sub(start), 200*time.Millisecond+299*time.Millisecond/3; got != want {
			t.Fatalf("first automatic extend after the manual one at %v, want %v", got, want)
		}
		for i, g := range gaps(times[1:]) {
			if g != 999666666 {
				t.Errorf("automatic extend %d: a third of the TTL after the previous one, got %v", i+2, g)
			}
		}
	})
}

// A manual Extend with a longer TTL postpones the next automatic extend
// (a third of the current lifetime), which would otherwise shorten it.
func TestAutoExtendReschedulesAfterLongerManualExtend(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := syncguardtest.New()
		sent := sendTimes(b, syncguardtest.OpExtend)
		start := time.Now()
		l, _ := syncguard.Lock(t.Context(), b, "k", &syncguard.LockOptions{TTL: 3 * time.Second, AutoExtend: true, Logger: discardLogger()})
		defer l.Close()
		time.Sleep(200 * time.Millisecond)
		r, err := l.Extend(t.Context(), 30*time.Second)
		if err != nil || !r.OK {
			t.Fatalf("manual extend: %+v %v", r, err)
		}
		time.Sleep(5 * time.Second)
		if n := b.Calls(syncguardtest.OpExtend); n != 1 || l.Err() != nil || !serverExpiry(t, b, l.LockID()).Equal(r.ExpiresAt) {
			t.Fatalf("no automatic extend before a third of the 30s lifetime: %d extends, Err %v", n, l.Err())
		}
		time.Sleep(10 * time.Second)
		times := sent()
		if len(times) < 2 || times[1].Sub(start) != 200*time.Millisecond+29999*time.Millisecond/3 {
			t.Fatalf("automatic extend a third of the manual lifetime after it: %v", times)
		}
		if l.Err() != nil {
			t.Fatal(l.Err())
		}
	})
}

// An automatic extend that waited for a manual one in flight supersedes
// it: if it fails, the extender retries after the retry delay rather than
// on the manual extend's (stale) schedule.
func TestAutoExtendFailureAfterManualExtendKeepsRetryDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := syncguardtest.New()
		b.SetLatency(50 * time.Millisecond)
		start := time.Now()
		l, _ := syncguard.Lock(t.Context(), b, "k", &syncguard.LockOptions{TTL: 3 * time.Second, AutoExtend: true, Logger: discardLogger()})
		defer l.Close()
		var n atomic.Int32
		var mu sync.Mutex
		var times []time.Time // when the extends that reached the server were sent
		b.SetHook(func(_ context.Context, c syncguardtest.Call) error {
			if c.Op != syncguardtest.OpExtend {
				return nil
			}
			if n.Add(1) == 2 { // the automatic extend after the manual one
				return &syncguard.Error{Op: string(c.Op), Code: syncguard.ErrServiceUnavailable}
			}
			mu.Lock()
			defer mu.Unlock()
			times = append(times, time.Now())
			return nil
		})
		time.Sleep(950*time.Millisecond - time.Since(start))
		// In flight from 950ms to 1050ms, across the automatic extend due at
		// ~1000ms (acquire sent at 0 + 999.67ms), which waits for it.
		if r, err := l.Extend(t.Context(), 3*time.Second); err != nil || !r.OK {
			t.Fatalf("manual extend: %+v %v", r, err)
		}
		time.Sleep(time.Second)
		// Automatic extend fails at 1050ms; retried 300ms later (sent at
		// 1350ms), not at the manual extend's 950ms + 999.67ms.
		mu.Lock()
		got := append([]time.Time(nil), times...)
		mu.Unlock()
		if len(got) != 2 || got[0].Sub(start) != 950*time.Millisecond || got[1].Sub(start) != 1350*time.Millisecond {
			t.Fatalf("extends sent at %v (from start %v)", got, start)
		}
		if l.Err() != nil {
			t.Fatal(l.Err())
		}
	})
}

// Close (or Release) from inside OnReleaseError must not deadlock.
func TestLeaseCloseInsideOnReleaseError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := syncguardtest.New()
		down := failOp(syncguardtest.OpRelease, &syncguard.Error{Op: "release", Code: syncguard.ErrServiceUnavailable})
		var l *syncguard.Lease
		calls := 0
		l, _ = syncguard.Lock(t.Context(), b, "k", &syncguard.LockOptions{OnReleaseError: func(err error, info syncguard.ReleaseErrorInfo) {
			calls++
			l.Close() // nested: a no-op, must return
			b.SetHook(nil)
			if r, err := l.Release(context.Background()); err != nil || !r.OK {
				t.Errorf("Release from the callback retries the release: %+v %v", r, err)
			}
		}})
		b.SetHook(down)
		l.Close()
		l.Close()
		if calls != 1 || !errors.Is(l.Err(), syncguard.ErrLeaseReleased) || b.Calls(syncguardtest.OpRelease) != 1 {
			t.Fatalf("callbacks %d, Err %v, releases %d", calls, l.Err(), b.Calls(syncguardtest.OpRelease))
		}
	})
}

func TestWithLockCloseInsideOnReleaseError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := syncguardtest.New()
		var lease *syncguard.Lease
		calls := 0
		err := syncguard.WithLock(t.Context(), b, "k", func(ctx context.Context, l *syncguard.Lease) error {
			lease = l
			b.SetHook(failOp(syncguardtest.OpRelease, &syncguard.Error{Op: "release", Code: syncguard.ErrServiceUnavailable}))
			return nil
		}, &syncguard.LockOptions{AutoExtend: true, OnReleaseError: func(error, syncguard.ReleaseErrorInfo) {
			calls++
			lease.Close()
		}})
		if err != nil || calls != 1 {
			t.Fatalf("err %v, callbacks %d", err, calls)
		}
	})
}

// Once a lease has ended, Extend fails without I/O with an error wrapping
// Err, and never reports OK.
func TestExtendOnEndedLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := syncguardtest.New()
		l, _ := syncguard.Lock(t.Context(), b, "k", &syncguard.LockOptions{TTL: time.Second})
		defer l.Close()
		<-l.Done() // lost: never extended
		if d, _ := b.LookupIDDebug(t.Context(), l.LockID()); d == nil {
			t.Fatal("the row is still live on the server (the lease is lost before the server-side expiry)")
		}
		r, err := l.Extend(t.Context(), time.Minute)
		if r.OK || !errors.Is(err, syncguard.ErrLockLost) || !errors.Is(err, syncguard.ErrInvalidArgument) || b.Calls(syncguardtest.OpExtend) != 0 {
			t.Fatalf("Extend on a lost lease: %+v %v, %d extends", r, err, b.Calls(syncguardtest.OpExtend))
		}
		if !errors.Is(l.Err(), syncguard.ErrLockLost) {
			t.Fatalf("Err stays lost: %v", l.Err())
		}

		l2, _ := syncguard.Lock(t.Context(), b, "k2", nil)
		l2.Close()
		r, err = l2.Extend(t.Context(), time.Minute)
		if r.OK || !errors.Is(err, syncguard.ErrLeaseReleased) || b.Calls(syncguardtest.OpExtend) != 0 {
			t.Fatalf("Extend on a released lease: %+v %v, %d extends", r, err, b.Calls(syncguardtest.OpExtend))
		}
	})
}

// A lease that ends while a manual extend is in flight: the extend does not
// report OK, and the lease stays ended.
func TestExtendLeaseEndsWhileInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := syncguardtest.New()
		l, _ := syncguard.Lock(t.Context(), b, "k", &syncguard.LockOptions{TTL: time.Second})
		defer l.Close()
		time.Sleep(800 * time.Millisecond)
		b.SetLatency(200 * time.Millisecond) // the watchdog fires (at ~899ms) mid-flight
		r, err := l.Extend(t.Context(), time.Minute)
		if b.Calls(syncguardtest.OpExtend) != 1 {
			t.Fatal("the extend ran on the server")
		}
		if r.OK || !errors.Is(err, syncguard.ErrLockLost) || !errors.Is(l.Err(), syncguard.ErrLockLost) {
			t.Fatalf("an extend answered after the lease ended: %+v %v; Err %v", r, err, l.Err())
		}
	})
}
