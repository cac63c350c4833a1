package syncguard

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/syncguard/syncguard-go/internal/rules"
)

// --- shared test helpers for the helper, lease, telemetry and diagnostics tests.

func requireCode(t *testing.T, err error, code Code) *Error {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) || e.Code != code || !errors.Is(err, code.sentinel()) {
		t.Fatalf("want a *Error with code %s, got %T %v", code, err, err)
	}
	return e
}

// hold takes key on f for an hour, as another process would.
func hold(t *testing.T, f *FakeBackend, key string) AcquireResult {
	t.Helper()
	r, err := f.Acquire(context.Background(), key, time.Hour)
	if err != nil || !r.OK {
		t.Fatalf("setup: holding %q: %+v %v", key, r, err)
	}
	return r
}

// syncBuffer is a bytes.Buffer safe for the concurrent writes of a logger.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func captureLogger() (*slog.Logger, *syncBuffer) {
	buf := &syncBuffer{}
	return slog.New(slog.NewJSONHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug})), buf
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// gaps returns the durations between consecutive times.
func gaps(ts []time.Time) []time.Duration {
	var out []time.Duration
	for i := 1; i < len(ts); i++ {
		out = append(out, ts[i].Sub(ts[i-1]))
	}
	return out
}

func ms(n ...int) []time.Duration {
	out := make([]time.Duration, len(n))
	for i, v := range n {
		out[i] = time.Duration(v) * time.Millisecond
	}
	return out
}

var errFn = errors.New("fn failed")

// --- WithLock basics

func TestWithLockRunsFnHoldingTheLockAndReleases(t *testing.T) {
	f := NewFakeBackend()
	ctx := context.Background()
	ran := false
	err := WithLock(ctx, f, "job:1", func(ctx context.Context, l *Lease) error {
		ran = true
		if locked, _ := f.IsLocked(ctx, "job:1"); !locked {
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
	if locked, _ := f.IsLocked(ctx, "job:1"); locked {
		t.Error("the key must be free after WithLock returns")
	}
	if n := f.Calls("release"); n != 1 {
		t.Errorf("want exactly one release, got %d", n)
	}
}

func TestWithLockDefaultTTL(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := NewFakeBackend()
		_ = WithLock(t.Context(), f, "k", func(ctx context.Context, l *Lease) error {
			if got := l.ExpiresAt().Sub(time.Now()); got != defaultTTL {
				t.Errorf("default TTL: want %v, got %v", defaultTTL, got)
			}
			return nil
		}, nil)
	})
}

func TestWithLockReturnsFnErrorUnchangedAndReleases(t *testing.T) {
	f := NewFakeBackend()
	err := WithLock(context.Background(), f, "k", func(context.Context, *Lease) error { return errFn }, nil)
	if err != errFn {
		t.Fatalf("want fn's error itself, got %v", err)
	}
	if f.Calls("release") != 1 {
		t.Fatal("the lock must be released after fn fails")
	}
}

func TestWithLockReleasesOnPanicAndRepanics(t *testing.T) {
	f := NewFakeBackend()
	defer func() {
		r := recover()
		if r != "boom" {
			t.Fatalf("the panic must continue after the release; recovered %v", r)
		}
		if f.Calls("release") != 1 {
			t.Fatal("the lock must be released before the panic continues")
		}
		if locked, _ := f.IsLocked(context.Background(), "k"); locked {
			t.Fatal("the key must be free after a panicking fn")
		}
	}()
	_ = WithLock(context.Background(), f, "k", func(context.Context, *Lease) error { panic("boom") }, nil)
	t.Fatal("unreachable")
}

func TestWithLockValidatesBeforeIO(t *testing.T) {
	f := NewFakeBackend()
	ctx := context.Background()
	fn := func(context.Context, *Lease) error { t.Error("fn must not run"); return nil }
	for name, opts := range map[string]*LockOptions{
		"negative TTL":     {TTL: -time.Second},
		"negative timeout": {Acquisition: AcquisitionOptions{Timeout: -1}},
		"negative delay":   {Acquisition: AcquisitionOptions{RetryDelay: -1}},
		"bad backoff":      {Acquisition: AcquisitionOptions{Backoff: "linear"}},
		"bad jitter":       {Acquisition: AcquisitionOptions{Jitter: "some"}},
		"sub-ms TTL":       {TTL: time.Microsecond},
	} {
		requireCode(t, WithLock(ctx, f, "k", fn, opts), CodeInvalidArgument)
		_ = name
	}
	requireCode(t, WithLock(ctx, f, "", fn, nil), CodeInvalidArgument)
	requireCode(t, WithLock(ctx, f, "k", nil, nil), CodeInvalidArgument)
	requireCode(t, WithLock(ctx, nil, "k", fn, nil), CodeInvalidArgument)
	if n := f.Calls("acquire"); n != 0 {
		t.Fatalf("invalid input must fail before any I/O; %d acquires ran", n)
	}
}

// --- acquisition: retries, delays, timeout, cancellation

func TestAcquireExponentialDelaysExactAndTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := NewFakeBackend()
		hold(t, f, "k")
		start := time.Now()
		_, err := Lock(t.Context(), f, "k", &LockOptions{Acquisition: AcquisitionOptions{Jitter: jitterNone}})
		e := requireCode(t, err, CodeAcquisitionTimeout)
		// Defaults: 10 retries, 100 ms base, exponential, 5 s timeout. Waits
		// 100, 200, 400, 800, 1600, then 3200 clamped to the 1900 left.
		if got, want := gaps(f.Times("acquire"))[1:], ms(100, 200, 400, 800, 1600); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("delays between attempts: want %v, got %v", want, got)
		}
		if el := time.Since(start); el != defaultAcquireTimeout {
			t.Errorf("the last wait is clamped to the remaining time: want to give up at %v, gave up at %v", defaultAcquireTimeout, el)
		}
		if !strings.Contains(e.Msg, "after 6 attempts") || e.Key != "k" {
			t.Errorf("the error says how many attempts were made (6): %v", err)
		}
	})
}

