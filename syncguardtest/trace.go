package syncguardtest

import (
	"context"
	"time"

	"github.com/syncguard/syncguard-go/syncguard"
)

// SetTracer sets the Tracer of b and of its views, as syncguard's
// Config.Tracer does for a Backend: it observes every operation (Acquire,
// Release, Extend, IsLocked, the lookups), and syncguard.Lock and WithLock
// on b find it (Tracer) for their waits and holdings. nil, the default,
// traces nothing.
func (b *Backend) SetTracer(t syncguard.Tracer) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.tracer = t
}

// Tracer returns the Tracer SetTracer set: syncguard.Lock and WithLock
// consult it, as they do a Backend's Config.Tracer.
func (b *Backend) Tracer() syncguard.Tracer {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.tracer
}

// traced runs one operation under b's Tracer, if any; outcome gives its
// OK, reason and (acquire) lockId.
func traced[R any](b *Backend, ctx context.Context, op syncguard.TraceOp, run func(context.Context) (R, error), outcome func(R) (bool, string, string)) (R, error) {
	t := b.Tracer()
	if t == nil {
		return run(ctx)
	}
	op.Locker = b
	start := time.Now()
	octx, started := opStart(t, ctx, op)
	r, err := run(octx)
	if started {
		ok, reason, lockID := outcome(r)
		op.OK, op.Reason, op.Err, op.Duration = ok && err == nil, reason, err, time.Since(start)
		if op.OK && lockID != "" {
			op.LockID = lockID
		}
		opEnd(t, octx, op)
	}
	return r, err
}

// opStart and opEnd contain a panicking Tracer, as syncguard does: the
// operation goes on, without OpEnd when OpStart panicked.
func opStart(t syncguard.Tracer, ctx context.Context, op syncguard.TraceOp) (c context.Context, ok bool) {
	defer func() {
		if recover() != nil {
			c, ok = ctx, false
		}
	}()
	if c = t.OpStart(ctx, op); c == nil {
		c = ctx
	}
	return c, true
}

func opEnd(t syncguard.Tracer, ctx context.Context, op syncguard.TraceOp) {
	defer func() { _ = recover() }()
	t.OpEnd(ctx, op)
}

// Acquire implements syncguard.LockBackend: a single attempt, as on
// PostgreSQL. It respects the queue of Lock's waiters: a free key with live
// waiters queued goes to the first of them, and the attempt gets "locked"
// (see "Waiting" in the package doc).
func (b *Backend) Acquire(ctx context.Context, key string, ttl time.Duration) (syncguard.AcquireResult, error) {
	return traced(b, ctx, syncguard.TraceOp{Op: string(OpAcquire), Key: key}, func(ctx context.Context) (syncguard.AcquireResult, error) {
		return b.acquire(ctx, key, ttl, b.identity, nil)
	}, func(r syncguard.AcquireResult) (bool, string, string) { return r.OK, r.Reason, r.LockID })
}

// Release implements syncguard.LockBackend. It hands the key to the first
// live waiter of syncguard.Lock in the same step (see "Waiting").
func (b *Backend) Release(ctx context.Context, lockID string) (syncguard.ReleaseResult, error) {
	return traced(b, ctx, syncguard.TraceOp{Op: string(OpRelease), LockID: lockID}, func(ctx context.Context) (syncguard.ReleaseResult, error) {
		return b.release(ctx, lockID)
	}, func(r syncguard.ReleaseResult) (bool, string, string) { return r.OK, r.Reason, "" })
}

// Extend implements syncguard.LockBackend.
func (b *Backend) Extend(ctx context.Context, lockID string, ttl time.Duration) (syncguard.ExtendResult, error) {
	return traced(b, ctx, syncguard.TraceOp{Op: string(OpExtend), LockID: lockID}, func(ctx context.Context) (syncguard.ExtendResult, error) {
		return b.extend(ctx, lockID, ttl)
	}, func(r syncguard.ExtendResult) (bool, string, string) { return r.OK, r.Reason, "" })
}

// IsLocked implements syncguard.LockBackend.
func (b *Backend) IsLocked(ctx context.Context, key string) (bool, error) {
	return traced(b, ctx, syncguard.TraceOp{Op: string(OpIsLocked), Key: key}, func(ctx context.Context) (bool, error) {
		return b.isLocked(ctx, key)
	}, func(locked bool) (bool, string, string) { return locked, "", "" })
}

// LookupKey implements syncguard.LockBackend.
func (b *Backend) LookupKey(ctx context.Context, key string) (*syncguard.LockInfo, error) {
	return sanitized(b.LookupKeyDebug(ctx, key))
}

// LookupID implements syncguard.LockBackend.
func (b *Backend) LookupID(ctx context.Context, lockID string) (*syncguard.LockInfo, error) {
	return sanitized(b.LookupIDDebug(ctx, lockID))
}

// sanitized is d without its raw key and lockId.
func sanitized(d *syncguard.LockInfo, err error) (*syncguard.LockInfo, error) {
	if d == nil || err != nil {
		return nil, err
	}
	d.Key, d.LockID = "", ""
	return d, nil
}

func found(d *syncguard.LockInfo) (bool, string, string) { return d != nil, "", "" }

// LookupKeyDebug is LookupKey with the raw key and lockId, as the
// PostgreSQL backend's.
func (b *Backend) LookupKeyDebug(ctx context.Context, key string) (*syncguard.LockInfo, error) {
	return traced(b, ctx, syncguard.TraceOp{Op: string(OpLookup), Key: key}, func(ctx context.Context) (*syncguard.LockInfo, error) {
		return b.lookupKey(ctx, key)
	}, found)
}

// LookupIDDebug is LookupID with the raw key and lockId.
func (b *Backend) LookupIDDebug(ctx context.Context, lockID string) (*syncguard.LockInfo, error) {
	return traced(b, ctx, syncguard.TraceOp{Op: string(OpLookup), LockID: lockID}, func(ctx context.Context) (*syncguard.LockInfo, error) {
		return b.lookupID(ctx, lockID)
	}, found)
}

// Revoke forces the holder of key out and returns the holding it ended,
// or nil when key had no live holding, as the PostgreSQL backend's
// (syncguard.Backend.Revoke): a lookup, then a release by its lockId.
func (b *Backend) Revoke(ctx context.Context, key string) (*syncguard.LockInfo, error) {
	h, err := b.LookupKeyDebug(ctx, key)
	if err != nil || h == nil {
		return nil, err
	}
	if r, err := b.Release(ctx, h.LockID); err != nil || !r.OK {
		return nil, err
	}
	return sanitized(h, nil)
}
