package syncguard_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/syncguard/syncguard-go/syncguard"
	"github.com/syncguard/syncguard-go/syncguardtest"
)

// --- handle: release and close

func TestLeaseCloseIsIdempotent(t *testing.T) {
	b := syncguardtest.New()
	l, err := syncguard.Lock(context.Background(), b, "k", nil)
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	l.Close()
	l.Close()
	if n := b.Calls(syncguardtest.OpRelease); n != 1 {
		t.Fatalf("Close releases at most once; %d releases ran", n)
	}
	r, err := l.Release(context.Background())
	if err != nil || !r.OK || b.Calls(syncguardtest.OpRelease) != 1 {
		t.Fatalf("Release after Close returns the first result without I/O; got %+v %v, %d releases", r, err, b.Calls(syncguardtest.OpRelease))
	}
	if !errors.Is(l.Err(), syncguard.ErrLeaseReleased) {
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
		b := syncguardtest.New()
		l, err := syncguard.Lock(t.Context(), b, "k", nil)
		if err != nil {
			t.Fatal(err)
		}
		b.SetLatency(10 * time.Millisecond) // the release takes 20ms
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
		if n := b.Calls(syncguardtest.OpRelease); n != 1 {
			t.Fatalf("10 concurrent Closes must release once, got %d", n)
		}
	})
}

func TestLeaseCloseWaitsForReleaseInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := syncguardtest.New()
		l, _ := syncguard.Lock(t.Context(), b, "k", nil)
		b.SetLatency(10 * time.Millisecond)
		start := time.Now()
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, _ = l.Release(context.Background())
		}()
		time.Sleep(5 * time.Millisecond)
		l.Close()
		<-done
		if el := time.Since(start); el != 20*time.Millisecond || b.Calls(syncguardtest.OpRelease) != 1 {
			t.Fatalf("Close during a release waits for it (20ms) without a second release; returned at %v after %d releases", el, b.Calls(syncguardtest.OpRelease))
		}
	})
}

func TestLeaseCloseErrorGoesToOnReleaseError(t *testing.T) {
	b := syncguardtest.New()
	var calls []syncguard.ReleaseErrorInfo
	l, _ := syncguard.Lock(context.Background(), b, "k", &syncguard.LockOptions{OnReleaseError: func(err error, info syncguard.ReleaseErrorInfo) {
		requireCode(t, err, syncguard.ErrServiceUnavailable)
		calls = append(calls, info)
	}})
	b.SetHook(func(context.Context, syncguardtest.Call) error {
		return &syncguard.Error{Op: "release", Code: syncguard.ErrServiceUnavailable}
	})
	l.Close()
	l.Close()
	if len(calls) != 1 || calls[0].Source != "close" || calls[0].LockID != l.LockID() {
		t.Fatalf("one callback with source %q; got %+v", "close", calls)
	}
	if l.Err() != nil {
		t.Fatalf("a failed release does not end the lease: %v", l.Err())
	}
	// An explicit Release may try again.
	b.SetHook(nil)
	if r, err := l.Release(context.Background()); err != nil || !r.OK {
		t.Fatalf("Release after a failed release retries: %+v %v", r, err)
	}
}

func TestLeaseCloseDetachedFromAcquireCancellation(t *testing.T) {
	b := syncguardtest.New()
	ctx, cancel := context.WithCancel(context.Background())
	l, _ := syncguard.Lock(ctx, b, "k", nil)
	cancel()
	l.Close()
	if locked, _ := b.IsLocked(context.Background(), "k"); locked {
		t.Fatal("Close must release even when the acquire's ctx is cancelled")
	}
}

func TestLeaseReleaseWaitRespectsContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := syncguardtest.New()
		l, _ := syncguard.Lock(t.Context(), b, "k", nil)
		b.SetLatency(time.Second)
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, _ = l.Release(context.Background())
		}()
		time.Sleep(time.Millisecond)
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Millisecond)
		defer cancel()
		_, err := l.Release(ctx)
		requireCode(t, err, syncguard.ErrNetworkTimeout)
		<-done
	})
}

func TestFailedLockYieldsNoLeaseAndNoLaterIO(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := syncguardtest.New()
		hold(t, b, "k")
		l, err := syncguard.Lock(t.Context(), b, "k", &syncguard.LockOptions{AutoExtend: true, Acquisition: syncguard.AcquisitionOptions{MaxRetries: -1}})
		if l != nil || err == nil {
			t.Fatalf("a failed acquire yields no lease: %v %v", l, err)
		}
		time.Sleep(time.Hour)
		if b.Calls(syncguardtest.OpRelease)+b.Calls(syncguardtest.OpExtend) != 0 {
			t.Fatal("a failed acquire must make no I/O later")
		}
	})
}

