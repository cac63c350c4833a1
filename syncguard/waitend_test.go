package syncguard_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/syncguard/syncguard-go/syncguard"
	"github.com/syncguard/syncguard-go/syncguardtest"
)

// How a wait ends (issue 26): busy (AcquisitionTimeout) once any attempt got
// an answer, whatever cut the last attempt; an outage only when no attempt
// of the whole wait got one, with the last real cause.

// slowAfter makes the acquires of b from the nth on (1-based) answer only
// after d, or fail with refused before the nth; ctx's end cuts a slow one
// with the NetworkTimeout a Backend reports.
func slowAfter(b *syncguardtest.Backend, n int, d time.Duration, before error) *int {
	calls := new(int)
	b.SetHook(func(ctx context.Context, c syncguardtest.Call) error {
		if c.Op != syncguardtest.OpAcquire {
			return nil
		}
		*calls++
		if *calls < n {
			return before
		}
		select {
		case <-time.After(d):
			return nil
		case <-ctx.Done():
			return &syncguard.Error{Op: "acquire", Code: syncguard.ErrNetworkTimeout, Msg: "context deadline exceeded", Err: ctx.Err()}
		}
	})
	return calls
}

var refused = &syncguard.Error{Op: "acquire", Code: syncguard.ErrServiceUnavailable, Msg: "dial tcp 127.0.0.1:1: connect: connection refused"}

func wantBusy(t *testing.T, what string, err error) {
	t.Helper()
	requireCode(t, err, syncguard.ErrAcquisitionTimeout)
	if errors.Is(err, syncguard.ErrNetworkTimeout) || errors.Is(err, syncguard.ErrServiceUnavailable) {
		t.Errorf("%s: the key was seen held; an outage code in the chain makes callers (and syncguard run) report an unreachable server: %v", what, err)
	}
}

// The deadline cuts an attempt that is slow (a loaded machine) after an
// earlier attempt saw the key held: busy, not NetworkTimeout. The old loop
// returned AcquisitionTimeout wrapping NetworkTimeout, which errors.Is
// reads as an outage.
func TestWaitEndCutsSlowAttemptAfterHeldIsBusy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := syncguardtest.New()
		hold(t, b, "k")
		slowAfter(b, 2, time.Hour, nil) // the first attempt answers "held" at once
		_, err := syncguard.Lock(t.Context(), b, "k", &syncguard.LockOptions{Acquisition: syncguard.AcquisitionOptions{Timeout: 200 * time.Millisecond}})
		wantBusy(t, "Timeout cuts a slow attempt", err)
	})
}

// The same with the caller's context deadline instead of Timeout, and with
// FailFast (which returns outages at once, not the end of the wait).
func TestWaitEndContextDeadlineCutsAttemptAfterHeldIsBusy(t *testing.T) {
	for _, failFast := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			b := syncguardtest.New()
			hold(t, b, "k")
			slowAfter(b, 2, time.Hour, nil)
			ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
			defer cancel()
			_, err := syncguard.Lock(ctx, b, "k", &syncguard.LockOptions{Acquisition: syncguard.AcquisitionOptions{FailFast: failFast}})
			wantBusy(t, "ctx's deadline cuts a slow attempt", err)
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("the caller's deadline is the cause: %v", err)
			}
		})
	}
}

// Held, then the server goes away for the rest of the wait: still busy
// (an answer came), and the message says the last attempts got none.
func TestWaitEndOutageAfterHeldIsBusy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := syncguardtest.New()
		hold(t, b, "k")
		n := 0
		b.SetHook(func(_ context.Context, c syncguardtest.Call) error {
			if c.Op == syncguardtest.OpAcquire {
				if n++; n > 1 {
					return refused
				}
			}
			return nil
		})
		// 20 s: a queued waiter behind a live lock attempts again at its renewal (10 s).
		_, err := syncguard.Lock(t.Context(), b, "k", &syncguard.LockOptions{Acquisition: syncguard.AcquisitionOptions{Timeout: 20 * time.Second}})
		wantBusy(t, "an outage after the key was seen held", err)
		if !strings.Contains(err.Error(), "got no answer") {
			t.Errorf("the message says the last attempts got no answer: %v", err)
		}
	})
}

