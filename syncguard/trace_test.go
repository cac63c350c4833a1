package syncguard_test

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

type traceMark struct{}

// recTracer records each call as a line; the context of LockStart and
// OpStart carries a mark, so that each call shows the innermost mark of
// its ctx: what the traced work ran under.
type recTracer struct {
	mu    sync.Mutex
	lines []string
	locks []syncguard.TraceLock // the data of WaitEnd, HoldEnd and LockEnd
	panic bool                  // every method panics after recording
}

func (r *recTracer) add(ctx context.Context, s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	mark, _ := ctx.Value(traceMark{}).(string)
	r.lines = append(r.lines, s+" <"+mark+">")
}

func (r *recTracer) lock(ctx context.Context, what string, l syncguard.TraceLock) {
	r.add(ctx, fmt.Sprintf("%s %s attempts=%d err=%v loss=%s", what, l.Key, l.Attempts, l.Err != nil, l.LossReason))
	r.mu.Lock()
	r.locks = append(r.locks, l)
	r.mu.Unlock()
	r.maybePanic()
}

func (r *recTracer) maybePanic() {
	if r.panic {
		panic("tracer bug")
	}
}

func (r *recTracer) OpStart(ctx context.Context, op syncguard.TraceOp) context.Context {
	r.add(ctx, fmt.Sprintf("start %s#%d", op.Op, op.Attempt))
	r.maybePanic()
	return context.WithValue(ctx, traceMark{}, op.Op)
}

func (r *recTracer) OpEnd(ctx context.Context, op syncguard.TraceOp) {
	r.add(ctx, fmt.Sprintf("end %s#%d ok=%v reason=%s", op.Op, op.Attempt, op.OK, op.Reason))
	r.maybePanic()
}

func (r *recTracer) LockStart(ctx context.Context, l syncguard.TraceLock) context.Context {
	r.add(ctx, fmt.Sprintf("lock %s withLock=%v", l.Key, l.WithLock))
	r.maybePanic()
	return context.WithValue(ctx, traceMark{}, "lock:"+l.Key)
}

func (r *recTracer) WaitEnd(ctx context.Context, l syncguard.TraceLock) { r.lock(ctx, "waited", l) }
func (r *recTracer) HoldEnd(ctx context.Context, l syncguard.TraceLock) { r.lock(ctx, "held", l) }
func (r *recTracer) LockEnd(ctx context.Context, l syncguard.TraceLock) { r.lock(ctx, "ended", l) }

func (r *recTracer) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.lines, "\n")
}

func (r *recTracer) reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lines, r.locks = nil, nil
}

func wantTrace(t *testing.T, r *recTracer, want ...string) {
	t.Helper()
	if got := r.String(); got != strings.Join(want, "\n") {
		t.Errorf("trace:\n%s\nwant:\n%s", got, strings.Join(want, "\n"))
	}
}