// --- loss and timing

func TestLeaseWithoutAutoExtendReportsLossBeforeExpiry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := syncguardtest.New()
		b.SetLatency(50 * time.Millisecond)
		l, err := syncguard.Lock(t.Context(), b, "k", &syncguard.LockOptions{TTL: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		<-l.Done()
		if !errors.Is(l.Err(), syncguard.ErrLockLost) {
			t.Fatalf("Err: %v", l.Err())
		}
		at := time.Now()
		if serverExpiry := serverExpiry(t, b, l.LockID()); !at.Before(serverExpiry) {
			t.Fatalf("loss must be reported before the server-side expiry %v; reported at %v", serverExpiry, at)
		}
		if b.Calls(syncguardtest.OpExtend) != 0 {
			t.Fatal("no extension without AutoExtend")
		}
	})
}

func TestAutoExtendKeepsLockPastTTL(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := syncguardtest.New()
		b.SetLatency(20 * time.Millisecond)
		sent := sendTimes(b, syncguardtest.OpExtend)
		const ttl = 3 * time.Second
		err := syncguard.WithLock(t.Context(), b, "k", func(ctx context.Context, l *syncguard.Lease) error {
			first := l.ExpiresAt()
			time.Sleep(10 * ttl)
			if ctx.Err() != nil || l.Err() != nil {
				t.Errorf("fn's context must stay live while extensions succeed: %v %v", context.Cause(ctx), l.Err())
			}
			if locked, _ := b.IsLocked(context.Background(), "k"); !locked {
				t.Error("the key must still be locked after 10 TTLs")
			}
			if !l.ExpiresAt().After(first.Add(9 * ttl)) {
				t.Errorf("ExpiresAt must follow the extensions: first %v now %v", first, l.ExpiresAt())
			}
			return nil
		}, &syncguard.LockOptions{TTL: ttl, AutoExtend: true})
		if err != nil {
			t.Fatal(err)
		}
		// Each extend is sent a third of the lifetime (999.666ms) after
		// the previous request was sent (requests take 40ms round trip),
		// not after its answer came back.
		times := sent()
		if len(times) < 29 || len(times) > 31 {
			t.Fatalf("want an extend every ~1s over 30s, got %d", len(times))
		}
		for i, g := range gaps(times) {
			if g != 999666666 {
				t.Errorf("extend %d: sent a third of the granted lifetime after the previous one, got %v", i+1, g)
			}
		}
		extends := b.Calls(syncguardtest.OpExtend)
		time.Sleep(time.Minute)
		if b.Calls(syncguardtest.OpExtend) != extends {
			t.Error("extension must stop when the lease is released")
		}
		if locked, _ := b.IsLocked(context.Background(), "k"); locked {
			t.Error("released after fn")
		}
	})
}

// lostCase runs fn under WithLock with AutoExtend and a 3s TTL, calls
// sabotage at its start, and waits for fn's context to end. It returns the
// cause, when it came, and the server-side expiry of the acquire (no
// extension succeeds after the sabotage).
func lostCase(t *testing.T, b *syncguardtest.Backend, sabotage func(l *syncguard.Lease)) (cause error, at, serverExpiry time.Time, l *syncguard.Lease) {
	t.Helper()
	err := syncguard.WithLock(t.Context(), b, "k", func(ctx context.Context, lease *syncguard.Lease) error {
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
	}, &syncguard.LockOptions{TTL: 3 * time.Second, AutoExtend: true, Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(cause, syncguard.ErrLockLost) || !errors.Is(l.Err(), syncguard.ErrLockLost) {
		t.Fatalf("the cause must be ErrLockLost; ctx cause %v, lease Err %v", cause, l.Err())
	}
	if !at.Before(serverExpiry) {
		t.Fatalf("fn's context must be cancelled before the server-side expiry %v; was at %v", serverExpiry, at)
	}
	return cause, at, serverExpiry, l
}

func TestAutoExtendLossWhenRowDeleted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := syncguardtest.New()
		start := time.Now()
		cause, at, _, l := lostCase(t, b, func(l *syncguard.Lease) { b.Delete(l.LockID()) })
		if !strings.Contains(cause.Error(), "gone") || at.Sub(start) != 999666666 {
			t.Fatalf("loss is detected by the first extend (at 999.67ms): %v at %v", cause, at.Sub(start))
		}
		if r := l.LossReason(); r != "gone" {
			t.Errorf("LossReason %q, want gone", r)
		}
	})
}