// Refused for the whole wait, the last attempt cut by the deadline: the
// outage, with the refused connection as its cause, not "deadline
// exceeded" (the old loop: AcquisitionTimeout wrapping the cut attempt).
func TestWaitEndNoAnswerCarriesRealCause(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := syncguardtest.New()
		calls := slowAfter(b, 4, time.Hour, refused) // refused 3 times, then a hang the deadline cuts
		_, err := syncguard.Lock(t.Context(), b, "k", &syncguard.LockOptions{Acquisition: syncguard.AcquisitionOptions{Timeout: 2 * time.Second, RetryDelay: 50 * time.Millisecond}})
		requireCode(t, err, syncguard.ErrServiceUnavailable)
		if *calls < 4 || !errors.Is(err, refused) || errors.Is(err, syncguard.ErrAcquisitionTimeout) || !strings.Contains(err.Error(), "connection refused") {
			t.Fatalf("want ServiceUnavailable carrying the refused connection after %d attempts; got %v", *calls, err)
		}
	})
}

// A single attempt (MaxRetries < 0) that gets no answer: NetworkTimeout.
func TestWaitEndSingleAttemptNoAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := syncguardtest.New()
		slowAfter(b, 1, time.Hour, nil)
		_, err := syncguard.Lock(t.Context(), b, "k", &syncguard.LockOptions{Acquisition: syncguard.AcquisitionOptions{MaxRetries: -1, Timeout: time.Second}})
		requireCode(t, err, syncguard.ErrNetworkTimeout)
	})
}

// "Too many connections" (RateLimited) is ridden out like any retryable
// error: the wait goes on and takes the key once connections are free;
// FailFast returns it at once.
func TestWaitRidesOutRateLimited(t *testing.T) {
	tooMany := &syncguard.Error{Op: "acquire", Code: syncguard.ErrRateLimited, SQLState: "53300", Msg: "too many connections"}
	for _, failFast := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			b := syncguardtest.New()
			n := 0
			b.SetHook(func(_ context.Context, c syncguardtest.Call) error {
				if c.Op == syncguardtest.OpAcquire {
					if n++; n <= 3 {
						return tooMany
					}
				}
				return nil
			})
			lease, err := syncguard.Lock(t.Context(), b, "k", &syncguard.LockOptions{Acquisition: syncguard.AcquisitionOptions{FailFast: failFast}})
			if failFast {
				requireCode(t, err, syncguard.ErrRateLimited)
				return
			}
			if err != nil || n != 4 {
				t.Fatalf("rule: a wait rides RateLimited out; after %d attempts: %v", n, err)
			}
			lease.Close()
		})
	}
}

// A wait whose every attempt the server answered with an error (a full
// lock table, 53200) says so: "no answer from the server" sent operators
// looking for a network fault. With some attempts unanswered it counts
// both.
func TestWaitEndEveryAttemptRefusedSaysSo(t *testing.T) {
	full := &syncguard.Error{Op: "acquire", Code: syncguard.ErrServiceUnavailable, SQLState: "53200", Msg: "server out of shared memory"}
	for _, mixed := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			b := syncguardtest.New()
			n := 0
			b.SetHook(func(_ context.Context, c syncguardtest.Call) error {
				if c.Op != syncguardtest.OpAcquire {
					return nil
				}
				if n++; mixed && n%2 == 0 {
					return refused
				}
				return full
			})
			_, err := syncguard.Lock(t.Context(), b, "k", &syncguard.LockOptions{Acquisition: syncguard.AcquisitionOptions{Timeout: 5 * time.Second}})
			requireCode(t, err, syncguard.ErrServiceUnavailable)
			msg := err.Error()
			if strings.Contains(msg, "no answer from the server") || !strings.Contains(msg, "answered") {
				t.Errorf("mixed %v, %d attempts: %v", mixed, n, msg)
			}
			if !mixed && !strings.Contains(msg, "answered all") {
				t.Errorf("every attempt refused: %v", msg)
			}
		})
	}
}
