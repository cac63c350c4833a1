package syncguard

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// --- handle: release and close

func TestLeaseCloseIsIdempotent(t *testing.T) {
	f := NewFakeBackend()
	l, err := Lock(context.Background(), f, "k", nil)
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	l.Close()
	l.Close()
	if n := f.Calls("release"); n != 1 {
		t.Fatalf("Close releases at most once; %d releases ran", n)
	}
	r, err := l.Release(context.Background())
	if err != nil || !r.OK || f.Calls("release") != 1 {
		t.Fatalf("Release after Close returns the first result without I/O; got %+v %v, %d releases", r, err, f.Calls("release"))
	}
	if !errors.Is(l.Err(), ErrLeaseReleased) {
		t.Fatalf("Err after release: %v", l.Err())
	}
	select {
	case <-l.Done():
	default:
		t.Fatal("Done must be closed after release")
	}
}

func TestLeaseConcurrentCloseWaitsForTheOneRelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := NewFakeBackend()
		l, err := Lock(t.Context(), f, "k", nil)
		if err != nil {
			t.Fatal(err)
		}
		f.Latency = 10 * time.Millisecond // the release takes 20ms
		start := time.Now()
		var wg sync.WaitGroup
		for range 10 {
			wg.Go(func() {
				l.Close()
				if el := time.Since(start); el != 20*time.Millisecond {
					t.Errorf("every Close returns once the release finished (20ms), this one at %v", el)
				}
			})
		}
		wg.Wait()
		if n := f.Calls("release"); n != 1 {
			t.Fatalf("10 concurrent Closes must release once, got %d", n)
		}
	})
}

func TestLeaseCloseWaitsForReleaseInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := NewFakeBackend()
		l, _ := Lock(t.Context(), f, "k", nil)
		f.Latency = 10 * time.Millisecond
		start := time.Now()
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, _ = l.Release(context.Background())
		}()
		time.Sleep(5 * time.Millisecond)
		l.Close()
		<-done
		if el := time.Since(start); el != 20*time.Millisecond || f.Calls("release") != 1 {
			t.Fatalf("Close during a release waits for it (20ms) without a second release; returned at %v after %d releases", el, f.Calls("release"))
		}
	})
}

func TestLeaseCloseErrorGoesToOnReleaseError(t *testing.T) {
	f := NewFakeBackend()
	var calls []ReleaseErrorInfo
	l, _ := Lock(context.Background(), f, "k", &LockOptions{OnReleaseError: func(err error, info ReleaseErrorInfo) {
		requireCode(t, err, CodeServiceUnavailable)
		calls = append(calls, info)
	}})
	f.SetFail(func(context.Context, string) error {
		return &Error{Op: "release", Code: CodeServiceUnavailable}
	})
	l.Close()
	l.Close()
	if len(calls) != 1 || calls[0].Source != releaseSourceClose || calls[0].LockID != l.LockID() {
		t.Fatalf("one callback with source %q; got %+v", releaseSourceClose, calls)
	}
	if l.Err() != nil {
		t.Fatalf("a failed release does not end the lease: %v", l.Err())
	}
	// An explicit Release may try again.
	f.SetFail(nil)
	if r, err := l.Release(context.Background()); err != nil || !r.OK {
		t.Fatalf("Release after a failed release retries: %+v %v", r, err)
	}
}

func TestLeaseCloseDetachedFromAcquireCancellation(t *testing.T) {
	f := NewFakeBackend()
	ctx, cancel := context.WithCancel(context.Background())
	l, _ := Lock(ctx, f, "k", nil)
	cancel()
	l.Close()
	if locked, _ := f.IsLocked(context.Background(), "k"); locked {
		t.Fatal("Close must release even when the acquire's ctx is cancelled")
	}
}

func TestLeaseReleaseWaitRespectsContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := NewFakeBackend()
		l, _ := Lock(t.Context(), f, "k", nil)
		f.Latency = time.Second
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, _ = l.Release(context.Background())
		}()
		time.Sleep(time.Millisecond)
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Millisecond)
		defer cancel()
		_, err := l.Release(ctx)
		requireCode(t, err, CodeNetworkTimeout)
		<-done
	})
}

