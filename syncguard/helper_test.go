package syncguard_test

// The lock helper's tests run on syncguardtest's in-memory backend, which
// is why they are in the external test package: syncguardtest imports
// syncguard, so package syncguard's own tests cannot import it. What needs
// unexported code (the delay and schedule arithmetic) is in timing_test.go.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/syncguard/syncguard-go/internal/rules"
	"github.com/syncguard/syncguard-go/syncguard"
	"github.com/syncguard/syncguard-go/syncguardtest"
)

// --- WithLock basics

func TestWithLockRunsFnHoldingTheLockAndReleases(t *testing.T) {
	b := syncguardtest.New()
	ctx := context.Background()
	ran := false
	err := syncguard.WithLock(ctx, b, "job:1", func(ctx context.Context, l *syncguard.Lease) error {
		ran = true
		if locked, _ := b.IsLocked(ctx, "job:1"); !locked {
			t.Error("the key must be locked while fn runs")
		}
		if l.Key() != "job:1" || rules.ValidateLockID(l.LockID()) != nil || l.Fence() != "000000000000001" || l.ExpiresAt().IsZero() {
			t.Errorf("lease accessors: key %q lockId %q fence %q expires %v", l.Key(), l.LockID(), l.Fence(), l.ExpiresAt())
		}
		return nil
	}, nil)
	if err != nil || !ran {
		t.Fatalf("WithLock: ran=%v err=%v", ran, err)
	}
	if locked, _ := b.IsLocked(ctx, "job:1"); locked {
		t.Error("the key must be free after WithLock returns")
	}
	if n := b.Calls(syncguardtest.OpRelease); n != 1 {
		t.Errorf("want exactly one release, got %d", n)
	}
}

func TestWithLockDefaultTTL(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := syncguardtest.New()
		_ = syncguard.WithLock(t.Context(), b, "k", func(ctx context.Context, l *syncguard.Lease) error {
			if got := l.ExpiresAt().Sub(time.Now()); got != defaultTTL {
				t.Errorf("default TTL: want %v, got %v", defaultTTL, got)
			}
			return nil
		}, nil)
	})
}

func TestWithLockReturnsFnErrorUnchangedAndReleases(t *testing.T) {
	b := syncguardtest.New()
	err := syncguard.WithLock(context.Background(), b, "k", func(context.Context, *syncguard.Lease) error { return errFn }, nil)
	if err != errFn {
		t.Fatalf("want fn's error itself, got %v", err)
	}
	if b.Calls(syncguardtest.OpRelease) != 1 {
		t.Fatal("the lock must be released after fn fails")
	}
}

func TestWithLockReleasesOnPanicAndRepanics(t *testing.T) {
	b := syncguardtest.New()
	defer func() {
		r := recover()
		if r != "boom" {
			t.Fatalf("the panic must continue after the release; recovered %v", r)
		}
		if b.Calls(syncguardtest.OpRelease) != 1 {
			t.Fatal("the lock must be released before the panic continues")
		}
		if locked, _ := b.IsLocked(context.Background(), "k"); locked {
			t.Fatal("the key must be free after a panicking fn")
		}
	}()
	_ = syncguard.WithLock(context.Background(), b, "k", func(context.Context, *syncguard.Lease) error { panic("boom") }, nil)
	t.Fatal("unreachable")
}

func TestWithLockValidatesBeforeIO(t *testing.T) {
	b := syncguardtest.New()
	ctx := context.Background()
	fn := func(context.Context, *syncguard.Lease) error { t.Error("fn must not run"); return nil }
	for name, opts := range map[string]*syncguard.LockOptions{
		"negative TTL":   {TTL: -time.Second},
		"negative delay": {Acquisition: syncguard.AcquisitionOptions{RetryDelay: -1}},
		"bad backoff":    {Acquisition: syncguard.AcquisitionOptions{Backoff: "linear"}},
		"bad jitter":     {Acquisition: syncguard.AcquisitionOptions{Jitter: "some"}},
		"sub-ms TTL":     {TTL: time.Microsecond},
	} {
		requireCode(t, syncguard.WithLock(ctx, b, "k", fn, opts), syncguard.ErrInvalidArgument)
		_ = name
	}
	requireCode(t, syncguard.WithLock(ctx, b, "", fn, nil), syncguard.ErrInvalidArgument)
	requireCode(t, syncguard.WithLock(ctx, b, "k", nil, nil), syncguard.ErrInvalidArgument)
	requireCode(t, syncguard.WithLock(ctx, nil, "k", fn, nil), syncguard.ErrInvalidArgument)
	if n := b.Calls(syncguardtest.OpAcquire); n != 0 {
		t.Fatalf("invalid input must fail before any I/O; %d acquires ran", n)
	}
}

