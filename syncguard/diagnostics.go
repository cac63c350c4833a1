package syncguard

import (
	"context"
	"fmt"
)

// DebugLookuper is implemented by backends that can return raw keys and
// lockIds: *Backend and *TelemetryBackend.
type DebugLookuper interface {
	LookupKeyDebug(ctx context.Context, key string) (*LockInfoDebug, error)
	LookupIDDebug(ctx context.Context, lockID string) (*LockInfoDebug, error)
}

// GetByKey returns sanitized information about the live lock on key, or nil
// when there is none (absent and expired look the same). It is the spec's
// first-class diagnostic helper for backend.LookupKey; like Owns it is for
// diagnostics, never a check before a mutation.
func GetByKey(ctx context.Context, backend LockBackend, key string) (*LockInfo, error) {
	return backend.LookupKey(ctx, key)
}

// GetByID returns sanitized information about the live lock with lockID,
// or nil when there is none.
func GetByID(ctx context.Context, backend LockBackend, lockID string) (*LockInfo, error) {
	return backend.LookupID(ctx, lockID)
}

// GetByKeyRaw is GetByKey with the raw key and lockId, for debugging.
//
// The result is sensitive: its LockID lets anyone who reads it release the
// lock, and keys may hold personal data. Never log it in production.
func GetByKeyRaw(ctx context.Context, backend DebugLookuper, key string) (*LockInfoDebug, error) {
	return backend.LookupKeyDebug(ctx, key)
}

// GetByIDRaw is GetByID with the raw key and lockId, for debugging. The
// result is sensitive; see GetByKeyRaw.
func GetByIDRaw(ctx context.Context, backend DebugLookuper, lockID string) (*LockInfoDebug, error) {
	return backend.LookupIDDebug(ctx, lockID)
}

// Owns reports whether lockID currently holds a live lock. Like the Get
// helpers it is read-only and answers for an instant that has passed by
// the time it returns.
//
// Ownership checks are diagnostics, for UIs, monitoring and debugging,
// never a guard before a mutation: between Owns (or a lookup) returning
// true and your write, the lock can expire and another owner can take it.
// Correctness comes from the atomic ownership check inside Release and
// Extend, and from fencing tokens checked by the resource you protect. Do
// not probe ownership with Extend either: it changes the TTL.
func Owns(ctx context.Context, backend LockBackend, lockID string) (bool, error) {
	info, err := backend.LookupID(ctx, lockID)
	return info != nil, err
}

func noDebug(b LockBackend) *Error {
	return invalidArg("lookup", fmt.Sprintf("backend %T has no raw lookups (LookupKeyDebug, LookupIDDebug)", b))
}