func TestFailedLockYieldsNoLeaseAndNoLaterIO(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := NewFakeBackend()
		hold(t, f, "k")
		l, err := Lock(t.Context(), f, "k", &LockOptions{AutoExtend: true, Acquisition: AcquisitionOptions{MaxRetries: -1}})
		if l != nil || err == nil {
			t.Fatalf("a failed acquire yields no lease: %v %v", l, err)
		}
		time.Sleep(time.Hour)
		if f.Calls("release")+f.Calls("extend") != 0 {
			t.Fatal("a failed acquire must make no I/O later")
		}
	})
}

// --- loss and timing

func TestScheduleFromSendTime(t *testing.T) {
	sent := time.Unix(1000, 0)
	lostAt, extendAt := schedule(sent, 30*time.Second)
	// granted 29.999s, margin min(2.9999s, 1s) = 1s
	if got := lostAt.Sub(sent); got != 28999*time.Millisecond {
		t.Errorf("lostAt: sent + ttl - 1ms - 1s margin = 28.999s, got %v", got)
	}
	if got := extendAt.Sub(sent); got != 9999666666*time.Nanosecond {
		t.Errorf("extendAt: a third of the granted lifetime, got %v", got)
	}
	lostAt, _ = schedule(sent, time.Second)
	if got := lostAt.Sub(sent); got != 999*time.Millisecond-99900*time.Microsecond {
		t.Errorf("short ttl margin is a tenth: got %v", got)
	}
}

func TestLeaseWithoutAutoExtendReportsLossBeforeExpiry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := NewFakeBackend()
		f.Latency = 50 * time.Millisecond
		l, err := Lock(t.Context(), f, "k", &LockOptions{TTL: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		<-l.Done()
		if !errors.Is(l.Err(), ErrLockLost) {
			t.Fatalf("Err: %v", l.Err())
		}
		serverExpiry := f.ExpiresAt(l.LockID())
		if !time.Now().Before(serverExpiry) {
			t.Fatalf("loss must be reported before the server-side expiry %v; reported at %v", serverExpiry, time.Now())
		}
		if f.Calls("extend") != 0 {
			t.Fatal("no extension without AutoExtend")
		}
	})
}

func TestAutoExtendKeepsLockPastTTL(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := NewFakeBackend()
		f.Latency = 20 * time.Millisecond
		const ttl = 3 * time.Second
		err := WithLock(t.Context(), f, "k", func(ctx context.Context, l *Lease) error {
			first := l.ExpiresAt()
			time.Sleep(10 * ttl)
			if ctx.Err() != nil || l.Err() != nil {
				t.Errorf("fn's context must stay live while extensions succeed: %v %v", context.Cause(ctx), l.Err())
			}
			if locked, _ := f.IsLocked(context.Background(), "k"); !locked {
				t.Error("the key must still be locked after 10 TTLs")
			}
			if !l.ExpiresAt().After(first.Add(9 * ttl)) {
				t.Errorf("ExpiresAt must follow the extensions: first %v now %v", first, l.ExpiresAt())
			}
			return nil
		}, &LockOptions{TTL: ttl, AutoExtend: true})
		if err != nil {
			t.Fatal(err)
		}
		// Each extend is sent a third of the lifetime (999.666ms) after
		// the previous request was sent; requests take 40ms round trip and
		// run on the server 20ms after they are sent.
		times := f.Times("extend")
		if len(times) < 29 || len(times) > 31 {
			t.Fatalf("want an extend every ~1s over 30s, got %d", len(times))
		}
		for i, g := range gaps(times) {
			if g != 999666666 {
				t.Errorf("extend %d: sent a third of the granted lifetime after the previous one, got %v", i+1, g)
			}
		}
		extends := f.Calls("extend")
		time.Sleep(time.Minute)
		if f.Calls("extend") != extends {
			t.Error("extension must stop when the lease is released")
		}
		if locked, _ := f.IsLocked(context.Background(), "k"); locked {
			t.Error("released after fn")
		}
	})
}