// --- acquisition: retries, delays, timeout, cancellation

func TestAcquireExponentialDelaysExactAndTimeout(t *testing.T) {
	for _, c := range []struct {
		name       string
		maxRetries int
		gaps       []time.Duration
		attempts   int
	}{
		// The reference's numbers (MaxRetries 10): waits 100, 200, 400,
		// 800, 1600, then 3200 clamped to the 1900 left.
		{"MaxRetries 10", 10, ms(100, 200, 400, 800, 1600), 6},
		// Without MaxRetries the delay stops growing at 1 s, and Timeout
		// ends the wait.
		{"MaxRetries unset", 0, ms(100, 200, 400, 800, 1000, 1000, 1000), 8},
	} {
		synctest.Test(t, func(t *testing.T) {
			b := syncguardtest.New()
			hold(t, b, "k")
			attempts := sendTimes(b, syncguardtest.OpAcquire)
			start := time.Now()
			_, err := syncguard.Lock(t.Context(), scheduleOnly(b), "k", &syncguard.LockOptions{Acquisition: syncguard.AcquisitionOptions{Jitter: "none", MaxRetries: c.maxRetries}})
			e := requireCode(t, err, syncguard.ErrAcquisitionTimeout)
			if got := gaps(attempts()); fmt.Sprint(got) != fmt.Sprint(c.gaps) {
				t.Errorf("%s: delays between attempts: want %v, got %v", c.name, c.gaps, got)
			}
			if el := time.Since(start); el != defaultAcquireTimeout {
				t.Errorf("%s: the last wait is clamped to the remaining time: want to give up at %v, gave up at %v", c.name, defaultAcquireTimeout, el)
			}
			if !strings.Contains(e.Msg, fmt.Sprintf("after %d attempts", c.attempts)) || e.Key != "k" {
				t.Errorf("%s: the error says how many attempts were made (%d): %v", c.name, c.attempts, err)
			}
		})
	}
}

func TestAcquireMaxRetriesCountsAttempts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := syncguardtest.New()
		hold(t, b, "k")
		attempts := sendTimes(b, syncguardtest.OpAcquire)
		start := time.Now()
		_, err := syncguard.Lock(t.Context(), b, "k", &syncguard.LockOptions{Acquisition: syncguard.AcquisitionOptions{
			MaxRetries: 3, RetryDelay: 200 * time.Millisecond, Backoff: "fixed", Jitter: "none", Timeout: time.Hour}})
		e := requireCode(t, err, syncguard.ErrAcquisitionTimeout)
		if got, want := gaps(attempts()), ms(200, 200, 200); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("fixed backoff: want delays %v, got %v", want, got)
		}
		if n := len(attempts()); n != 4 || !strings.Contains(e.Msg, "after 4 attempts") {
			t.Errorf("total attempts = retries + 1 = 4; made %d: %v", n, err)
		}
		if el := time.Since(start); el != 600*time.Millisecond {
			t.Errorf("no wait after the last attempt: want to give up at 600ms, gave up at %v", el)
		}
	})
}

func TestAcquireNoRetries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := syncguardtest.New()
		hold(t, b, "k")
		start := time.Now()
		_, err := syncguard.Lock(t.Context(), b, "k", &syncguard.LockOptions{Acquisition: syncguard.AcquisitionOptions{MaxRetries: -1}})
		requireCode(t, err, syncguard.ErrAcquisitionTimeout)
		if n := b.Calls(syncguardtest.OpAcquire) - 1; n != 1 || time.Since(start) != 0 {
			t.Errorf("-1: want one attempt and no wait, got %d attempts in %v", n, time.Since(start))
		}
		if !strings.Contains(err.Error(), "after 1 attempt in ") {
			t.Errorf("the message counts in English: want %q in %v", "after 1 attempt in ", err)
		}
	})
}

