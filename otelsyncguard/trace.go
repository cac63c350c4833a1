package otelsyncguard

import (
	"context"
	"errors"
	"slices"
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

// An opSpan is how the client span of one kind of backend operation is
// started and ended, prepared by Wrap so that the caller's path does not
// build options and attribute lists: a span gets its whole attribute list
// (b.spanAttrs, db.operation.name, syncguard.outcome and, for a failure
// with a reason, syncguard.reason) in one SetAttributes when it ends.
type opSpan struct {
	name    string
	op      attribute.KeyValue
	yes, no string                  // syncguard.outcome when the operation's result is ok or not
	start   []trace.SpanStartOption // SpanKindClient
	ends    [4][]attribute.KeyValue // by end slot: the whole attribute list of a span without a label
}

// End slots of an opSpan: the outcome and reason of an operation that
// returned no error.
const (
	endYes      = iota // yes
	endNo              // no, without a reason
	endExpired         // no, syncguard.ReasonExpired
	endNotFound        // no, syncguard.ReasonNotFound
)

// The start options of the spans, made once.
var (
	clientSpan   = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindClient)}
	internalSpan = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindInternal)}
)

func newOpSpan(name string, op attribute.KeyValue, yes, no string, spanAttrs []attribute.KeyValue) *opSpan {
	s := &opSpan{name: name, op: op, yes: yes, no: no, start: clientSpan}
	for slot, end := range [...][]attribute.KeyValue{
		endYes:      {attrOutcome.String(yes)},
		endNo:       {attrOutcome.String(no)},
		endExpired:  {attrOutcome.String(no), attrReason.String(syncguard.ReasonExpired)},
		endNotFound: {attrOutcome.String(no), attrReason.String(syncguard.ReasonNotFound)},
	} {
		s.ends[slot] = slices.Concat(spanAttrs, []attribute.KeyValue{op}, end)
	}
	return s
}

// opSpans are a Backend's opSpan of each operation.
type opSpans struct {
	acquire, release, extend, isLocked, lookup *opSpan
}

func newOpSpans(spanAttrs []attribute.KeyValue) opSpans {
	return opSpans{
		acquire:  newOpSpan(spanAcquire, opAcquire, outcomeAcquired, outcomeContended, spanAttrs),
		release:  newOpSpan(spanRelease, opRelease, outcomeOK, outcomeFailed, spanAttrs),
		extend:   newOpSpan(spanExtend, opExtend, outcomeOK, outcomeFailed, spanAttrs),
		isLocked: newOpSpan(spanIsLocked, opIsLocked, "locked", "free", spanAttrs),
		lookup:   newOpSpan(spanLookup, opLookup, "found", "not-found", spanAttrs),
	}
}

// startOp starts the client span of one backend operation.
func (b *Backend) startOp(ctx context.Context, s *opSpan) (context.Context, trace.Span) {
	return b.tracer.Start(ctx, s.name, s.start...)
}

// endOp ends the span of an operation on key ("" for one on a lockId)
// whose result was ok or not, with reason, or that returned err: one
// SetAttributes with the span's attributes, in the order b.spanAttrs,
// db.operation.name, syncguard.lock.label, syncguard.outcome,
// syncguard.reason or error.type.
func (b *Backend) endOp(span trace.Span, s *opSpan, key string, ok bool, reason string, err error) {
	if span.IsRecording() {
		label, hasLabel := b.label(key)
		slot := -1
		switch {
		case err != nil || hasLabel:
		case ok:
			slot = endYes
		case reason == "":
			slot = endNo
		case reason == syncguard.ReasonExpired:
			slot = endExpired
		case reason == syncguard.ReasonNotFound:
			slot = endNotFound
		}
		if slot >= 0 {
			span.SetAttributes(s.ends[slot]...)
		} else {
			attrs := make([]attribute.KeyValue, 0, len(b.spanAttrs)+4)
			attrs = append(append(attrs, b.spanAttrs...), s.op)
			if hasLabel {
				attrs = append(attrs, label)
			}
			code := errorType(err)
			switch {
			case err != nil:
				attrs = append(attrs, attrOutcome.String(outcomeError), attrErrorType.String(code))
			case ok:
				attrs = append(attrs, attrOutcome.String(s.yes))
			default:
				attrs = append(attrs, attrOutcome.String(s.no))
				if reason != "" {
					attrs = append(attrs, attrReason.String(reason))
				}
			}
			span.SetAttributes(attrs...)
			if err != nil {
				span.RecordError(err)
				span.SetStatus(codes.Error, code)
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

// Acquire implements syncguard.LockBackend: one attempt, in a client span
// "syncguard.acquire" (outcome acquired or contended).
func (b *Backend) Acquire(ctx context.Context, key string, ttl time.Duration) (syncguard.AcquireResult, error) {
	countAttempt(ctx)
	ctx, span := b.startOp(ctx, b.ops.acquire)
	r, err := b.telemetryBackend.Acquire(ctx, key, ttl)
	b.endOp(span, b.ops.acquire, key, r.OK, "", err)
	return r, err
}

// Release implements syncguard.LockBackend, in a client span
// "syncguard.release" (outcome ok or failed, with the reason).
func (b *Backend) Release(ctx context.Context, lockID string) (syncguard.ReleaseResult, error) {
	ctx, span := b.startOp(ctx, b.ops.release)
	r, err := b.telemetryBackend.Release(ctx, lockID)
	b.endOp(span, b.ops.release, "", r.OK, r.Reason, err)
	return r, err
}

// Extend implements syncguard.LockBackend, in a client span
// "syncguard.extend" (outcome ok or failed, with the reason).
func (b *Backend) Extend(ctx context.Context, lockID string, ttl time.Duration) (syncguard.ExtendResult, error) {
	ctx, span := b.startOp(ctx, b.ops.extend)
	r, err := b.telemetryBackend.Extend(ctx, lockID, ttl)
	b.endOp(span, b.ops.extend, "", r.OK, r.Reason, err)
	return r, err
}

// IsLocked implements syncguard.LockBackend, in a client span
// "syncguard.isLocked".
func (b *Backend) IsLocked(ctx context.Context, key string) (bool, error) {
	ctx, span := b.startOp(ctx, b.ops.isLocked)
	locked, err := b.telemetryBackend.IsLocked(ctx, key)
	b.endOp(span, b.ops.isLocked, key, locked, "", err)
	return locked, err
}

// LookupKey implements syncguard.LockBackend, in a client span
// "syncguard.lookup".
func (b *Backend) LookupKey(ctx context.Context, key string) (*syncguard.LockInfo, error) {
	ctx, span := b.startOp(ctx, b.ops.lookup)
	info, err := b.telemetryBackend.LookupKey(ctx, key)
	b.endOp(span, b.ops.lookup, key, info != nil, "", err)
	return info, err
}

// LookupID implements syncguard.LockBackend, in a client span
// "syncguard.lookup".
func (b *Backend) LookupID(ctx context.Context, lockID string) (*syncguard.LockInfo, error) {
	ctx, span := b.startOp(ctx, b.ops.lookup)
	info, err := b.telemetryBackend.LookupID(ctx, lockID)
	b.endOp(span, b.ops.lookup, "", info != nil, "", err)
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
	lctx, cancel := lease.Bind(context.Background())
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
			lctx, cancel := l.Bind(context.Background())
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
	ctx, span := b.tracer.Start(ctx, name, internalSpan...)
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