// lostCase runs fn under WithLock with AutoExtend and a 3s TTL, calls
// sabotage at its start, and waits for fn's context to end. It returns the
// cause, when it came, and the server-side expiry of the acquire (no
// extension succeeds after the sabotage).
func lostCase(t *testing.T, f *FakeBackend, sabotage func(l *Lease)) (cause error, at, serverExpiry time.Time, l *Lease) {
	t.Helper()
	err := WithLock(t.Context(), f, "k", func(ctx context.Context, lease *Lease) error {
		l = lease
		sabotage(lease)
		serverExpiry = lease.ExpiresAt()
		select {
		case <-ctx.Done():
		case <-time.After(time.Hour):
			t.Fatal("fn's context was never cancelled")
		}
		at, cause = time.Now(), context.Cause(ctx)
		return nil
	}, &LockOptions{TTL: 3 * time.Second, AutoExtend: true, Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(cause, ErrLockLost) || !errors.Is(l.Err(), ErrLockLost) {
		t.Fatalf("the cause must be ErrLockLost; ctx cause %v, lease Err %v", cause, l.Err())
	}
	if !at.Before(serverExpiry) {
		t.Fatalf("fn's context must be cancelled before the server-side expiry %v; was at %v", serverExpiry, at)
	}
	return cause, at, serverExpiry, l
}

func TestAutoExtendLossWhenRowDeleted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := NewFakeBackend()
		start := time.Now()
		cause, at, _, _ := lostCase(t, f, func(l *Lease) { f.Delete(l.LockID()) })
		if !strings.Contains(cause.Error(), "gone") || at.Sub(start) != 999666666 {
			t.Fatalf("loss is detected by the first extend (at 999.67ms): %v at %v", cause, at.Sub(start))
		}
	})
}

func TestAutoExtendLossWhenRowExpired(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := NewFakeBackend()
		cause, _, _, _ := lostCase(t, f, func(l *Lease) { f.Expire(l.LockID()) })
		if !strings.Contains(cause.Error(), "expired") {
			t.Fatalf("the cause says the lock expired: %v", cause)
		}
	})
}

func TestAutoExtendLossWhenExtendsKeepFailing(t *testing.T) {
	for _, latency := range []time.Duration{0, 100 * time.Millisecond, 400 * time.Millisecond} {
		t.Run(latency.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := NewFakeBackend()
				f.Latency = latency
				down := &Error{Op: "extend", Code: CodeServiceUnavailable, Msg: "down"}
				cause, at, serverExpiry, l := lostCase(t, f, func(*Lease) {
					f.SetFail(func(_ context.Context, op string) error {
						if op == "extend" {
							return down
						}
						return nil
					})
				})
				if !errors.Is(cause, ErrServiceUnavailable) {
					t.Errorf("the cause carries the last extend error: %v", cause)
				}
				// Lost at sent + granted - margin: well before expiry, but
				// not absurdly early either.
				if early := serverExpiry.Sub(at); early > 2*latency+400*time.Millisecond {
					t.Errorf("declared lost %v before the server-side expiry; more than latency + margin", early)
				}
				f.SetFail(nil)
				if r, err := l.Release(context.Background()); err != nil || !r.OK {
					// The server still holds the lock: WithLock released it,
					// so this second call returns the cached result.
					t.Errorf("release after loss: %+v %v", r, err)
				}
			})
		})
	}
}

func TestAutoExtendHangingExtendCutAtDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := NewFakeBackend()
		lostCase(t, f, func(*Lease) {
			f.SetFail(func(ctx context.Context, op string) error {
				if op == "extend" {
					<-ctx.Done()
					return fromContext(ctx, op, nil)
				}
				return nil
			})
		})
	})
}

func TestAutoExtendRetriesTransientFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := NewFakeBackend()
		failures := 0
		err := WithLock(t.Context(), f, "k", func(ctx context.Context, l *Lease) error {
			f.SetFail(func(_ context.Context, op string) error {
				if op == "extend" && failures < 3 {
					failures++
					return &Error{Op: op, Code: CodeNetworkTimeout}
				}
				return nil
			})
			time.Sleep(10 * time.Second)
			if ctx.Err() != nil {
				t.Errorf("three failed extends within the lifetime are retried, not a loss: %v", context.Cause(ctx))
			}
			return nil
		}, &LockOptions{TTL: 3 * time.Second, AutoExtend: true, Logger: discardLogger()})
		if err != nil || failures != 3 {
			t.Fatalf("err %v failures %d", err, failures)
		}
	})
}

