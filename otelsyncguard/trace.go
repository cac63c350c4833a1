package otelsyncguard

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/syncguard/syncguard-go/syncguard"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// Span names: "syncguard.<operation>" for the client span of each backend
// operation; "syncguard.lock" and "syncguard.with_lock" for the methods.
const (
	spanAcquire  = "syncguard.acquire"
	spanRelease  = "syncguard.release"
	spanExtend   = "syncguard.extend"
	spanIsLocked = "syncguard.isLocked"
	spanLookup   = "syncguard.lookup"
	spanLock     = "syncguard.lock"
	spanWithLock = "syncguard.with_lock"
)

var (
	opAcquire  = attribute.String("db.operation.name", "acquire")
	opRelease  = attribute.String("db.operation.name", "release")
	opExtend   = attribute.String("db.operation.name", "extend")
	opIsLocked = attribute.String("db.operation.name", "isLocked")
	opLookup   = attribute.String("db.operation.name", "lookup")
)

// startOp starts the client span of one backend operation.
func (b *Backend) startOp(ctx context.Context, name string, op attribute.KeyValue, key string) (context.Context, trace.Span) {
	ctx, span := b.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindClient))
	if span.IsRecording() {
		span.SetAttributes(b.spanAttrs...)
		span.SetAttributes(op)
		if l, ok := b.label(key); ok {
			span.SetAttributes(l)
		}
	}
	return ctx, span
}

// endOp ends span with the operation's outcome.
func endOp(span trace.Span, outcome, reason string, err error) {
	if span.IsRecording() {
		if err != nil {
			recordError(span, err)
		} else {
			span.SetAttributes(attrOutcome.String(outcome))
			if reason != "" {
				span.SetAttributes(attrReason.String(reason))
			}
		}
	}
	span.End()
}

func recordError(span trace.Span, err error) {
	code := errorType(err)
	span.SetAttributes(attrOutcome.String(outcomeError), attrErrorType.String(code))
	span.RecordError(err)
	span.SetStatus(codes.Error, code)
}

func okOutcome(ok bool, yes, no string) string {
	if ok {
		return yes
	}
	return no
}

// Acquire implements syncguard.LockBackend: one attempt, in a client span
// "syncguard.acquire" (outcome acquired or contended).
func (b *Backend) Acquire(ctx context.Context, key string, ttl time.Duration) (syncguard.AcquireResult, error) {
	countAttempt(ctx)
	ctx, span := b.startOp(ctx, spanAcquire, opAcquire, key)
	r, err := b.telemetryBackend.Acquire(ctx, key, ttl)
	endOp(span, okOutcome(r.OK, outcomeAcquired, outcomeContended), "", err)
	return r, err
}

// Release implements syncguard.LockBackend, in a client span
// "syncguard.release" (outcome ok or failed, with the reason).
func (b *Backend) Release(ctx context.Context, lockID string) (syncguard.ReleaseResult, error) {
	ctx, span := b.startOp(ctx, spanRelease, opRelease, "")
	r, err := b.telemetryBackend.Release(ctx, lockID)
	endOp(span, okOutcome(r.OK, outcomeOK, outcomeFailed), r.Reason, err)
	return r, err
}

// Extend implements syncguard.LockBackend, in a client span
// "syncguard.extend" (outcome ok or failed, with the reason).
func (b *Backend) Extend(ctx context.Context, lockID string, ttl time.Duration) (syncguard.ExtendResult, error) {
	ctx, span := b.startOp(ctx, spanExtend, opExtend, "")
	r, err := b.telemetryBackend.Extend(ctx, lockID, ttl)
	endOp(span, okOutcome(r.OK, outcomeOK, outcomeFailed), r.Reason, err)
	return r, err
}

// IsLocked implements syncguard.LockBackend, in a client span
// "syncguard.isLocked".
func (b *Backend) IsLocked(ctx context.Context, key string) (bool, error) {
	ctx, span := b.startOp(ctx, spanIsLocked, opIsLocked, key)
	locked, err := b.telemetryBackend.IsLocked(ctx, key)
	endOp(span, okOutcome(locked, "locked", "free"), "", err)
	return locked, err
}

// LookupKey implements syncguard.LockBackend, in a client span
// "syncguard.lookup".
func (b *Backend) LookupKey(ctx context.Context, key string) (*syncguard.LockInfo, error) {
	ctx, span := b.startOp(ctx, spanLookup, opLookup, key)
	info, err := b.telemetryBackend.LookupKey(ctx, key)
	endOp(span, okOutcome(info != nil, "found", "not-found"), "", err)
	return info, err
}

// LookupID implements syncguard.LockBackend, in a client span
// "syncguard.lookup".
func (b *Backend) LookupID(ctx context.Context, lockID string) (*syncguard.LockInfo, error) {
	ctx, span := b.startOp(ctx, spanLookup, opLookup, "")
	info, err := b.telemetryBackend.LookupID(ctx, lockID)
	endOp(span, okOutcome(info != nil, "found", "not-found"), "", err)
	return info, err
}

