package syncguard_test

import (
	"context"
	"fmt"
	"time"

	"github.com/syncguard/syncguard-go/syncguard"
	"github.com/syncguard/syncguard-go/syncguardtest"
)

// Diagnostics for dashboards and debugging: the spec's getByKey, getById
// and owns are the backend's LookupKey and LookupID. They are read-only
// snapshots: never check ownership before a write; rely on Release/Extend
// results and fences instead.
func ExampleLockBackend_lookups() {
	locks := syncguardtest.New() // in a program: locks, err := syncguard.New(db, nil)
	ctx := context.Background()
	lease, _ := syncguard.Lock(ctx, locks, "export:weekly", &syncguard.LockOptions{TTL: time.Minute})

	info, _ := locks.LookupKey(ctx, "export:weekly")
	fmt.Println("keyHash:", info.KeyHash, "fence:", info.Fence)

	owned, _ := locks.LookupID(ctx, lease.LockID())
	fmt.Println("owned:", owned != nil)

	// Raw identifiers are for debugging only: the lockId lets its reader
	// release the lock.
	raw, _ := locks.LookupKeyDebug(ctx, "export:weekly")
	fmt.Println("key:", raw.Key, "same lockId:", raw.LockID == lease.LockID())

	lease.Close()
	owned, _ = locks.LookupID(ctx, lease.LockID())
	fmt.Println("owned after close:", owned != nil)
	// Output:
	// keyHash: aa580707d4da92f55ef00911 fence: 000000000000001
	// owned: true
	// key: export:weekly same lockId: true
	// owned after close: false
}