func TestAutoExtendStopsWhenAcquireContextEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := NewFakeBackend()
		ctx, cancel := context.WithCancel(t.Context())
		l, _ := Lock(ctx, f, "k", &LockOptions{TTL: 3 * time.Second, AutoExtend: true})
		defer l.Close()
		time.Sleep(1500 * time.Millisecond)
		cancel()
		<-l.Done()
		if n := f.Calls("extend"); n != 1 || !errors.Is(l.Err(), ErrLockLost) {
			t.Fatalf("auto-extension stops with the acquire's ctx; %d extends, Err %v", n, l.Err())
		}
	})
}

func TestManualExtend(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := NewFakeBackend()
		l, _ := Lock(t.Context(), f, "k", &LockOptions{TTL: time.Second})
		defer l.Close()
		time.Sleep(500 * time.Millisecond)
		r, err := l.Extend(t.Context(), 10*time.Second)
		if err != nil || !r.OK || !l.ExpiresAt().Equal(r.ExpiresAt) {
			t.Fatalf("extend: %+v %v; lease expiry %v", r, err, l.ExpiresAt())
		}
		time.Sleep(5 * time.Second)
		if l.Err() != nil {
			t.Fatalf("a manual extend moves the guaranteed lifetime: %v", l.Err())
		}
		f.Delete(l.LockID())
		if r, err := l.Extend(t.Context(), time.Second); err != nil || r.OK || !errors.Is(l.Err(), ErrLockLost) {
			t.Fatalf("an extend that finds the lock gone ends the lease as lost: %+v %v %v", r, err, l.Err())
		}
	})
}

func TestLeaseContextCancelledOnRelease(t *testing.T) {
	f := NewFakeBackend()
	l, _ := Lock(context.Background(), f, "k", nil)
	ctx, cancel := l.Context(context.Background())
	defer cancel()
	l.Close()
	<-ctx.Done()
	if !errors.Is(context.Cause(ctx), ErrLeaseReleased) {
		t.Fatalf("cause %v", context.Cause(ctx))
	}
}

// --- manual Extend, AutoExtend and ended leases; nested Close

// A manual Extend with a shorter TTL than the auto-extender's moves the
// guaranteed lifetime earlier; the auto-extender must reschedule from it
// instead of keeping its old timer (which fired after the lease was lost).
func TestAutoExtendReschedulesAfterShorterManualExtend(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := NewFakeBackend()
		start := time.Now()
		l, err := Lock(t.Context(), f, "k", &LockOptions{TTL: 3 * time.Second, AutoExtend: true, Logger: discardLogger()})
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
		times := f.Times("extend")
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
		f := NewFakeBackend()
		start := time.Now()
		l, _ := Lock(t.Context(), f, "k", &LockOptions{TTL: 3 * time.Second, AutoExtend: true, Logger: discardLogger()})
		defer l.Close()
		time.Sleep(200 * time.Millisecond)
		r, err := l.Extend(t.Context(), 30*time.Second)
		if err != nil || !r.OK {
			t.Fatalf("manual extend: %+v %v", r, err)
		}
		time.Sleep(5 * time.Second)
		if n := f.Calls("extend"); n != 1 || l.Err() != nil || !f.ExpiresAt(l.LockID()).Equal(r.ExpiresAt) {
			t.Fatalf("no automatic extend before a third of the 30s lifetime: %d extends, Err %v", n, l.Err())
		}
		time.Sleep(10 * time.Second)
		times := f.Times("extend")
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
		f := NewFakeBackend()
		f.Latency = 50 * time.Millisecond
		start := time.Now()
		l, _ := Lock(t.Context(), f, "k", &LockOptions{TTL: 3 * time.Second, AutoExtend: true, Logger: discardLogger()})
		defer l.Close()
		var n atomic.Int32
		f.SetFail(func(_ context.Context, op string) error {
			if op == "extend" && n.Add(1) == 2 { // the automatic extend after the manual one
				return &Error{Op: op, Code: CodeServiceUnavailable}
			}
			return nil
		})
		time.Sleep(950*time.Millisecond - time.Since(start))
		// In flight from 950ms to 1050ms, across the automatic extend due at
		// ~1000ms (acquire sent at 0 + 999.67ms), which waits for it.
		if r, err := l.Extend(t.Context(), 3*time.Second); err != nil || !r.OK {
			t.Fatalf("manual extend: %+v %v", r, err)
		}
		time.Sleep(time.Second)
		// Automatic extend fails at 1050ms; retried 300ms later (runs on the
		// server at 1400ms), not at the manual extend's 950ms + 999.67ms.
		times := f.Times("extend")
		if len(times) != 2 || times[0].Sub(start) != time.Second || times[1].Sub(start) != 1400*time.Millisecond {
			t.Fatalf("extends ran at %v (from start %v)", times, start)
		}
		if l.Err() != nil {
			t.Fatal(l.Err())
		}
	})
}

