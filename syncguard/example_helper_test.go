package syncguard_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/syncguard/syncguard-go/syncguard"
	"github.com/syncguard/syncguard-go/syncguardtest"
)

// Run a function while holding a lock. WithLock retries on contention,
// releases the lock afterwards (even if fn fails or panics) and returns
// fn's error.
func ExampleWithLock() {
	locks := syncguardtest.New() // in a program: locks, err := syncguard.New(db, nil)
	ctx := context.Background()

	err := syncguard.WithLock(ctx, locks, "invoice:42", func(ctx context.Context, lease *syncguard.Lease) error {
		// Pass the fence to the resource you protect, so that a stale
		// holder's late write is rejected:
		//   UPDATE invoices SET ..., fence = $1 WHERE id = 42 AND (fence IS NULL OR fence < $1)
		fmt.Println("processing invoice 42 with fence", lease.Fence())
		return nil
	}, &syncguard.LockOptions{
		TTL:         30 * time.Second,
		Acquisition: syncguard.AcquisitionOptions{Timeout: 2 * time.Second},
	})
	switch {
	case errors.Is(err, syncguard.ErrAcquisitionTimeout):
		fmt.Println("someone else is processing invoice 42")
	case err != nil:
		fmt.Println("failed:", err)
	}
	// Output: processing invoice 42 with fence 000000000000001
}

// With AutoExtend the lock outlives its TTL while fn runs, and fn's context
// is cancelled, with ErrLockLost as its cause, as soon as ownership can no
// longer be guaranteed: here because an operator deleted the lock row.
func ExampleWithLock_autoExtend() {
	locks := syncguardtest.New() // in a program: syncguard.New(db, nil)
	ctx := context.Background()

	err := syncguard.WithLock(ctx, locks, "reindex", func(ctx context.Context, lease *syncguard.Lease) error {
		locks.Delete(lease.LockID()) // as an operator's DELETE of the lock row: the lock is lost

		select {
		case <-ctx.Done(): // long work should watch ctx
			fmt.Println("stopped:", context.Cause(ctx))
			return context.Cause(ctx)
		case <-time.After(time.Minute):
			return nil
		}
	}, &syncguard.LockOptions{TTL: 300 * time.Millisecond, AutoExtend: true})

	fmt.Println("lock lost:", errors.Is(err, syncguard.ErrLockLost))
	// Output:
	// stopped: syncguard: lock lost: extend found it gone (released, deleted or taken over)
	// lock lost: true
}
