package syncguard_test

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/syncguard/syncguard-go/syncguard"
	"github.com/syncguard/syncguard-go/syncguardtest"
)

// A lease is a lock held across code that WithLock cannot wrap. Close
// releases it once, however often it is called; a failed release goes to
// OnReleaseError.
func ExampleLock() {
	locks := syncguardtest.New() // in a program: syncguard.New(db, nil)
	ctx := context.Background()

	lease, err := syncguard.Lock(ctx, locks, "tenant:7:migrate", &syncguard.LockOptions{
		TTL: time.Minute,
		OnReleaseError: func(err error, info syncguard.ReleaseErrorInfo) {
			slog.Error("lock release failed", "keyHash", syncguard.HashKey(info.Key), "err", err)
		},
	})
	if err != nil {
		fmt.Println("not acquired:", err)
		return
	}
	defer lease.Close()

	fmt.Println("fence:", lease.Fence())
	if _, err := lease.Extend(ctx, 2*time.Minute); err != nil {
		fmt.Println("extend failed:", err)
	}
	fmt.Println("held:", lease.Err() == nil)
	// Output:
	// fence: 000000000000001
	// held: true
}