func TestAcquireMaxRetriesCountsAttempts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := NewFakeBackend()
		hold(t, f, "k")
		start := time.Now()
		_, err := Lock(t.Context(), f, "k", &LockOptions{Acquisition: AcquisitionOptions{
			MaxRetries: 3, RetryDelay: 200 * time.Millisecond, Backoff: backoffFixed, Jitter: jitterNone, Timeout: time.Hour}})
		e := requireCode(t, err, CodeAcquisitionTimeout)
		if got, want := gaps(f.Times("acquire"))[1:], ms(200, 200, 200); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("fixed backoff: want delays %v, got %v", want, got)
		}
		if n := len(f.Times("acquire")) - 1; n != 4 || !strings.Contains(e.Msg, "after 4 attempts") {
			t.Errorf("total attempts = retries + 1 = 4; made %d: %v", n, err)
		}
		if el := time.Since(start); el != 600*time.Millisecond {
			t.Errorf("no wait after the last attempt: want to give up at 600ms, gave up at %v", el)
		}
	})
}

func TestAcquireNoRetries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := NewFakeBackend()
		hold(t, f, "k")
		start := time.Now()
		_, err := Lock(t.Context(), f, "k", &LockOptions{Acquisition: AcquisitionOptions{MaxRetries: -1}})
		requireCode(t, err, CodeAcquisitionTimeout)
		if n := f.Calls("acquire") - 1; n != 1 || time.Since(start) != 0 {
			t.Errorf("-1: want one attempt and no wait, got %d attempts in %v", n, time.Since(start))
		}
		if !strings.Contains(err.Error(), "after 1 attempt in ") {
			t.Errorf("the message counts in English: want %q in %v", "after 1 attempt in ", err)
		}
	})
}