// Close (or Release) from inside OnReleaseError must not deadlock.
func TestLeaseCloseInsideOnReleaseError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := NewFakeBackend()
		down := func(_ context.Context, op string) error {
			if op == "release" {
				return &Error{Op: op, Code: CodeServiceUnavailable}
			}
			return nil
		}
		var l *Lease
		calls := 0
		l, _ = Lock(t.Context(), f, "k", &LockOptions{OnReleaseError: func(err error, info ReleaseErrorInfo) {
			calls++
			l.Close() // nested: a no-op, must return
			f.SetFail(nil)
			if r, err := l.Release(context.Background()); err != nil || !r.OK {
				t.Errorf("Release from the callback retries the release: %+v %v", r, err)
			}
		}})
		f.SetFail(down)
		l.Close()
		l.Close()
		if calls != 1 || !errors.Is(l.Err(), ErrLeaseReleased) || f.Calls("release") != 1 {
			t.Fatalf("callbacks %d, Err %v, releases %d", calls, l.Err(), f.Calls("release"))
		}
	})
}

func TestWithLockCloseInsideOnReleaseError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := NewFakeBackend()
		var lease *Lease
		calls := 0
		err := WithLock(t.Context(), f, "k", func(ctx context.Context, l *Lease) error {
			lease = l
			f.SetFail(func(_ context.Context, op string) error {
				if op == "release" {
					return &Error{Op: op, Code: CodeServiceUnavailable}
				}
				return nil
			})
			return nil
		}, &LockOptions{AutoExtend: true, OnReleaseError: func(error, ReleaseErrorInfo) {
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
		f := NewFakeBackend()
		l, _ := Lock(t.Context(), f, "k", &LockOptions{TTL: time.Second})
		defer l.Close()
		<-l.Done() // lost: never extended
		if d, _ := f.LookupIDDebug(t.Context(), l.LockID()); d == nil {
			t.Fatal("the row is still live on the server (the lease is lost before the server-side expiry)")
		}
		r, err := l.Extend(t.Context(), time.Minute)
		if r.OK || !errors.Is(err, ErrLockLost) || !errors.Is(err, ErrInvalidArgument) || f.Calls("extend") != 0 {
			t.Fatalf("Extend on a lost lease: %+v %v, %d extends", r, err, f.Calls("extend"))
		}
		if !errors.Is(l.Err(), ErrLockLost) {
			t.Fatalf("Err stays lost: %v", l.Err())
		}

		l2, _ := Lock(t.Context(), f, "k2", nil)
		l2.Close()
		r, err = l2.Extend(t.Context(), time.Minute)
		if r.OK || !errors.Is(err, ErrLeaseReleased) || f.Calls("extend") != 0 {
			t.Fatalf("Extend on a released lease: %+v %v, %d extends", r, err, f.Calls("extend"))
		}
	})
}

// A lease that ends while a manual extend is in flight: the extend does not
// report OK, and the lease stays ended.
func TestExtendLeaseEndsWhileInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := NewFakeBackend()
		l, _ := Lock(t.Context(), f, "k", &LockOptions{TTL: time.Second})
		defer l.Close()
		time.Sleep(800 * time.Millisecond)
		f.Latency = 200 * time.Millisecond // the watchdog fires (at ~899ms) mid-flight
		r, err := l.Extend(t.Context(), time.Minute)
		if f.Calls("extend") != 1 {
			t.Fatal("the extend ran on the server")
		}
		if r.OK || !errors.Is(err, ErrLockLost) || !errors.Is(l.Err(), ErrLockLost) {
			t.Fatalf("an extend answered after the lease ended: %+v %v; Err %v", r, err, l.Err())
		}
	})
}
