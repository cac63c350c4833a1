package syncguard

import (
	"context"
	"time"
)

// Locker is the part of a LockBackend that Lock, WithLock and a Lease use.
// Wrap a backend in a Locker of your own to add tracing or metrics, and
// pass ctx on: it carries the deadline of each attempt (for tracing and
// metrics, Config.Tracer or LockOptions.Tracer need no wrapper). Lock
// polls a Locker on its retry schedule; one with a queue (a *Backend, the
// lock kinds) keeps its waiters in the key's queue instead, through a
// wrapper too if it forwards the method Queue.
//
// Every method validates its input before any I/O and returns a *Error on
// failure. Contention is not an error: Acquire returns OK == false.
type Locker interface {
	// Acquire tries once to take key for ttl. OK == false (Reason "locked")
	// means someone else holds it.
	Acquire(ctx context.Context, key string, ttl time.Duration) (AcquireResult, error)
	// Release deletes the lock if lockID still owns it and it is live.
	Release(ctx context.Context, lockID string) (ReleaseResult, error)
	// Extend sets the lock's expiry to server now + ttl if lockID still owns
	// it and it is live. It never revives an expired lock.
	Extend(ctx context.Context, lockID string, ttl time.Duration) (ExtendResult, error)
}

// LockBackend is the single-attempt lock API of the spec: a Locker plus
// the read-only inspections (*Backend).
type LockBackend interface {
	Locker
	// IsLocked reports whether key is held by a live lock.
	IsLocked(ctx context.Context, key string) (bool, error)
	// LookupKey returns sanitized information about the live lock on key,
	// or nil when there is none (absent and expired look the same).
	LookupKey(ctx context.Context, key string) (*LockInfo, error)
	// LookupID is LookupKey by lockId.
	LookupID(ctx context.Context, lockID string) (*LockInfo, error)
	// Capabilities describes the backend.
	Capabilities() Capabilities
}

// Reasons carried by results when OK is false (the spec's vocabulary).
const (
	ReasonLocked   = "locked"    // Acquire: another holder has the key
	ReasonExpired  = "expired"   // Release/Extend: the lock existed but had expired
	ReasonNotFound = "not-found" // Release/Extend: no lock with that lockId
)

// AcquireResult is the outcome of one Acquire attempt.
type AcquireResult struct {
	// OK is true when the caller now holds the lock.
	OK bool
	// Reason is ReasonLocked when OK is false, empty otherwise.
	Reason string
	// LockID identifies this holding; pass it to Release and Extend.
	// It is a capability: whoever has it can release the lock. Don't log it.
	LockID string
	// Fence is the fencing token of this holding, strictly greater than
	// every fence handed out before for the same key.
	Fence Fence
	// ExpiresAt is the server-computed expiry (server now + ttl),
	// millisecond precision. The lock stays exclusive until then.
	ExpiresAt time.Time
	// RetryIn, when OK is false, is how long the holder's lock stays live
	// by the server's clock (expiry plus tolerance); 0 when unknown.
	RetryIn time.Duration
	// HandedOver, for a Waiter's successful attempt, is how long the lock
	// had existed when the attempt's statement started (a release handed
	// it over, and its TTL counts from there). 0 otherwise.
	HandedOver time.Duration
}

// queuer is a Locker that keeps the callers of Lock and WithLock waiting
// for a key in the key's queue, in arrival order (a *Backend's waiter far
// back that comes near late keeps its place, not its turn), so that a
// release hands the key to the first of them in its own commit: *Backend,
// the lock kinds, syncguardtest's fakes, and the wrappers that forward
// Queue (internal/kit.Queuer names it for them).
type queuer interface {
	Locker
	// Queue returns the waiter of one Lock or WithLock call for key, whose
	// holder is named identity ("": the backend's default). It does no I/O:
	// the first attempt reports an invalid key. With once, the call makes
	// a single attempt and takes no place in the queue. A nil waiter means
	// no queue (a wrapper around a Locker without one): Lock polls.
	Queue(key, identity string, once bool) waiter
}

// waiter is one caller's wait for a key, made by queuer.Queue: its
// attempts keep one place in the key's queue. Lock uses it from one
// goroutine, and ends it with Leave unless an attempt took the key. It is
// an alias of an interface type literal, so that the packages built on
// this one return the identical type (internal/kit.Wait) from their Queue
// methods without a name of this package.
type waiter = interface {
	// Attempt is one acquire attempt as the waiter, as Locker.Acquire.
	Attempt(ctx context.Context, ttl time.Duration) (AcquireResult, error)
	// Next says, after a failed attempt, when the waiter attempts again:
	// at the first value on wake (nil: nothing wakes it) or at at (zero:
	// no time), whichever comes first; the deadline and ctx end the wait
	// before. retry is when the caller's retry schedule asks for the next
	// attempt: a waiter that nothing else cues attempts by then. Lock
	// counts an attempt at or after retry against MaxRetries.
	Next(retry time.Time) (wake <-chan struct{}, at time.Time)
	// Leave takes the waiter out of the queue, passing on a key handed to
	// it meanwhile.
	Leave(ctx context.Context) error
}

// As finds the first of l and the Lockers it wraps (through their
// Unwrap() LockBackend methods) that is a T, as errors.As finds an error.
func As[T any](l Locker) (T, bool) {
	for range 16 {
		if t, ok := l.(T); ok {
			return t, true
		}
		u, ok := l.(interface{ Unwrap() LockBackend })
		if !ok {
			break
		}
		l = u.Unwrap()
	}
	var zero T
	return zero, false
}

// ReleaseResult is the outcome of Release.
type ReleaseResult struct {
	// OK is true when this call deleted a live lock it owned.
	OK bool
	// Reason is ReasonExpired or ReasonNotFound when OK is false.
	Reason string
}

// ExtendResult is the outcome of Extend.
type ExtendResult struct {
	// OK is true when the lock was live, owned and is now extended.
	OK bool
	// Reason is ReasonExpired or ReasonNotFound when OK is false.
	Reason string
	// ExpiresAt is the new server-computed expiry when OK.
	ExpiresAt time.Time
}

// LockInfo describes a live lock, as LookupKey and LookupID return it:
// without its key or lockId, only their HashKey forms. Lookups are
// diagnostics: the answer describes an instant that has passed when it
// arrives, so never use it to decide a release or a write (Release and
// Extend check ownership atomically; fences protect the resource).
type LockInfo struct {
	KeyHash    string    // HashKey of the normalized key
	LockIDHash string    // HashKey of the lockId
	ExpiresAt  time.Time // server-computed expiry, millisecond precision
	AcquiredAt time.Time // server time of the acquire
	Fence      Fence     // the fence of this holding
	// Identity is the holder's Config.Identity or LockOptions.Identity,
	// "" when it set none (or is a process of another implementation).
	Identity string
	// Key (the normalized user key) and LockID are the raw values, set
	// only by Backend.LookupKeyDebug, Backend.LookupIDDebug and
	// Backend.List with ListOptions.Raw; empty otherwise. They are for
	// debugging only: the lockId lets its bearer release the lock, and
	// keys may hold personal data. Never log them in production.
	Key    string
	LockID string
}

// Capabilities describes a backend, as in the spec.
type Capabilities struct {
	Backend         string // "postgres"
	SupportsFencing bool   // true: every successful acquire carries a Fence
	TimeAuthority   string // "server": expiry is decided by PostgreSQL's clock
}

func msToTime(ms int64) time.Time { return time.UnixMilli(ms) }