func TestAcquireJitterBounds(t *testing.T) {
	for _, jitter := range []string{jitterEqual, jitterFull} {
		t.Run(string(jitter), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := NewFakeBackend()
				hold(t, f, "k")
				_, err := Lock(t.Context(), f, "k", &LockOptions{Acquisition: AcquisitionOptions{
					MaxRetries: 8, Jitter: jitter, Timeout: time.Hour}})
				requireCode(t, err, CodeAcquisitionTimeout)
				got := gaps(f.Times("acquire"))[1:]
				if len(got) != 8 {
					t.Fatalf("want 8 waits, got %v", got)
				}
				for i, g := range got {
					d := defaultRetryDelay << i
					lo := d / 2
					if jitter == jitterFull {
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

func TestAcquireDelaysAreRandomized(t *testing.T) {
	c, _ := (&LockOptions{}).resolve()
	seen := map[time.Duration]bool{}
	for range 50 {
		seen[c.delay(3)] = true
	}
	if len(seen) < 10 {
		t.Fatalf("equal jitter must randomize delays; 50 draws gave %d values", len(seen))
	}
}

func TestAcquireHugeBackoffDoesNotOverflow(t *testing.T) {
	c, _ := (&LockOptions{Acquisition: AcquisitionOptions{RetryDelay: time.Duration(1<<62 + 1)}}).resolve()
	for _, n := range []int{1, 2, 64, 1000} {
		if d := c.delay(n); d < 0 {
			t.Fatalf("delay(%d) overflowed: %v", n, d)
		}
	}
}

func TestAcquireSucceedsWhenHolderReleases(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := NewFakeBackend()
		h := hold(t, f, "k")
		go func() {
			time.Sleep(250 * time.Millisecond)
			_, _ = f.Release(context.Background(), h.LockID)
		}()
		start := time.Now()
		err := WithLock(t.Context(), f, "k", func(context.Context, *Lease) error {
			if el := time.Since(start); el != 300*time.Millisecond {
				t.Errorf("want the third attempt (after 100+200ms) to win, won at %v", el)
			}
			return nil
		}, &LockOptions{Acquisition: AcquisitionOptions{Jitter: jitterNone}})
		if err != nil {
			t.Fatal(err)
		}
	})
}

func TestAcquireBackendErrorReturnedAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := NewFakeBackend()
		boom := &Error{Op: "acquire", Code: CodeServiceUnavailable, Msg: "down"}
		attempts := 0
		f.SetFail(func(_ context.Context, op string) error {
			if op == "acquire" {
				attempts++
				return boom
			}
			return nil
		})
		start := time.Now()
		_, err := Lock(t.Context(), f, "k", nil)
		if err != boom || attempts != 1 || time.Since(start) != 0 {
			t.Fatalf("a backend error is returned at once and not retried: err %v, %d attempts, %v", err, attempts, time.Since(start))
		}
	})
}

func TestAcquireCancelWhileWaitingAbortsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := NewFakeBackend()
		hold(t, f, "k")
		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(150*time.Millisecond, cancel)
		start := time.Now()
		_, err := Lock(ctx, f, "k", &LockOptions{Acquisition: AcquisitionOptions{Jitter: jitterNone}})
		requireCode(t, err, CodeAborted)
		if !errors.Is(err, context.Canceled) {
			t.Errorf("the cause must be context.Canceled: %v", err)
		}
		if el := time.Since(start); el != 150*time.Millisecond {
			t.Errorf("cancellation must stop the wait at once (150ms), returned at %v", el)
		}
		if n := f.Calls("acquire") - 1; n != 2 {
			t.Errorf("attempts at 0 and 100ms only; got %d", n)
		}
	})
}

func TestAcquireContextDeadlineWhileWaiting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := NewFakeBackend()
		hold(t, f, "k")
		ctx, cancel := context.WithTimeout(t.Context(), 250*time.Millisecond)
		defer cancel()
		_, err := Lock(ctx, f, "k", &LockOptions{Acquisition: AcquisitionOptions{Jitter: jitterNone}})
		requireCode(t, err, CodeAcquisitionTimeout)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("the caller's deadline is the cause: %v", err)
		}
	})
}

func TestAcquireAttemptBoundedByTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := NewFakeBackend()
		f.SetFail(func(ctx context.Context, op string) error {
			<-ctx.Done() // an acquire that never answers (half-open connection)
			return fromContext(ctx, op, nil)
		})
		start := time.Now()
		_, err := Lock(t.Context(), f, "k", &LockOptions{Acquisition: AcquisitionOptions{Timeout: time.Second}})
		requireCode(t, err, CodeAcquisitionTimeout)
		if el := time.Since(start); el != time.Second {
			t.Fatalf("a hanging attempt ends at the acquisition timeout (1s), not at ctx's end; returned at %v", el)
		}
	})
}

// --- release after fn