func TestAutoExtendLossWhenRowExpired(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := syncguardtest.New()
		cause, _, _, l := lostCase(t, b, func(l *syncguard.Lease) { b.Expire(l.LockID()) })
		if !strings.Contains(cause.Error(), "expired") || l.LossReason() != "expired" {
			t.Fatalf("the cause says the lock expired: %v (LossReason %q)", cause, l.LossReason())
		}
	})
}

func TestAutoExtendLossWhenExtendsKeepFailing(t *testing.T) {
	for _, latency := range []time.Duration{0, 100 * time.Millisecond, 400 * time.Millisecond} {
		t.Run(latency.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := syncguardtest.New()
				b.SetLatency(latency)
				down := &syncguard.Error{Op: "extend", Code: syncguard.ErrServiceUnavailable, Msg: "down"}
				cause, at, serverExpiry, l := lostCase(t, b, func(*syncguard.Lease) {
					b.SetHook(failOp(syncguardtest.OpExtend, down))
				})
				if !errors.Is(cause, syncguard.ErrServiceUnavailable) || l.LossReason() != "not-extended" {
					t.Errorf("the cause carries the last extend error: %v (LossReason %q, want not-extended)", cause, l.LossReason())
				}
				// Lost at sent + granted - margin: well before expiry, but
				// not absurdly early either.
				if early := serverExpiry.Sub(at); early > 2*latency+400*time.Millisecond {
					t.Errorf("declared lost %v before the server-side expiry; more than latency + margin", early)
				}
				b.SetHook(nil)
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
		b := syncguardtest.New()
		lostCase(t, b, func(*syncguard.Lease) {
			b.SetHook(func(ctx context.Context, c syncguardtest.Call) error {
				if c.Op == syncguardtest.OpExtend {
					<-ctx.Done() // an extend that never answers
					return syncguardtest.Err(c.Op, syncguard.ErrNetworkTimeout)
				}
				return nil
			})
		})
	})
}

func TestAutoExtendRetriesTransientFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := syncguardtest.New()
		failures := 0
		err := syncguard.WithLock(t.Context(), b, "k", func(ctx context.Context, l *syncguard.Lease) error {
			b.SetHook(func(_ context.Context, c syncguardtest.Call) error {
				if c.Op == syncguardtest.OpExtend && failures < 3 {
					failures++
					return &syncguard.Error{Op: string(c.Op), Code: syncguard.ErrNetworkTimeout}
				}
				return nil
			})
			time.Sleep(10 * time.Second)
			if ctx.Err() != nil {
				t.Errorf("three failed extends within the lifetime are retried, not a loss: %v", context.Cause(ctx))
			}
			return nil
		}, &syncguard.LockOptions{TTL: 3 * time.Second, AutoExtend: true, Logger: discardLogger()})
		if err != nil || failures != 3 {
			t.Fatalf("err %v failures %d", err, failures)
		}
	})
}

func TestAutoExtendStopsWhenAcquireContextEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := syncguardtest.New()
		ctx, cancel := context.WithCancel(t.Context())
		l, _ := syncguard.Lock(ctx, b, "k", &syncguard.LockOptions{TTL: 3 * time.Second, AutoExtend: true})
		defer l.Close()
		time.Sleep(1500 * time.Millisecond)
		cancel()
		<-l.Done()
		if n := b.Calls(syncguardtest.OpExtend); n != 1 || !errors.Is(l.Err(), syncguard.ErrLockLost) {
			t.Fatalf("auto-extension stops with the acquire's ctx; %d extends, Err %v", n, l.Err())
		}
	})
}

func TestManualExtend(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := syncguardtest.New()
		l, _ := syncguard.Lock(t.Context(), b, "k", &syncguard.LockOptions{TTL: time.Second})
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
		b.Delete(l.LockID())
		if r, err := l.Extend(t.Context(), time.Second); err != nil || r.OK || !errors.Is(l.Err(), syncguard.ErrLockLost) {
			t.Fatalf("an extend that finds the lock gone ends the lease as lost: %+v %v %v", r, err, l.Err())
		}
	})
}

func TestLeaseContextCancelledOnRelease(t *testing.T) {
	b := syncguardtest.New()
	l, _ := syncguard.Lock(context.Background(), b, "k", nil)
	ctx, cancel := l.Bind(context.Background())
	defer cancel()
	l.Close()
	<-ctx.Done()
	if !errors.Is(context.Cause(ctx), syncguard.ErrLeaseReleased) {
		t.Fatalf("cause %v", context.Cause(ctx))
	}
}
