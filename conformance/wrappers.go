package conformance

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/syncguard/syncguard-go/internal/kit"
	"github.com/syncguard/syncguard-go/syncguard"
)

// callersLocker is a Locker of a caller's own around a Backend, as a team
// writes for tracing: it counts acquires and passes ctx on. With queue it
// also forwards Queue, counting its waiters' attempts too;
// without, Lock polls through it.
type callersLocker struct {
	syncguard.Locker
	queue    bool
	acquires atomic.Int64
}

func (c *callersLocker) Acquire(ctx context.Context, key string, ttl time.Duration) (syncguard.AcquireResult, error) {
	c.acquires.Add(1)
	return c.Locker.Acquire(ctx, key, ttl)
}

func (c *callersLocker) Queue(key, identity string, once bool) kit.Wait {
	return forwardQueue(c.Locker, c.queue, key, identity, once, func(ctx context.Context, w kit.Wait, ttl time.Duration) (syncguard.AcquireResult, error) {
		c.acquires.Add(1)
		return w.Attempt(ctx, ttl)
	})
}

// gatedLocker passes attempts on until closed is set; then each attempt
// waits for open to be closed first. It forwards Queue.
type gatedLocker struct {
	syncguard.Locker
	closed atomic.Bool
	open   chan struct{}
}

func (g *gatedLocker) gate(ctx context.Context) {
	if g.closed.Load() {
		select {
		case <-g.open:
		case <-ctx.Done():
		}
	}
}

func (g *gatedLocker) Acquire(ctx context.Context, key string, ttl time.Duration) (syncguard.AcquireResult, error) {
	g.gate(ctx)
	return g.Locker.Acquire(ctx, key, ttl)
}

func (g *gatedLocker) Queue(key, identity string, once bool) kit.Wait {
	return forwardQueue(g.Locker, true, key, identity, once, func(ctx context.Context, w kit.Wait, ttl time.Duration) (syncguard.AcquireResult, error) {
		g.gate(ctx)
		return w.Attempt(ctx, ttl)
	})
}

// forwardQueue is a wrapper's Queue: the inner Locker's waiter, whose
// attempts go through attempt (nil when on is false or inner has no queue).
func forwardQueue(inner syncguard.Locker, on bool, key, identity string, once bool, attempt func(context.Context, kit.Wait, time.Duration) (syncguard.AcquireResult, error)) kit.Wait {
	q, ok := inner.(kit.Queuer)
	if !on || !ok {
		return nil
	}
	w := q.Queue(key, identity, once)
	if w == nil {
		return nil
	}
	return &forwardedWaiter{Wait: w, attempt: attempt}
}

type forwardedWaiter struct {
	kit.Wait
	attempt func(context.Context, kit.Wait, time.Duration) (syncguard.AcquireResult, error)
}

func (f *forwardedWaiter) Attempt(ctx context.Context, ttl time.Duration) (syncguard.AcquireResult, error) {
	return f.attempt(ctx, f.Wait, ttl)
}
