package conformance

import (
	"time"

	"github.com/syncguard/syncguard-go/multilock"
	"github.com/syncguard/syncguard-go/syncguard"
)

// disjointAtOnce: sets with no key in common are held at the same time,
// also while a waiter for a set overlapping the first one is queued. The
// first holder keeps its set until the disjoint set is admitted, so a
// set locker that admits one set at a time (one lock for every set, or a
// queue that serializes unrelated sets) never admits it: the case then
// fails when its generous bound (half the case's time, at most 20 s)
// runs out, which only such a bug reaches.
func (e *mlEnv) disjointAtOnce() {
	opts := &syncguard.LockOptions{TTL: time.Minute, Acquisition: syncguard.AcquisitionOptions{Timeout: 20 * time.Second}}
	first, err := multilock.Lock(e.ctx, e.tg.Locker, e.keys("a", "b"), opts)
	if err != nil {
		e.t.Fatalf("first set {a, b}: %v", err)
	}
	defer first.Close()
	// A waiter for {b, c}, queued behind the first holder.
	waiter := make(chan error, 1)
	go func() {
		l, err := multilock.Lock(e.ctx, e.other(1), e.keys("b", "c"), opts)
		if err == nil {
			l.Close()
		}
		waiter <- err
	}()
	e.waitQueued(e.tg.Locker, "c")
	bound := 20 * time.Second
	if dl, ok := e.ctx.Deadline(); ok {
		bound = min(bound, time.Until(dl)/2)
	}
	type result struct {
		lease *multilock.Lease
		err   error
	}
	admitted := make(chan result, 1)
	go func() {
		l, err := multilock.Lock(e.ctx, e.other(0), e.keys("d", "e"), &syncguard.LockOptions{TTL: time.Minute,
			Acquisition: syncguard.AcquisitionOptions{Timeout: bound}})
		admitted <- result{l, err}
	}()
	select {
	case r := <-admitted:
		if r.err != nil {
			e.t.Fatalf("rule: sets with no key in common are held at once (the holder of {a, b} waits for {d, e}): %v", r.err)
		}
		if first.Err() != nil || !e.isLocked(e.tg.Locker, "a") {
			e.t.Fatalf("rule: {d, e} is admitted while {a, b} is held; {a, b} was lost: %v", first.Err())
		}
		r.lease.Close()
	case <-time.After(bound + 5*time.Second):
		e.t.Fatalf("rule: sets with no key in common are held at once: {d, e} was not admitted within %v while {a, b} was held", bound)
	}
	if e.isLocked(e.tg.Locker, "c") {
		e.t.Fatalf("rule: the waiter for {b, c} takes nothing while b is held")
	}
	if r, err := first.Release(e.ctx); err != nil || !r.OK {
		e.t.Fatalf("release {a, b}: %+v, %v", r, err)
	}
	if err := <-waiter; err != nil {
		e.t.Fatalf("rule: the waiter for {b, c} gets its set once {a, b} is released: %v", err)
	}
}
