package conformance

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/syncguard/syncguard-go/internal/rules"
	"github.com/syncguard/syncguard-go/syncguard"
)

// Cases of the lock helper (syncguard.WithLock, syncguard.Lock): the layer
// most programs use on top of the single-attempt backend.

var errFromFn = errors.New("conformance: fn's own error")

func init() {
	register("Helper/WithLockMutualExclusionAcrossPools", func(e *env) {
		// 8 goroutines over two pools increment a counter that nothing but
		// the lock guards, with a pause between read and write. Any overlap
		// of two critical sections loses an increment or is seen entering.
		const workers = 8
		each := e.slow().rounds(15, 5) // fewer on a slow machine
		k := e.key("mutex")
		var counter, inside atomic.Int64
		opts := &syncguard.LockOptions{TTL: 30 * time.Second, Acquisition: syncguard.AcquisitionOptions{
			MaxRetries: 100000, RetryDelay: 5 * time.Millisecond, Backoff: "fixed",
			Jitter: "full", Timeout: e.slow().scale(20 * time.Second)}}
		e.parallel(workers, func(_ int, b syncguard.LockBackend) {
			for range each {
				err := syncguard.WithLock(e.ctx, b, k, func(context.Context, *syncguard.Lease) error {
					if n := inside.Add(1); n != 1 {
						e.t.Errorf("rule: WithLock runs one fn per key at a time; %d were inside at once", n)
					}
					v := counter.Load()
					time.Sleep(time.Millisecond)
					counter.Store(v + 1)
					inside.Add(-1)
					return nil
				}, opts)
				if err != nil {
					e.t.Errorf("rule: WithLock under contention waits and succeeds; got %v", err)
					return
				}
			}
		})
		if got := counter.Load(); got != int64(workers*each) {
			e.t.Errorf("rule: WithLock gives mutual exclusion across pools; %d increments under the lock left the counter at %d", workers*each, got)
		}
		if e.isLocked(e.b, k) {
			e.t.Errorf("rule: WithLock releases after fn; key %q still locked", k)
		}
	})

	register("Helper/AcquisitionTimeoutWhileHeld", func(e *env) {
		k := e.key("held")
		e.mustAcquire(e.b2, k, 30*time.Second)
		// 400 ms on the reference machine: an attempt on a slow one may
		// take longer than that by itself (NetworkTimeout).
		timeout := e.slow().scale(400 * time.Millisecond)
		start := time.Now()
		err := syncguard.WithLock(e.ctx, e.b, k, func(context.Context, *syncguard.Lease) error {
			e.t.Error("rule: fn does not run when the lock is not acquired")
			return nil
		}, &syncguard.LockOptions{Acquisition: syncguard.AcquisitionOptions{Timeout: timeout}})
		var se *syncguard.Error
		if !errors.Is(err, syncguard.ErrAcquisitionTimeout) || !errors.As(err, &se) || !strings.Contains(se.Msg, "attempt") {
			e.t.Fatalf("rule: a key held past the acquisition timeout gives AcquisitionTimeout naming the attempts; got %v", err)
		}
		if el := time.Since(start); el < timeout || el > e.slow().scale(5*time.Second) {
			e.t.Errorf("rule: the helper waits up to its timeout (%v), not less and not much more; took %v (%s)", timeout, el, e.slow())
		}
	})

	register("Helper/ReleaseAfterContextCancelledDuringFn", func(e *env) {
		k := e.key("cancelled")
		ctx, cancel := context.WithCancel(e.ctx)
		defer cancel()
		var lockID string
		err := syncguard.WithLock(ctx, e.b, k, func(_ context.Context, l *syncguard.Lease) error {
			lockID = l.LockID()
			cancel() // the caller gives up while fn runs
			return errFromFn
		}, &syncguard.LockOptions{TTL: 30 * time.Second})
		if err != errFromFn {
			e.t.Errorf("rule: WithLock returns fn's error unchanged; got %v", err)
		}
		if e.isLocked(e.b2, k) {
			e.t.Errorf("rule: WithLock releases after fn even when ctx was cancelled during fn; key %q is still locked (until its 30s TTL)", k)
		}
		if info, err := e.b2.LookupID(e.ctx, lockID); err != nil || info != nil {
			e.t.Errorf("rule: the released lockId is gone; LookupID = %+v, %v", info, err)
		}
	})

	registerSQL("Helper/FenceWarningLoggedOnce", func(e *sqlEnv) {
		// The core logs a fence above FenceWarn in Acquire; the helper on top
		// must not add a second record.
		k := e.key("fencewarn")
		norm, _, fenceKey := e.derive(k)
		e.exec(`INSERT INTO `+e.fencesTable()+` ("fence_key", "fence", "key_debug") VALUES ($1, $2, $3)`,
			fenceKey, int64(rules.FenceWarn)+5, norm)
		logs := &captureHandler{}
		logger := slog.New(logs)
		b := e.newBackend(e.db, func(c *syncguard.Config) { c.Logger = logger })
		err := syncguard.WithLock(e.ctx, b, k, func(_ context.Context, l *syncguard.Lease) error {
			if n := fenceNum(e.t, l.Fence()); n != rules.FenceWarn+6 {
				e.t.Errorf("setup: want fence %d, got %d", int64(rules.FenceWarn)+6, n)
			}
			return nil
		}, &syncguard.LockOptions{Logger: logger})
		e.must(err, "WithLock")
		if w := logs.warnings(); len(w) != 1 || !strings.Contains(w[0], "fence") {
			e.t.Errorf("rule: one acquire above the fence warning threshold logs exactly one warning, through the helper too; got %q", w)
		}
	})
}
