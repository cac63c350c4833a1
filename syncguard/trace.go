package syncguard

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Tracer is the hook for observability (metrics, spans, logs), set in
// Config.Tracer (every operation of the Backend, and the waits and
// holdings of Lock and WithLock on it) or LockOptions.Tracer (one Lock or
// WithLock call, on any Locker). Package otelsyncguard implements it for
// OpenTelemetry, package telemetry for the spec's LockEvent.
//
// A Start method returns the context the traced work runs with (a span in
// it, say), and the matching End methods get that context. The calls are
// synchronous, on the path of the operation: a Tracer must be fast and
// must never block (hand slow work, I/O, user callbacks to a goroutine of
// its own, as package telemetry does). A Tracer that panics is contained:
// the panic is logged on slog.Default and the lock operation goes on (a
// Start that panicked gets no End). The data carry raw keys and lockIds:
// never record them as they are (HashKey, or a bounded label).
//
// Without a Tracer nothing of this runs: no hashing, no allocation.
type Tracer interface {
	// OpStart is called before each operation of a traced Backend
	// (Acquire, Release, Extend, IsLocked, the lookups) and before each
	// attempt of a traced wait of Lock or WithLock; op says which.
	OpStart(ctx context.Context, op TraceOp) context.Context
	// OpEnd is called when that operation returned, with its outcome.
	OpEnd(ctx context.Context, op TraceOp)
	// LockStart is called when Lock or WithLock starts. The returned
	// context is the one the wait's attempts, the lease's extends and
	// release, and WithLock's fn run with.
	LockStart(ctx context.Context, l TraceLock) context.Context
	// WaitEnd is called when the wait ends: the lock is held (Err nil),
	// or Lock gave up (Err is what it returns).
	WaitEnd(ctx context.Context, l TraceLock)
	// HoldEnd is called when the lease ends: released (Err is
	// ErrLeaseReleased) or lost (errors.Is(Err, ErrLockLost)), on the
	// goroutine that ended it (a release, an extend, the lease's timer).
	HoldEnd(ctx context.Context, l TraceLock)
	// LockEnd is called once after each LockStart: when WithLock returns
	// (Err is what it returns: fn's error), or for Lock when its wait
	// failed or after its lease's HoldEnd.
	LockEnd(ctx context.Context, l TraceLock)
}

// TraceOp is one operation, as a Tracer sees it. OpStart gets the fields
// up to Locker; OpEnd gets them all.
type TraceOp struct {
	// Op is the operation, as Error.Op: "acquire", "release", "extend",
	// "isLocked" or "lookup" (LookupKey, LookupID and their Debug forms).
	Op string
	// Key (operations on a key) and LockID (operations on a lockId, and a
	// successful acquire at OpEnd) are raw values.
	Key, LockID string
	// Attempt is n for the nth attempt of a wait of Lock or WithLock, 0
	// for a call of the operation itself.
	Attempt int
	// Locker is what the operation ran on: the *Backend, or for an
	// attempt the Locker given to Lock (syncguard.As finds what it wraps).
	Locker Locker

	// OK is the operation's result: acquired, released, extended, locked
	// (IsLocked) or found (a lookup). An error is never OK.
	OK bool
	// Reason is ReasonLocked, ReasonExpired or ReasonNotFound when OK is
	// false without an error, as the operation's result says.
	Reason string
	// Err is the error the operation returned, if any.
	Err error
	// Duration is how long the operation took.
	Duration time.Duration
}

// TraceLock is one Lock or WithLock call, as a Tracer sees it: LockStart
// gets Key and WithLock; WaitEnd adds Attempts, Waited and, once the lock
// is held, LockID and Fence; HoldEnd adds Held and LossReason.
type TraceLock struct {
	Key      string // raw
	WithLock bool   // WithLock (else Lock)
	Attempts int    // acquire attempts of the wait
	Waited   time.Duration
	LockID   string // raw; "" when the wait failed
	Fence    Fence
	Held     time.Duration
	// LossReason, at HoldEnd, says why the holding lost its lock:
	// "not-extended" (no extend confirmed in its guaranteed lifetime),
	// "expired" or "gone" (what an extend found, or the release of a lease
	// that had lost its lock unnoticed: Err is then ErrLeaseReleased).
	LossReason string
	// Err: see each method.
	Err error
}