// Lock is syncguard.Lock(ctx, b, key, opts) in a span "syncguard.lock"
// that lasts until the lease ends: the acquire attempts are its children,
// and so are the lease's extends and release when made with a context
// derived from ctx (auto-extension's are). When the lock is acquired the
// span gets the event "acquired" and the attributes syncguard.attempts and
// syncguard.outcome=acquired (or timeout, cancelled, error with error.type
// and status Error); when the lease ends, the event "released" or "lost"
// (with syncguard.loss.reason). End the lease (Close, Release) to end the
// span.
func (b *Backend) Lock(ctx context.Context, key string, opts *syncguard.LockOptions) (*syncguard.Lease, error) {
	ctx, span := b.startLock(ctx, spanLock, key)
	a := &attempts{}
	start := time.Now()
	lease, err := syncguard.Lock(context.WithValue(ctx, attemptsKey{}, a), b, key, opts)
	if err != nil {
		waitFailed(span, a, start, err)
		span.End()
		return nil, err
	}
	acquired(span, a, start)
	lctx, cancel := lease.Context(context.Background())
	context.AfterFunc(lctx, func() {
		cancel()
		holdEnded(span, lease.Err())
		span.End()
	})
	return lease, nil
}

// WithLock is syncguard.WithLock(ctx, b, key, fn, opts) in a span
// "syncguard.with_lock" that covers the wait, fn and the release: the
// acquire attempts, fn's own spans (fn's ctx carries the span) and the
// release are its children. Its events and attributes are Lock's; an
// error from fn is recorded on it too.
func (b *Backend) WithLock(ctx context.Context, key string, fn func(ctx context.Context, lease *syncguard.Lease) error, opts *syncguard.LockOptions) error {
	ctx, span := b.startLock(ctx, spanWithLock, key)
	defer span.End()
	a := &attempts{}
	start := time.Now()
	var lease *syncguard.Lease
	var inner func(context.Context, *syncguard.Lease) error
	var lost lossOnce
	if fn != nil {
		inner = func(ctx context.Context, l *syncguard.Lease) error {
			lease = l
			acquired(span, a, start)
			// The moment of a loss, while fn still runs.
			lctx, cancel := l.Context(context.Background())
			defer cancel()
			context.AfterFunc(lctx, func() { lost.record(span, l.Err(), false) })
			return fn(ctx, l)
		}
	}
	err := syncguard.WithLock(context.WithValue(ctx, attemptsKey{}, a), b, key, inner, opts)
	if lease == nil {
		waitFailed(span, a, start, err)
		return err
	}
	// The release is done: the lease has ended, unless the release failed.
	cause := lease.Err()
	lost.record(span, cause, true)
	if cause != nil && span.IsRecording() {
		if errors.Is(cause, syncguard.ErrLeaseReleased) {
			span.AddEvent(outcomeReleased)
			span.SetAttributes(attribute.String("syncguard.hold.outcome", outcomeReleased))
		} else {
			span.SetAttributes(attribute.String("syncguard.hold.outcome", outcomeLost), attrLossReason.String(lossReason(cause)))
			span.SetStatus(codes.Error, "lock lost")
		}
	}
	if err != nil {
		recordError(span, err)
	}
	return err
}

func (b *Backend) startLock(ctx context.Context, name, key string) (context.Context, trace.Span) {
	ctx, span := b.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindInternal))
	if span.IsRecording() {
		span.SetAttributes(b.spanAttrs[1:]...) // WithAttributes; not a database call
		if l, ok := b.label(key); ok {
			span.SetAttributes(l)
		}
	}
	return ctx, span
}

func acquired(span trace.Span, a *attempts, start time.Time) {
	a.done.Store(true)
	if span.IsRecording() {
		n := a.n.Load()
		span.AddEvent(outcomeAcquired, trace.WithAttributes(attrAttempts.Int64(n),
			attribute.Float64("syncguard.wait.duration", time.Since(start).Seconds())))
		span.SetAttributes(attrOutcome.String(outcomeAcquired), attrAttempts.Int64(n))
	}
}

func waitFailed(span trace.Span, a *attempts, start time.Time, err error) {
	a.done.Store(true)
	if !span.IsRecording() {
		return
	}
	outcome := outcomeError
	switch {
	case errors.Is(err, syncguard.ErrAcquisitionTimeout):
		outcome = "timeout"
	case errors.Is(err, syncguard.ErrAborted):
		outcome = "cancelled"
	}
	span.SetAttributes(attrAttempts.Int64(a.n.Load()),
		attribute.Float64("syncguard.wait.duration", time.Since(start).Seconds()))
	recordError(span, err)
	span.SetAttributes(attrOutcome.String(outcome))
}

// holdEnded records how the lease of a Lock span ended.
func holdEnded(span trace.Span, cause error) {
	if !span.IsRecording() {
		return
	}
	if errors.Is(cause, syncguard.ErrLeaseReleased) {
		span.AddEvent(outcomeReleased)
		span.SetAttributes(attribute.String("syncguard.hold.outcome", outcomeReleased))
		return
	}
	lostEvent(span, cause)
	span.SetAttributes(attribute.String("syncguard.hold.outcome", outcomeLost), attrLossReason.String(lossReason(cause)))
	span.SetStatus(codes.Error, "lock lost")
}

// lossOnce adds the event "lost" to a span at most once: when the loss
// happens (while fn runs), or at the latest when the span is about to end.
type lossOnce struct {
	mu             sync.Mutex
	recorded, done bool
}

func (o *lossOnce) record(span trace.Span, cause error, final bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.done || o.recorded {
		o.done = o.done || final
		return
	}
	o.done = final
	if cause != nil && !errors.Is(cause, syncguard.ErrLeaseReleased) {
		o.recorded = true
		lostEvent(span, cause)
	}
}

// lostEvent adds the event "lost" if cause is a loss.
func lostEvent(span trace.Span, cause error) {
	if cause == nil || errors.Is(cause, syncguard.ErrLeaseReleased) || !span.IsRecording() {
		return
	}
	span.AddEvent(outcomeLost, trace.WithAttributes(attrLossReason.String(lossReason(cause)),
		attribute.String("exception.message", cause.Error())))
}
