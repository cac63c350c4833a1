package syncguardtest_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/syncguard/syncguard-go/syncguard"
	"github.com/syncguard/syncguard-go/syncguardtest"
)

// The backend is a drop-in LockBackend: give it to code that takes a
// syncguard.Locker or LockBackend in place of a *syncguard.Backend.
func Example() {
	ctx := context.Background()
	locks := syncguardtest.New()
	for range 2 {
		err := syncguard.WithLock(ctx, locks, "jobs:nightly", func(ctx context.Context, lease *syncguard.Lease) error {
			fmt.Println("running with fence", lease.Fence())
			return nil
		}, nil)
		if err != nil {
			fmt.Println(err)
		}
	}
	// Output:
	// running with fence 000000000000001
	// running with fence 000000000000002
}

// Advance moves the backend's clock: a lock is free once its expiry plus
// the 1 s tolerance has passed, without the test sleeping.
func ExampleBackend_Advance() {
	ctx := context.Background()
	locks := syncguardtest.New()
	r, _ := locks.Acquire(ctx, "leader", 10*time.Second) // a holder that then dies

	locks.Advance(10 * time.Second)
	again, _ := locks.Acquire(ctx, "leader", time.Minute)
	fmt.Println("at expiry:", again.OK, again.Reason)

	locks.Advance(time.Second + time.Millisecond)
	again, _ = locks.Acquire(ctx, "leader", time.Minute)
	fmt.Println("past the tolerance:", again.OK, again.Fence > r.Fence)

	gone, _ := locks.Release(ctx, r.LockID)
	fmt.Println("the dead holder's release:", gone.OK, gone.Reason)
	// Output:
	// at expiry: false locked
	// past the tolerance: true true
	// the dead holder's release: false not-found
}

// Fail injects an error of any code, as the PostgreSQL backend reports it;
// Contend makes acquires lose as if other processes won them.
func ExampleBackend_Fail() {
	ctx := context.Background()
	locks := syncguardtest.New()

	locks.Fail(syncguardtest.OpAcquire, syncguard.ErrServiceUnavailable, 1)
	_, err := locks.Acquire(ctx, "k", time.Minute)
	fmt.Println(errors.Is(err, syncguard.ErrServiceUnavailable), syncguard.CodeOf(err).Retryable())

	locks.Contend("k", 2)
	err = syncguard.WithLock(ctx, locks, "k", func(context.Context, *syncguard.Lease) error {
		fmt.Println("got it after two contended attempts")
		return nil
	}, &syncguard.LockOptions{Acquisition: syncguard.AcquisitionOptions{RetryDelay: time.Millisecond}})
	fmt.Println(err)
	// Output:
	// true true
	// got it after two contended attempts
	// <nil>
}

// FailAfter: the operation takes effect, and the caller gets an error
// anyway, as when a connection breaks after the server committed. Code
// that retries must meet its own lock.
func ExampleBackend_FailAfter() {
	ctx := context.Background()
	locks := syncguardtest.New()
	locks.FailAfter(syncguardtest.OpAcquire, syncguard.ErrNetworkTimeout, 1)
	_, err := locks.Acquire(ctx, "k", time.Minute)
	locked, _ := locks.IsLocked(ctx, "k")
	fmt.Println(syncguard.CodeOf(err), locked)
	// Output: NetworkTimeout true
}

// Validation is the PostgreSQL backend's, error for error.
func ExampleNew_validation() {
	_, err := syncguardtest.New().Acquire(context.Background(), "", time.Minute)
	fmt.Println(err)
	// Output: syncguard: acquire InvalidArgument: Key must not be empty
}

// WithTx: code that takes a lock inside its own transaction, as
// docs/orm.md shows, runs on the fake as on syncguard's Backend. The view
// acts at once and never rolls back (a test simulates a rollback with
// Delete); the transaction is not used.
func ExampleBackend_WithTx() {
	ctx := context.Background()
	locks := syncguardtest.New()
	var tx syncguard.Tx = &stubTx{} // the test's transaction (a *sql.Tx in production)

	r, _ := locks.WithTx(tx).Acquire(ctx, "tenant:7:rebuild", time.Minute)
	fmt.Println("in the transaction:", r.OK, r.Fence)

	// The transaction rolled back: so does the lock, in syncguard.
	locks.Delete(r.LockID)
	locked, _ := locks.IsLocked(ctx, "tenant:7:rebuild")
	fmt.Println("after the rollback:", locked)
	// Output:
	// in the transaction: true 000000000000001
	// after the rollback: false
}

// Each simulated process names itself with WithIdentity; LockOptions.Identity
// overrides it for one lock, and the lookups show the holder's.
func ExampleBackend_WithIdentity() {
	ctx := context.Background()
	fake := syncguardtest.New()
	web1 := fake.WithIdentity("web-1:4242")
	r, _ := web1.Acquire(ctx, "jobs:report", time.Minute)
	info, _ := fake.LookupKey(ctx, "jobs:report")
	fmt.Println(info.Identity)
	_, _ = web1.Release(ctx, r.LockID)
	_ = syncguard.WithLock(ctx, web1, "jobs:report", func(ctx context.Context, _ *syncguard.Lease) error {
		info, _ := fake.LookupKey(ctx, "jobs:report")
		fmt.Println(info.Identity)
		return nil
	}, &syncguard.LockOptions{Identity: "report-cron"})
	// Output:
	// web-1:4242
	// report-cron
}
