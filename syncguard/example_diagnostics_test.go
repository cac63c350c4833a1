package syncguard_test

import (
	"context"
	"fmt"
	"time"

	"github.com/syncguard/syncguard-go/syncguard"
)

// Diagnostics for dashboards and debugging. They are read-only snapshots:
// never check ownership before a write; rely on Release/Extend results and
// fences instead.
func ExampleOwns() {
	locks := newLocks()
	ctx := context.Background()
	lease, _ := syncguard.Lock(ctx, locks, "export:weekly", &syncguard.LockOptions{TTL: time.Minute})

	owned, _ := syncguard.Owns(ctx, locks, lease.LockID())
	fmt.Println("owned:", owned)

	info, _ := syncguard.GetByKey(ctx, locks, "export:weekly")
	fmt.Println("keyHash:", info.KeyHash, "fence:", info.Fence)

	// Raw identifiers are for debugging only: the lockId lets its reader
	// release the lock.
	raw, _ := syncguard.GetByKeyRaw(ctx, locks, "export:weekly")
	fmt.Println("key:", raw.Key, "same lockId:", raw.LockID == lease.LockID())

	lease.Close()
	owned, _ = syncguard.Owns(ctx, locks, lease.LockID())
	fmt.Println("owned after close:", owned)
	// Output:
	// owned: true
	// keyHash: aa580707d4da92f55ef00911 fence: 000000000000001
	// key: export:weekly same lockId: true
	// owned after close: false
}
