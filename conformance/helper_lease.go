package conformance

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/syncguard/syncguard-go/internal/rules"
	"github.com/syncguard/syncguard-go/syncguard"
)

// Cases of lease auto-extension and of the lock-lost signal, end to end.

func init() {
	register("Helper/AutoExtendKeepsLockPastTTL", func(e *env) {
		k := e.key("autoextend")
		err := syncguard.WithLock(e.ctx, e.b, k, func(ctx context.Context, l *syncguard.Lease) error {
			first := l.ExpiresAt()
			// Past the first expiry plus the liveness tolerance: without an
			// extension the key would be free by now.
			// Real time, the lease's own: a jump of a controllable clock
			// would be a pause of the process, which no lease survives.
			e.sleepPast(first.UnixMilli() + rules.ToleranceMs + 200)
			if ctx.Err() != nil {
				e.t.Errorf("rule: fn's context stays live while auto-extension succeeds; cancelled with %v", context.Cause(ctx))
			}
			if !e.isLocked(e.b2, k) {
				e.t.Errorf("rule: an auto-extended lock outlives its TTL; key %q is free after it", k)
			}
			if r := e.acquire(e.b2, k, time.Second); r.OK {
				e.t.Errorf("rule: an auto-extended lock stays exclusive past its TTL; another pool acquired it")
			}
			if !l.ExpiresAt().After(first) {
				e.t.Errorf("rule: the lease follows the server's expiry; ExpiresAt still %v", l.ExpiresAt())
			}
			return nil
		}, &syncguard.LockOptions{TTL: 6 * time.Second, AutoExtend: true}) // room for slow extends on a loaded machine behind a pooler
		e.must(err, "WithLock with AutoExtend")
		if e.isLocked(e.b2, k) {
			e.t.Errorf("rule: WithLock releases an auto-extended lock after fn; key %q still locked", k)
		}
	})

	lossCase := func(name, hook, wantReason string, sabotage func(e *env) func(ctx context.Context, lockID string) error) {
		register("Helper/LockLossWhen"+name+"CancelsFnBeforeExpiry", func(e *env) {
			do := sabotage(e)
			e.skipUnless(do != nil, hook)
			k := e.key("lost")
			var (
				original time.Time
				cause    error
				nowMs    int64
			)
			err := syncguard.WithLock(e.ctx, e.b, k, func(ctx context.Context, l *syncguard.Lease) error {
				original = l.ExpiresAt()
				e.must(do(e.ctx, l.LockID()), "Target."+hook)
				select {
				case <-ctx.Done():
					nowMs = e.nowMs()
					cause = context.Cause(ctx)
				case <-e.ctx.Done():
					e.t.Errorf("rule: fn's context is cancelled when the lock is lost (%s); it never was", name)
				}
				return cause
				// The TTL stretches by the slowdown: at 36x CPU and 23 ms
				// round trips 3 s left no extend the time to come back
				// with "expired" before the lifetime ran out, nor the
				// clock read after the cancellation the time to come
				// back before the original expiry.
			}, &syncguard.LockOptions{TTL: e.slow().scale(3 * time.Second), AutoExtend: true})
			if !errors.Is(cause, syncguard.ErrLockLost) || !errors.Is(err, syncguard.ErrLockLost) {
				e.t.Fatalf("rule: the cancellation cause of a lost lock is ErrLockLost; cause %v, WithLock returned %v", cause, err)
			}
			if !strings.Contains(cause.Error(), wantReason) {
				e.t.Errorf("rule: the cause says how the lock was lost (%s); got %v", wantReason, cause)
			}
			if nowMs >= original.UnixMilli() {
				e.t.Errorf("rule: a lost lock cancels fn before its original expiry %d on the backend's clock; it was %d", original.UnixMilli(), nowMs)
			}
		})
	}
	lossCase("RowDeleted", "Delete", "gone", func(e *env) func(context.Context, string) error { return e.tg.Delete })
	lossCase("RowExpired", "Expire", "expired", func(e *env) func(context.Context, string) error { return e.tg.Expire })
}
