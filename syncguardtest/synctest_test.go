package syncguardtest_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/syncguard/syncguard-go/syncguard"
	"github.com/syncguard/syncguard-go/syncguardtest"
)

// The package doc promises fake time inside a testing/synctest bubble: a
// Backend made in the bubble must leave no goroutine behind (the bubble
// panics when one stays blocked), and auto-extension runs on the bubble's
// clock.
func TestInSynctestBubble(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		locks := syncguardtest.New()
		opts := &syncguard.LockOptions{TTL: 30 * time.Second, AutoExtend: true}
		err := syncguard.WithLock(ctx, locks, "jobs:long", func(ctx context.Context, lease *syncguard.Lease) error {
			select {
			case <-time.After(10 * time.Minute): // 20 TTLs of fake time
				return nil
			case <-ctx.Done():
				return context.Cause(ctx)
			}
		}, opts)
		if err != nil {
			t.Fatalf("a 10-minute job with a 30 s TTL and AutoExtend: %v", err)
		}
		if n := locks.Calls(syncguardtest.OpExtend); n < 20 {
			t.Errorf("auto-extension ran %d extends in 10 fake minutes, want at least 20", n)
		}

		// The lock is deleted under a running job: its context ends with ErrLockLost.
		err = syncguard.WithLock(ctx, locks, "jobs:long", func(ctx context.Context, lease *syncguard.Lease) error {
			locks.Delete(lease.LockID())
			<-ctx.Done()
			return context.Cause(ctx)
		}, opts)
		if !errors.Is(err, syncguard.ErrLockLost) {
			t.Errorf("after the lock was deleted: %v, want ErrLockLost", err)
		}
	})
}