// Rule: a Tracer sees each attempt of a wait, the wait's end, the
// operations of the lease (release) and the holding's end, in order, each
// under the context LockStart returned (the attempts, the release and
// fn's own operations are its children); OpStart's context reaches its
// operation's end.
func TestTracerSeesWaitAttemptsAndHolding(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		locks := syncguardtest.New()
		rec := &recTracer{}
		locks.SetTracer(rec)
		if err := locks.Contend("k", 1); err != nil {
			t.Fatal(err)
		}
		err := syncguard.WithLock(ctx, locks, "k", func(ctx context.Context, _ *syncguard.Lease) error {
			_, err := locks.IsLocked(ctx, "other")
			return err
		}, nil)
		if err != nil {
			t.Fatal(err)
		}
		wantTrace(t, rec,
			"lock k withLock=true <>",
			"start acquire#1 <lock:k>",
			"end acquire#1 ok=false reason=locked <acquire>",
			"start acquire#2 <lock:k>",
			"end acquire#2 ok=true reason= <acquire>",
			"waited k attempts=2 err=false loss= <lock:k>",
			"start isLocked#0 <lock:k>",
			"end isLocked#0 ok=false reason= <isLocked>",
			"start release#0 <lock:k>",
			"end release#0 ok=true reason= <release>",
			"held k attempts=2 err=true loss= <lock:k>",
			"ended k attempts=2 err=false loss= <lock:k>",
		)
		rec.mu.Lock()
		held := rec.locks[1]
		rec.mu.Unlock()
		if !errors.Is(held.Err, syncguard.ErrLeaseReleased) || held.LockID == "" || held.Fence == "" {
			t.Errorf("HoldEnd of a released lease: %+v", held)
		}

		// Lock: its end follows the holding's; fn's error ends WithLock.
		rec.reset()
		lease, err := syncguard.Lock(ctx, locks, "k", nil)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second)
		lease.Close()
		boom := errors.New("boom")
		if err := syncguard.WithLock(ctx, locks, "j", func(context.Context, *syncguard.Lease) error { return boom }, nil); err != boom {
			t.Fatal(err)
		}
		wantTrace(t, rec,
			"lock k withLock=false <>",
			"start acquire#1 <lock:k>",
			"end acquire#1 ok=true reason= <acquire>",
			"waited k attempts=1 err=false loss= <lock:k>",
			"start release#0 <lock:k>",
			"end release#0 ok=true reason= <release>",
			"held k attempts=1 err=true loss= <lock:k>",
			"ended k attempts=1 err=false loss= <lock:k>",
			"lock j withLock=true <>",
			"start acquire#1 <lock:j>",
			"end acquire#1 ok=true reason= <acquire>",
			"waited j attempts=1 err=false loss= <lock:j>",
			"start release#0 <lock:j>",
			"end release#0 ok=true reason= <release>",
			"held j attempts=1 err=true loss= <lock:j>",
			"ended j attempts=1 err=true loss= <lock:j>",
		)
		rec.mu.Lock()
		if held := rec.locks[1]; held.Held != time.Second {
			t.Errorf("HoldEnd's Held = %v, want the 1 s the lease was held", held.Held)
		}
		if end := rec.locks[5]; end.Err != boom {
			t.Errorf("WithLock's LockEnd has Err %v, want fn's error", end.Err)
		}
		rec.mu.Unlock()

		// A wait that gives up ends the call at once.
		rec.reset()
		if err := locks.Contend("k", 1000); err != nil {
			t.Fatal(err)
		}
		_, err = syncguard.Lock(ctx, locks, "k", &syncguard.LockOptions{Acquisition: syncguard.AcquisitionOptions{MaxRetries: -1}})
		if !errors.Is(err, syncguard.ErrAcquisitionTimeout) {
			t.Fatal(err)
		}
		wantTrace(t, rec,
			"lock k withLock=false <>",
			"start acquire#1 <lock:k>",
			"end acquire#1 ok=false reason=locked <acquire>",
			"waited k attempts=1 err=true loss= <lock:k>",
			"ended k attempts=1 err=true loss= <lock:k>",
		)
	})
}

// Rule: the holding's end says why a lease lost its lock, once, when it
// loses it; a release that finds the lock gone reports the loss too.
func TestTracerLossReasons(t *testing.T) {
	for _, tc := range []struct {
		name, want string
		lose       func(locks *syncguardtest.Backend, lease *syncguard.Lease)
		released   bool
	}{
		{"extend finds it gone", "gone", func(locks *syncguardtest.Backend, lease *syncguard.Lease) {
			locks.Delete(lease.LockID())
			lease.Extend(context.Background(), time.Minute)
		}, false},
		{"extend finds it expired", "expired", func(locks *syncguardtest.Backend, lease *syncguard.Lease) {
			locks.Expire(lease.LockID())
			lease.Extend(context.Background(), time.Minute)
		}, false},
		{"not extended", "not-extended", func(locks *syncguardtest.Backend, lease *syncguard.Lease) {
			time.Sleep(2 * time.Minute)
		}, false},
		{"release finds it gone", "gone", func(locks *syncguardtest.Backend, lease *syncguard.Lease) {
			locks.Delete(lease.LockID())
			lease.Release(context.Background())
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				locks := syncguardtest.New()
				rec := &recTracer{}
				locks.SetTracer(rec)
				lease, err := syncguard.Lock(context.Background(), locks, "k", &syncguard.LockOptions{TTL: time.Minute})
				if err != nil {
					t.Fatal(err)
				}
				tc.lose(locks, lease)
				synctest.Wait()
				lease.Close()
				rec.mu.Lock()
				defer rec.mu.Unlock()
				var held []syncguard.TraceLock
				for _, l := range rec.locks[1:] {
					if l.Err != nil || l.LossReason != "" {
						held = append(held, l)
					}
				}
				if len(held) != 1 || held[0].LossReason != tc.want || errors.Is(held[0].Err, syncguard.ErrLeaseReleased) != tc.released {
					t.Fatalf("HoldEnd: %+v; want one, LossReason %q\n%s", held, tc.want, strings.Join(rec.lines, "\n"))
				}
			})
		})
	}
}

