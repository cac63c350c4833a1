package syncguard_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/syncguard/syncguard-go/syncguard"
	"github.com/syncguard/syncguard-go/syncguardtest"
)

// waitPrinter is a Tracer that prints each wait and holding of Lock and
// WithLock, and how many operations ended with an error. A real one
// records metrics or spans (otelsyncguard), or queues events for a slow
// consumer (package telemetry): its calls are on the lock's path.
type waitPrinter struct{}

func (waitPrinter) OpStart(ctx context.Context, _ syncguard.TraceOp) context.Context { return ctx }
func (waitPrinter) OpEnd(_ context.Context, op syncguard.TraceOp) {
	if op.Err != nil {
		fmt.Println(op.Op, "failed:", syncguard.CodeOf(op.Err))
	}
}
func (waitPrinter) LockStart(ctx context.Context, _ syncguard.TraceLock) context.Context { return ctx }
func (waitPrinter) WaitEnd(_ context.Context, l syncguard.TraceLock) {
	fmt.Printf("waited for %s: %d attempts, err %v\n", syncguard.HashKey(l.Key), l.Attempts, l.Err)
}
func (waitPrinter) HoldEnd(_ context.Context, l syncguard.TraceLock) {
	fmt.Printf("held %s: released %v\n", syncguard.HashKey(l.Key), errors.Is(l.Err, syncguard.ErrLeaseReleased))
}
func (waitPrinter) LockEnd(context.Context, syncguard.TraceLock) {}

// A Tracer set in Config.Tracer sees every operation of the Backend, and
// each wait and holding of Lock and WithLock on it.
func ExampleTracer() {
	ctx := context.Background()
	locks := syncguardtest.New() // in a program: syncguard.New(db, &syncguard.Config{Tracer: waitPrinter{}})
	locks.SetTracer(waitPrinter{})
	locks.Contend("report:daily", 1) // another process wins the first attempt

	err := syncguard.WithLock(ctx, locks, "report:daily", func(ctx context.Context, lease *syncguard.Lease) error {
		fmt.Println("building the report with fence", lease.Fence())
		return nil
	}, nil)
	fmt.Println("err:", err)
	// Output:
	// waited for f8649053c9b9721949b73965: 2 attempts, err <nil>
	// building the report with fence 000000000000001
	// held f8649053c9b9721949b73965: released true
	// err: <nil>
}