func TestAcquireJitterBounds(t *testing.T) {
	for _, jitter := range []string{"equal", "full"} {
		t.Run(jitter, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := syncguardtest.New()
				hold(t, b, "k")
				attempts := sendTimes(b, syncguardtest.OpAcquire)
				_, err := syncguard.Lock(t.Context(), scheduleOnly(b), "k", &syncguard.LockOptions{Acquisition: syncguard.AcquisitionOptions{
					MaxRetries: 8, Jitter: jitter, Timeout: time.Hour}})
				requireCode(t, err, syncguard.ErrAcquisitionTimeout)
				got := gaps(attempts())
				if len(got) != 8 {
					t.Fatalf("want 8 waits, got %v", got)
				}
				for i, g := range got {
					d := defaultRetryDelay << i
					lo := d / 2
					if jitter == "full" {
						lo = 0
					}
					if g < lo || g > d {
						t.Errorf("%s jitter: wait %d must be in [%v, %v], got %v", jitter, i+1, lo, d, g)
					}
				}
			})
		})
	}
}

// On a Locker that is not a Queuer, Lock polls on its retry schedule; on
// a Queuer the release hands the key over and wakes the waiter at once.
func TestAcquireSucceedsWhenHolderReleases(t *testing.T) {
	for _, c := range []struct {
		name string
		wrap func(*syncguardtest.Backend) syncguard.Locker
		won  time.Duration
	}{
		{"polling: the third attempt (after 100+200ms)", scheduleOnly, 300 * time.Millisecond},
		{"queued: at the release", func(b *syncguardtest.Backend) syncguard.Locker { return b }, 250 * time.Millisecond},
	} {
		synctest.Test(t, func(t *testing.T) {
			b := syncguardtest.New()
			h := hold(t, b, "k")
			go func() {
				time.Sleep(250 * time.Millisecond)
				_, _ = b.Release(context.Background(), h.LockID)
			}()
			start := time.Now()
			err := syncguard.WithLock(t.Context(), c.wrap(b), "k", func(context.Context, *syncguard.Lease) error {
				if el := time.Since(start); el != c.won {
					t.Errorf("%s: want the key at %v, got it at %v", c.name, c.won, el)
				}
				return nil
			}, &syncguard.LockOptions{Acquisition: syncguard.AcquisitionOptions{Jitter: "none"}})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

// scheduleOnly hides every capability of b but Locker's methods: Lock
// polls on its retry schedule through it.
func scheduleOnly(b *syncguardtest.Backend) syncguard.Locker { return struct{ syncguard.Locker }{b} }

// A negative Timeout waits as long as ctx allows; the hooks see each
// attempt and each confirmed extension.
func TestAcquireUntilContextAndHooks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := syncguardtest.New()
		h := hold(t, b, "k")
		go func() {
			time.Sleep(time.Hour)
			_, _ = b.Release(context.Background(), h.LockID)
		}()
		var attempts, extends atomic.Int64
		start := time.Now()
		lease, err := syncguard.Lock(t.Context(), b, "k", &syncguard.LockOptions{
			TTL: 3 * time.Second, AutoExtend: true, Acquisition: syncguard.AcquisitionOptions{Timeout: -1},
			OnAttempt: func(res syncguard.AcquireResult, err error) { attempts.Add(1) },
			OnExtend: func(res syncguard.ExtendResult) {
				if !res.OK {
					t.Errorf("OnExtend sees only confirmed extensions; got %+v", res)
				}
				extends.Add(1)
			},
		})
		if err != nil {
			t.Fatalf("rule: Timeout < 0 waits until ctx ends; gave up after %v: %v", time.Since(start), err)
		}
		if el := time.Since(start); el != time.Hour {
			t.Errorf("want the key at the release, an hour later; got it at %v", el)
		}
		if attempts.Load() < 2 {
			t.Errorf("OnAttempt saw %d attempts, want at least 2 (the contended one and the one that won)", attempts.Load())
		}
		time.Sleep(5 * time.Second) // two extensions at a third of the 3 s TTL
		if n := extends.Load(); n < 2 {
			t.Errorf("OnExtend saw %d extensions in 5 s of a 3 s TTL, want at least 2", n)
		}
		lease.Close()
		// ctx ends the wait: its deadline, as AcquisitionTimeout.
		if r, err := b.Acquire(t.Context(), "k2", 3*time.Hour); err != nil || !r.OK {
			t.Fatal(r, err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Hour)
		defer cancel()
		start = time.Now()
		_, err = syncguard.Lock(ctx, b, "k2", &syncguard.LockOptions{Acquisition: syncguard.AcquisitionOptions{Timeout: -1}})
		requireCode(t, err, syncguard.ErrAcquisitionTimeout)
		if el := time.Since(start); el != 2*time.Hour {
			t.Errorf("want the wait to end at ctx's deadline, 2 h; ended at %v", el)
		}
	})
}

func TestAcquireBackendErrorReturnedAtOnce(t *testing.T) {
	// An error that is no outage (here AuthFailed), and an outage with
	// FailFast, are returned at once, not retried.
	for _, c := range []struct {
		code     syncguard.Code
		failFast bool
	}{{syncguard.ErrAuthFailed, false}, {syncguard.ErrInternal, false}, {syncguard.ErrServiceUnavailable, true}, {syncguard.ErrNetworkTimeout, true}} {
		synctest.Test(t, func(t *testing.T) {
			b := syncguardtest.New()
			boom := &syncguard.Error{Op: "acquire", Code: c.code, Msg: "down"}
			attempts := 0
			b.SetHook(func(_ context.Context, call syncguardtest.Call) error {
				if call.Op == syncguardtest.OpAcquire {
					attempts++
					return boom
				}
				return nil
			})
			start := time.Now()
			_, err := syncguard.Lock(t.Context(), b, "k", &syncguard.LockOptions{Acquisition: syncguard.AcquisitionOptions{FailFast: c.failFast}})
			if err != boom || attempts != 1 || time.Since(start) != 0 {
				t.Fatalf("%s (FailFast %v): a backend error is returned at once and not retried: err %v, %d attempts, %v", c.code, c.failFast, err, attempts, time.Since(start))
			}
		})
	}
}

// An outage while waiting is ridden out within Timeout: a server that comes
// back after 3 s is waited for, and one that does not ends the wait at the
// Timeout with the outage's own code, wrapping its error (no attempt got an
// answer: nothing says the key is busy).
func TestAcquireRidesOutAnOutage(t *testing.T) {
	for _, down := range []time.Duration{3 * time.Second, time.Hour} {
		synctest.Test(t, func(t *testing.T) {
			b := syncguardtest.New()
			boom := &syncguard.Error{Op: "acquire", Code: syncguard.ErrServiceUnavailable, Msg: "connection refused"}
			start := time.Now()
			attempts := 0
			b.SetHook(func(_ context.Context, call syncguardtest.Call) error {
				if call.Op == syncguardtest.OpAcquire {
					attempts++
					if time.Since(start) < down {
						return boom
					}
				}
				return nil
			})
			lease, err := syncguard.Lock(t.Context(), b, "k", &syncguard.LockOptions{Acquisition: syncguard.AcquisitionOptions{Timeout: 30 * time.Second}})
			if down < time.Hour {
				if err != nil || time.Since(start) < down {
					t.Fatalf("rule: a wait rides out a %v outage within its 30 s Timeout; got %v after %v, %d attempts", down, err, time.Since(start), attempts)
				}
				lease.Close()
				return
			}
			requireCode(t, err, syncguard.ErrServiceUnavailable)
			if errors.Is(err, syncguard.ErrAcquisitionTimeout) || !errors.Is(err, boom) || time.Since(start) != 30*time.Second || attempts < 3 {
				t.Fatalf("rule: an outage longer than Timeout ends at the Timeout with ServiceUnavailable wrapping the last error; got %v after %v, %d attempts", err, time.Since(start), attempts)
			}
		})
	}
}

// Without MaxRetries, Timeout is the wait limit: a key held for 9 minutes
// is waited for with a 10-minute Timeout (the reference's 10 retries would
// have given up after about 1.5 minutes).
func TestAcquireTimeoutIsTheLimitWithoutMaxRetries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := syncguardtest.New()
		held, err := b.Acquire(t.Context(), "k", 9*time.Minute)
		if err != nil || !held.OK {
			t.Fatal(held, err)
		}
		start := time.Now()
		lease, err := syncguard.Lock(t.Context(), b, "k", &syncguard.LockOptions{Acquisition: syncguard.AcquisitionOptions{Timeout: 10 * time.Minute}})
		if err != nil {
			t.Fatalf("rule: without MaxRetries, Timeout is the wait limit; gave up after %v: %v", time.Since(start), err)
		}
		lease.Close()
		// With MaxRetries set, the reference's numbers hold.
		held, _ = b.Acquire(t.Context(), "k2", 9*time.Minute)
		_, err = syncguard.Lock(t.Context(), scheduleOnly(b), "k2", &syncguard.LockOptions{Acquisition: syncguard.AcquisitionOptions{MaxRetries: 10, Timeout: 10 * time.Minute}})
		if !errors.Is(err, syncguard.ErrAcquisitionTimeout) || !strings.Contains(err.Error(), "11 attempts") {
			t.Fatalf("rule: with MaxRetries 10 the acquisition gives up after 11 attempts; got %v", err)
		}
		_ = held
	})
}

func TestAcquireCancelWhileWaitingAbortsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := syncguardtest.New()
		hold(t, b, "k")
		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(150*time.Millisecond, cancel)
		start := time.Now()
		_, err := syncguard.Lock(ctx, scheduleOnly(b), "k", &syncguard.LockOptions{Acquisition: syncguard.AcquisitionOptions{Jitter: "none"}})
		requireCode(t, err, syncguard.ErrAborted)
		if !errors.Is(err, context.Canceled) {
			t.Errorf("the cause must be context.Canceled: %v", err)
		}
		if el := time.Since(start); el != 150*time.Millisecond {
			t.Errorf("cancellation must stop the wait at once (150ms), returned at %v", el)
		}
		if n := b.Calls(syncguardtest.OpAcquire) - 1; n != 2 {
			t.Errorf("attempts at 0 and 100ms only; got %d", n)
		}
	})
}

func TestAcquireContextDeadlineWhileWaiting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := syncguardtest.New()
		hold(t, b, "k")
		ctx, cancel := context.WithTimeout(t.Context(), 250*time.Millisecond)
		defer cancel()
		_, err := syncguard.Lock(ctx, b, "k", &syncguard.LockOptions{Acquisition: syncguard.AcquisitionOptions{Jitter: "none"}})
		requireCode(t, err, syncguard.ErrAcquisitionTimeout)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("the caller's deadline is the cause: %v", err)
		}
	})
}

func TestAcquireAttemptBoundedByTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := syncguardtest.New()
		b.SetLatency(time.Hour) // an acquire that never answers (half-open connection)
		start := time.Now()
		_, err := syncguard.Lock(t.Context(), b, "k", &syncguard.LockOptions{Acquisition: syncguard.AcquisitionOptions{Timeout: time.Second}})
		// No answer at all: NetworkTimeout, not a busy key.
		requireCode(t, err, syncguard.ErrNetworkTimeout)
		if el := time.Since(start); el != time.Second {
			t.Fatalf("a hanging attempt ends at the acquisition timeout (1s), not at ctx's end; returned at %v", el)
		}
	})
}

// --- release after fn

func TestWithLockReleasesAfterContextCancelledDuringFn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := syncguardtest.New()
		ctx, cancel := context.WithCancel(t.Context())
		err := syncguard.WithLock(ctx, b, "k", func(ctx context.Context, _ *syncguard.Lease) error {
			cancel()
			return ctx.Err()
		}, nil)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("fn's error is returned: %v", err)
		}
		if locked, _ := b.IsLocked(context.Background(), "k"); locked || b.Calls(syncguardtest.OpRelease) != 1 {
			t.Fatal("the lock must be released at once even though ctx was cancelled during fn")
		}
	})
}