// Rule: a Tracer that panics breaks nothing: the lock is taken, fn runs,
// the lock is released, and each panic is logged.
func TestPanickingTracerBreaksNothing(t *testing.T) {
	locks := syncguardtest.New()
	rec := &recTracer{panic: true}
	locks.SetTracer(rec)
	ran := false
	err := syncguard.WithLock(context.Background(), locks, "k", func(ctx context.Context, _ *syncguard.Lease) error {
		ran = true
		_, err := locks.IsLocked(ctx, "k")
		return err
	}, nil)
	if err != nil || !ran {
		t.Fatalf("WithLock with a panicking Tracer: %v, fn ran %v", err, ran)
	}
	if locks.Len() != 0 {
		t.Fatal("the lock was not released")
	}
	// A LockStart that panicked gets no other call for its lock; the
	// operations are still traced, without their End when OpStart panicked.
	got := rec.String()
	if strings.Contains(got, "waited") || strings.Contains(got, "end ") || !strings.Contains(got, "start release#0 <>") {
		t.Errorf("trace with a panicking Tracer:\n%s", got)
	}
}

// Rule: LockOptions.Tracer traces one call on any Locker (a lock kind's
// too); a polling wait
// on a Locker with a Tracer of its own is traced by its Acquire alone.
func TestLockOptionsTracerAndPolling(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		locks := syncguardtest.New()
		rec := &recTracer{}
		if err := syncguard.WithLock(ctx, locks, "k", nop, &syncguard.LockOptions{Tracer: rec}); err != nil {
			t.Fatal(err)
		}
		wantTrace(t, rec,
			"lock k withLock=true <>",
			"start acquire#1 <lock:k>",
			"end acquire#1 ok=true reason= <acquire>",
			"waited k attempts=1 err=false loss= <lock:k>",
			"held k attempts=1 err=true loss= <lock:k>",
			"ended k attempts=1 err=false loss= <lock:k>",
		)

		// A lock kind's wait (here the fake semaphore's) reaches it too.
		rec.reset()
		if err := syncguard.WithLock(ctx, syncguardtest.NewSemaphore(2), "s", nop, &syncguard.LockOptions{Tracer: rec}); err != nil {
			t.Fatal(err)
		}
		if got := rec.String(); !strings.Contains(got, "waited s attempts=1 err=false") || !strings.Contains(got, "ended s") {
			t.Errorf("a semaphore's wait and holding with LockOptions.Tracer:\n%s", got)
		}

		rec.reset()
		locks.SetTracer(rec)
		if err := locks.Contend("k", 1); err != nil {
			t.Fatal(err)
		}
		if err := syncguard.WithLock(ctx, polled{locks}, "k", nop, nil); err != nil {
			t.Fatal(err)
		}
		if got := strings.Count(rec.String(), "start acquire#0"); got != 2 || strings.Contains(rec.String(), "acquire#1") {
			t.Errorf("a polling wait's attempts: want 2 traced by the Locker's Acquire only:\n%s", rec.String())
		}
	})
}

// polled hides the fake's queue, not its Tracer: Lock polls it.
type polled struct{ *syncguardtest.Backend }

func (polled) Queue() {}

func nop(context.Context, *syncguard.Lease) error { return nil }
