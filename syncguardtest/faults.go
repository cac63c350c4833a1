package syncguardtest

import (
	"context"
	"time"

	"github.com/syncguard/syncguard-go/syncguard"
)

// --- failures and contention

// Fail makes the next n calls of op fail with a *syncguard.Error of code
// before they take effect (n < 0: every call, until Fail(op, code, 0)).
// Validation still comes first, as in the real backend. For ErrAborted
// and ErrNetworkTimeout the error wraps context.Canceled and
// context.DeadlineExceeded, as the real ones do.
func (b *Backend) Fail(op Op, code syncguard.Code, n int) { b.setFail(op, code, n, false) }

// FailAfter is Fail, except that each failing call takes effect first: an
// acquire takes the lock (and its fence), a release releases it, and the
// caller still gets the error, as when a connection breaks after the server
// committed. Code must handle such an unknown outcome (a retried acquire
// meets its own lock; it expires by its TTL).
func (b *Backend) FailAfter(op Op, code syncguard.Code, n int) { b.setFail(op, code, n, true) }

func (b *Backend) setFail(op Op, code syncguard.Code, n int, after bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if n == 0 {
		delete(b.fails, op)
		return
	}
	b.fails[op] = &failure{code: code, n: n, after: after}
}

// SetHook makes h run at the start of every call, after validation and
// before the call takes effect; a non-nil error is returned to the caller
// as is (build one with Err to get the real shape). h may block, for
// example until a test lets the call proceed. nil removes the hook.
func (b *Backend) SetHook(h func(ctx context.Context, c Call) error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.hook = h
}

// SetLatency delays every call by d on the way to the store and d on the
// way back, like a network round trip. A context that ends on the way
// there cancels the call; on the way back the call has taken effect and
// the caller gets the context's error anyway.
func (b *Backend) SetLatency(d time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.latency = d
}

// Contend makes the next n acquires of key report contention (OK false,
// syncguard.ReasonLocked) whatever the key's state, as if other processes
// kept taking it just before. It fails with Acquire's validation error for
// an invalid key.
func (b *Backend) Contend(key string, n int) error {
	norm, err := b.check.key(context.Background(), OpAcquire, key)
	if err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.contend[norm] = n
	return nil
}

// Err returns the error a failing call of op would return for code: a
// *syncguard.Error whose errors.Is matches the code's sentinel.
func Err(op Op, code syncguard.Code) *syncguard.Error {
	e := &syncguard.Error{Op: string(op), Code: code, Msg: "injected by syncguardtest"}
	switch code {
	case syncguard.ErrAborted:
		e.Err = context.Canceled
	case syncguard.ErrNetworkTimeout:
		e.Err = context.DeadlineExceeded
	}
	return e
}

// --- crashes and partitions

// process is one simulated process: a Backend from New and each
// WithIdentity view are one each; WithTx views share their parent's.
type process struct {
	partitioned bool
}

// Crash makes the holder of lockID gone, as a process killed with its lock
// held: its lock stays until its TTL (nobody extends or releases it: every
// Extend and Release of lockID fails with ServiceUnavailable, so a lease
// on it soon reports ErrLockLost), then the first waiter of syncguard.Lock
// takes the key, as on PostgreSQL. It reports whether lockID had a record.
func (b *Backend) Crash(lockID string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	r := b.record(lockID)
	if r == nil {
		return false
	}
	r.crashed = true
	return true
}

// Partition cuts b's simulated process (b and its WithTx views; every
// WithIdentity view is a process of its own) off from the database until
// Heal: each of its calls fails with ServiceUnavailable before it takes
// effect, and so do the attempts and the Leave of its waiters of Lock
// (Lock rides the outage out within its Timeout). Its locks stay as they
// are, unextended, until their TTL. Its place in a queue stays live for
// the queue window (15 s) after its last attempt, as on PostgreSQL: a
// release does not hand it the key (no notification would reach it), and
// nobody behind it may take the key until its place lapses; after that it
// is skipped until it attempts again.
func (b *Backend) Partition() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.proc.partitioned = true
}

// Heal ends the partition of b's process: a free key kept for a waiter of
// it is handed to that waiter.
func (b *Backend) Heal() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.proc.partitioned = false
	b.handOffAll()
}

// partitionErr is the error of c in a partitioned process.
func partitionErr(c Call) error {
	e := Err(c.Op, syncguard.ErrServiceUnavailable)
	e.Key, e.LockID, e.Msg = c.Key, c.LockID, "partitioned by syncguardtest"
	return e
}

// crashedErr is the error of op on the lock of a crashed holder.
func crashedErr(op Op, lockID string) error {
	e := Err(op, syncguard.ErrServiceUnavailable)
	e.LockID, e.Msg = lockID, "the holder crashed (syncguardtest Crash)"
	return e
}