// Values of TraceLock.LossReason.
const (
	lossNotExtended = "not-extended"
	lossExpired     = "expired"
	lossGone        = "gone"
)

// tracerPanicked, deferred around each call of a Tracer, contains a
// panic; ok, if not nil, is set to false.
func tracerPanicked(ok *bool) {
	if r := recover(); r != nil {
		if ok != nil {
			*ok = false
		}
		slog.Default().Error("syncguard: a Tracer panicked; the lock operation goes on", slog.Any("panic", r))
	}
}

// opTrace is one traced operation; the zero value traces nothing.
type opTrace struct {
	t     Tracer
	ctx   context.Context
	op    TraceOp
	start time.Time
}

// startOp calls t.OpStart (t may be nil) and returns the context the
// operation runs with.
func startOp(t Tracer, ctx context.Context, op TraceOp) (opTrace, context.Context) {
	if t == nil {
		return opTrace{}, ctx
	}
	o := opTrace{t: t, ctx: ctx, op: op, start: time.Now()}
	if !o.begin() {
		return opTrace{}, ctx
	}
	return o, o.ctx
}

func (o *opTrace) begin() (ok bool) {
	defer tracerPanicked(&ok)
	if c := o.t.OpStart(o.ctx, o.op); c != nil {
		o.ctx = c
	}
	return true
}

// end calls OpEnd with the operation's outcome (lockID: a successful
// acquire's), if it is traced.
func (o *opTrace) end(ok bool, reason, lockID string, err error) {
	if o.t != nil {
		o.finish(ok, reason, lockID, err)
	}
}

func (o *opTrace) finish(ok bool, reason, lockID string, err error) {
	defer tracerPanicked(nil)
	o.op.OK, o.op.Reason, o.op.Err, o.op.Duration = ok && err == nil, reason, err, time.Since(o.start)
	if o.op.OK && lockID != "" {
		o.op.LockID = lockID
	}
	o.t.OpEnd(o.ctx, o.op)
}

// lockTrace is the trace of one Lock or WithLock call.
type lockTrace struct {
	t           Tracer
	ctx         context.Context // LockStart's
	d           TraceLock
	start, held time.Time
	once        sync.Once // HoldEnd
}

const (
	traceWait = iota
	traceHold
	traceEnd
)

// startLock calls t.LockStart; nil when it panicked.
func startLock(ctx context.Context, t Tracer, key string, withLock bool) (lt *lockTrace) {
	lt = &lockTrace{t: t, ctx: ctx, d: TraceLock{Key: key, WithLock: withLock}, start: time.Now()}
	ok := true
	func() {
		defer tracerPanicked(&ok)
		if c := t.LockStart(ctx, lt.d); c != nil {
			lt.ctx = c
		}
	}()
	if !ok {
		return nil
	}
	return lt
}

func (lt *lockTrace) emit(what int, d TraceLock) {
	defer tracerPanicked(nil)
	switch what {
	case traceWait:
		lt.t.WaitEnd(lt.ctx, d)
	case traceHold:
		lt.t.HoldEnd(lt.ctx, d)
	default:
		lt.t.LockEnd(lt.ctx, d)
	}
}

// waitEnd reports the end of the wait (and of the call, when it failed).
func (lt *lockTrace) waitEnd(res AcquireResult, attempts int, err error) {
	lt.d.Attempts, lt.d.Waited, lt.d.Err = attempts, time.Since(lt.start), err
	if err == nil {
		lt.d.LockID, lt.d.Fence, lt.held = res.LockID, res.Fence, time.Now()
	}
	lt.emit(traceWait, lt.d)
	lt.d.Err = nil
	if err != nil {
		d := lt.d
		d.Err = err
		lt.emit(traceEnd, d)
	}
}
