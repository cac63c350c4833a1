package conformance

import (
	"context"
	"errors"
	"time"

	"github.com/syncguard/syncguard-go/syncguard"
)

func init() {
	register("Context/CancelledGivesAbortedForEveryOperation", func(e *env) {
		k, r := e.hold("cancelled", 30*time.Second)
		same := e.unchanged(k)
		ctx, cancel := context.WithCancel(e.ctx)
		cancel()
		for op, err := range allOps(ctx, e.b2, e.key("other"), r.LockID, time.Second) {
			if !errIs(err, syncguard.ErrAborted) || !errors.Is(err, context.Canceled) {
				e.t.Errorf("rule: every operation on a cancelled context fails with ErrAborted (wrapping context.Canceled); %s got %v", op, err)
			}
		}
		same("a cancelled release or extend changes nothing")
	})

	register("Context/DeadlineGivesNetworkTimeoutForEveryOperation", func(e *env) {
		k, r := e.hold("deadline", 30*time.Second)
		same := e.unchanged(k)
		ctx, cancel := context.WithDeadline(e.ctx, time.Now().Add(-time.Second))
		defer cancel()
		for op, err := range allOps(ctx, e.b2, e.key("other"), r.LockID, time.Second) {
			if !errIs(err, syncguard.ErrNetworkTimeout) || !errors.Is(err, context.DeadlineExceeded) {
				e.t.Errorf("rule: every operation past its context deadline fails with ErrNetworkTimeout (wrapping context.DeadlineExceeded); %s got %v", op, err)
			}
		}
		same("a release or extend past its deadline changes nothing")
	})

	registerSQL("Context/CancelBlockedAcquireWithin500ms", func(e *sqlEnv) {
		e.blockedAcquire(func(ctx context.Context) (context.Context, func()) {
			return context.WithCancel(ctx)
		}, syncguard.ErrAborted, "ErrAborted", true)
	})

	registerSQL("Context/DeadlineOnBlockedAcquire", func(e *sqlEnv) {
		e.blockedAcquire(func(ctx context.Context) (context.Context, func()) {
			return context.WithTimeout(ctx, 300*time.Millisecond)
		}, syncguard.ErrNetworkTimeout, "ErrNetworkTimeout", false)
	})
}

// blockedAcquire runs an acquire that waits behind a row lock held by
// another transaction, ends it through its context (cancel when explicit,
// else the context's own deadline), and checks the error, the time to
// return and that no lock is left behind once the blocker rolls back.
func (e *sqlEnv) blockedAcquire(mkCtx func(context.Context) (context.Context, func()), want error, wantName string, explicit bool) {
	e.t.Helper()
	k := e.key("blocked")
	unblock := e.holdFenceRow(k)
	ctx, cancel := mkCtx(e.ctx)
	defer cancel()
	type res struct {
		r   syncguard.AcquireResult
		err error
		at  time.Time
	}
	ch := make(chan res, 1)
	returned := make(chan struct{})
	go func() {
		r, err := e.b.Acquire(ctx, k, 30*time.Second)
		ch <- res{r, err, time.Now()}
		close(returned)
	}()
	var got res
	// await takes the acquire's result; still blocked 10 s (× the
	// slowdown) on it fails the case with rule.
	await := func(rule string) {
		select {
		case got = <-ch:
		case <-time.After(e.slow().scale(10 * time.Second)):
			unblock()
			<-ch
			e.t.Fatalf("rule: %s", rule)
		}
	}
	if explicit {
		if pid := e.waitLockWaiter(e.cfg.TableName, returned); pid == 0 {
			unblock()
			got = <-ch
			e.t.Fatalf("setup: found no server backend waiting on a lock whose query text names %q within %v (the acquire returned %+v, %v)", e.cfg.TableName, e.slow().scale(10*time.Second), got.r, got.err)
		}
		cancelAt := time.Now()
		cancel()
		await("a cancelled acquire returns promptly; still blocked 10 s after the cancel")
		if d, budget := got.at.Sub(cancelAt), e.slow().scale(500*time.Millisecond); d > budget {
			e.t.Errorf("rule: an acquire blocked on the server returns within 500 ms of its context's cancellation (%v on this machine); took %v (%s)", budget, d, e.slow())
		}
	} else {
		await("an acquire past its deadline returns promptly; still blocked 10 s later")
	}
	if got.r.OK || !errIs(got.err, want) {
		e.t.Errorf("rule: an acquire blocked on the server and ended by its context fails with %s; got %+v, %v", wantName, got.r, got.err)
	}
	// The statement may still run on the server once the blocker goes; the
	// backend must then release what it took, in the background.
	unblock()
	deadline := time.Now().Add(e.slow().scale(3 * time.Second))
	var trace []bool
	for {
		locked := e.isLocked(e.b2, k)
		if len(trace) == 0 || trace[len(trace)-1] != locked {
			trace = append(trace, locked)
		}
		if time.Now().After(deadline) {
			if locked {
				e.t.Errorf("rule: an acquire ended by its context leaves no lock behind; key %q still locked %v after the blocker rolled back (IsLocked changes seen: %v)", k, e.slow().scale(3*time.Second), trace)
			}
			break
		}
		select {
		case <-time.After(100 * time.Millisecond):
		case <-e.ctx.Done():
			e.t.Fatalf("setup: the case deadline passed watching key %q after the blocker rolled back", k)
		}
	}
	if r := e.acquire(e.b2, k, time.Second); !r.OK {
		e.t.Errorf("rule: the key is free after a cancelled acquire; got %+v", r)
	}
}
