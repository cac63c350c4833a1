package kit

import (
	"context"
	"time"

	"github.com/syncguard/syncguard-go/syncguard"
)

// Wait is what a Queue method returns: one caller's wait for a key, whose
// attempts keep one place in the key's queue. It is the type syncguard's
// Lock and WithLock use (an alias of the same interface type literal as
// theirs, so a type with Queue returning a Wait is a queue to them):
// Attempt is one acquire as the waiter; Next, after a failed attempt, when
// it attempts again (at the first value on wake, nil: nothing wakes it, or
// at at, zero: no time; retry is the caller's retry schedule); Leave takes
// it out of the queue, passing on a key handed to it meanwhile.
type Wait = interface {
	Attempt(ctx context.Context, ttl time.Duration) (syncguard.AcquireResult, error)
	Next(retry time.Time) (wake <-chan struct{}, at time.Time)
	Leave(ctx context.Context) error
}

// Queuer is a Locker with a queue, which Lock and WithLock wait in: a
// *syncguard.Backend, the lock kinds, syncguardtest's fakes, and the
// wrappers that forward Queue. Queue returns the wait of one call for key,
// held by identity ("": the default); with once it makes a single attempt
// and takes no place in the queue; a nil Wait means no queue (Lock polls).
type Queuer interface {
	syncguard.Locker
	Queue(key, identity string, once bool) Wait
}