func TestWithLockReleasesAfterContextCancelledDuringFn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := NewFakeBackend()
		ctx, cancel := context.WithCancel(t.Context())
		err := WithLock(ctx, f, "k", func(ctx context.Context, _ *Lease) error {
			cancel()
			return ctx.Err()
		}, nil)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("fn's error is returned: %v", err)
		}
		if locked, _ := f.IsLocked(context.Background(), "k"); locked || f.Calls("release") != 1 {
			t.Fatal("the lock must be released at once even though ctx was cancelled during fn")
		}
	})
}

func TestWithLockReleaseErrorGoesToCallbackNotResult(t *testing.T) {
	f := NewFakeBackend()
	relErr := &Error{Op: "release", Code: CodeServiceUnavailable, Msg: "down"}
	f.SetFail(func(_ context.Context, op string) error {
		if op == "release" {
			return relErr
		}
		return nil
	})
	for _, fnErr := range []error{nil, errFn} {
		var got []ReleaseErrorInfo
		var lockID string
		err := WithLock(context.Background(), f, "k", func(_ context.Context, l *Lease) error {
			lockID = l.LockID()
			f.Delete(lockID) // let the next iteration acquire
			return fnErr
		}, &LockOptions{OnReleaseError: func(err error, info ReleaseErrorInfo) {
			if err != relErr {
				t.Errorf("callback gets the release error, got %v", err)
			}
			got = append(got, info)
		}})
		if err != fnErr {
			t.Errorf("a release failure never replaces fn's result: want %v, got %v", fnErr, err)
		}
		if len(got) != 1 || got[0].Source != releaseSourceWithLock || got[0].Key != "k" || got[0].LockID != lockID {
			t.Errorf("want one callback with source %q, key and lockId; got %+v", releaseSourceWithLock, got)
		}
	}
}

func TestDefaultReleaseErrorHandlerLogsWithoutKeyOrLockID(t *testing.T) {
	f := NewFakeBackend()
	f.SetFail(func(_ context.Context, op string) error {
		if op == "release" {
			return &Error{Op: "release", Code: CodeServiceUnavailable, Msg: "down"}
		}
		return nil
	})
	logger, buf := captureLogger()
	const key = "customer:alice@example.com"
	var lockID string
	err := WithLock(context.Background(), f, key, func(_ context.Context, l *Lease) error {
		lockID = l.LockID()
		return nil
	}, &LockOptions{Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	if !strings.Contains(out, `"level":"ERROR"`) || !strings.Contains(out, "ServiceUnavailable") || !strings.Contains(out, HashKey(key)) {
		t.Errorf("the default handler must log the failure visibly, with code and key hash; got %s", out)
	}
	if strings.Contains(out, key) || strings.Contains(out, lockID) {
		t.Errorf("the default handler must not print the key or lockId; got %s", out)
	}
}

func TestWithLockReleaseBoundedByReleaseTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := NewFakeBackend()
		f.SetFail(func(ctx context.Context, op string) error {
			if op == "release" {
				<-ctx.Done() // a release that hangs until its context ends
				return fromContext(ctx, op, nil)
			}
			return nil
		})
		var got error
		start := time.Now()
		err := WithLock(t.Context(), f, "k", func(context.Context, *Lease) error { return nil },
			&LockOptions{ReleaseTimeout: 2 * time.Second, OnReleaseError: func(err error, _ ReleaseErrorInfo) { got = err }})
		if err != nil {
			t.Fatal(err)
		}
		if el := time.Since(start); el != 2*time.Second {
			t.Errorf("the release must be bounded by ReleaseTimeout (2s); WithLock took %v", el)
		}
		requireCode(t, got, CodeNetworkTimeout)
	})
}

func TestHelperDoesNotRepeatFenceWarning(t *testing.T) {
	// Backend.Acquire logs the fence warning itself; the helper must not
	// add a second record. (The conformance suite checks the core's one.)
	f := NewFakeBackend()
	f.SetFence("k", rules.FenceWarn+10)
	logger, buf := captureLogger()
	err := WithLock(context.Background(), f, "k", func(_ context.Context, l *Lease) error {
		if n, _ := l.Fence().Int64(); n != rules.FenceWarn+11 {
			t.Errorf("setup: fence %s", l.Fence())
		}
		return nil
	}, &LockOptions{Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	if out := buf.String(); out != "" {
		t.Fatalf("the helper must log nothing about fences; got %s", out)
	}
}
