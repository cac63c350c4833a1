package syncguard

import (
	"context"
	"os"
	"strconv"
)

// Holder identity: who holds a lock, stored by lockId in the holders table
// (schema.sql), which lookups join on the lock row's lock_id.

// DefaultIdentity returns "host:pid", this process's host name and process
// id, for Config.Identity or LockOptions.Identity.
func DefaultIdentity() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown-host"
	}
	return host + ":" + strconv.Itoa(os.Getpid())
}

// ContextIdentity returns the holder identity that Lock and WithLock ask
// the Locker beneath to store for the attempt whose context is ctx
// (LockOptions.Identity), or "". A *Backend reads it itself; it is for
// other Locker implementations, such as syncguardtest's.
func ContextIdentity(ctx context.Context) string {
	if r := recordOf(ctx); r != nil {
		return r.identity
	}
	return ""
}