func TestWithLockReleaseErrorGoesToCallbackNotResult(t *testing.T) {
	b := syncguardtest.New()
	relErr := &syncguard.Error{Op: "release", Code: syncguard.ErrServiceUnavailable, Msg: "down"}
	b.SetHook(failOp(syncguardtest.OpRelease, relErr))
	for _, fnErr := range []error{nil, errFn} {
		var got []syncguard.ReleaseErrorInfo
		var lockID string
		err := syncguard.WithLock(context.Background(), b, "k", func(_ context.Context, l *syncguard.Lease) error {
			lockID = l.LockID()
			b.Delete(lockID) // let the next iteration acquire
			return fnErr
		}, &syncguard.LockOptions{OnReleaseError: func(err error, info syncguard.ReleaseErrorInfo) {
			if err != relErr {
				t.Errorf("callback gets the release error, got %v", err)
			}
			got = append(got, info)
		}})
		if err != fnErr {
			t.Errorf("a release failure never replaces fn's result: want %v, got %v", fnErr, err)
		}
		if len(got) != 1 || got[0].Source != "withLock" || got[0].Key != "k" || got[0].LockID != lockID {
			t.Errorf("want one callback with source %q, key and lockId; got %+v", "withLock", got)
		}
	}
}

func TestDefaultReleaseErrorHandlerLogsWithoutKeyOrLockID(t *testing.T) {
	b := syncguardtest.New()
	b.SetHook(failOp(syncguardtest.OpRelease, &syncguard.Error{Op: "release", Code: syncguard.ErrServiceUnavailable, Msg: "down"}))
	logger, buf := captureLogger()
	const key = "customer:alice@example.com"
	var lockID string
	err := syncguard.WithLock(context.Background(), b, key, func(_ context.Context, l *syncguard.Lease) error {
		lockID = l.LockID()
		return nil
	}, &syncguard.LockOptions{Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	if !strings.Contains(out, `"level":"ERROR"`) || !strings.Contains(out, "ServiceUnavailable") || !strings.Contains(out, syncguard.HashKey(key)) {
		t.Errorf("the default handler must log the failure visibly, with code and key hash; got %s", out)
	}
	if strings.Contains(out, key) || strings.Contains(out, lockID) {
		t.Errorf("the default handler must not print the key or lockId; got %s", out)
	}
}

func TestWithLockReleaseBoundedByReleaseTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := syncguardtest.New()
		var got error
		start := time.Now()
		err := syncguard.WithLock(t.Context(), b, "k", func(context.Context, *syncguard.Lease) error {
			b.SetLatency(time.Hour) // the release hangs until its context ends
			return nil
		}, &syncguard.LockOptions{ReleaseTimeout: 2 * time.Second, OnReleaseError: func(err error, _ syncguard.ReleaseErrorInfo) { got = err }})
		if err != nil {
			t.Fatal(err)
		}
		if el := time.Since(start); el != 2*time.Second {
			t.Errorf("the release must be bounded by ReleaseTimeout (2s); WithLock took %v", el)
		}
		requireCode(t, got, syncguard.ErrNetworkTimeout)
	})
}

func TestHelperDoesNotRepeatFenceWarning(t *testing.T) {
	// Backend.Acquire logs the fence warning itself; the helper must not
	// add a second record. (The conformance suite checks the core's one.)
	b := syncguardtest.New()
	if err := b.SetFence("k", rules.FenceWarn+10); err != nil {
		t.Fatal(err)
	}
	logger, buf := captureLogger()
	err := syncguard.WithLock(context.Background(), b, "k", func(_ context.Context, l *syncguard.Lease) error {
		if n, _ := l.Fence().Int64(); n != rules.FenceWarn+11 {
			t.Errorf("setup: fence %s", l.Fence())
		}
		return nil
	}, &syncguard.LockOptions{Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	if out := buf.String(); out != "" {
		t.Fatalf("the helper must log nothing about fences; got %s", out)
	}
}
