package otelsyncguard

import (
	"context"
	"slices"
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

// db.operation.name of each operation: the event type of the core's
// telemetry (LockEvent.Type).
var (
	opAcquire  = attrOperation.String(syncguard.EventAcquire)
	opRelease  = attrOperation.String(syncguard.EventRelease)
	opExtend   = attrOperation.String(syncguard.EventExtend)
	opIsLocked = attrOperation.String(syncguard.EventIsLocked)
	opLookup   = attrOperation.String(syncguard.EventLookup)
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
		endYes:      {AttrOutcome.String(yes)},
		endNo:       {AttrOutcome.String(no)},
		endExpired:  {AttrOutcome.String(no), AttrReason.String(syncguard.ReasonExpired)},
		endNotFound: {AttrOutcome.String(no), AttrReason.String(syncguard.ReasonNotFound)},
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
				attrs = append(attrs, AttrOutcome.String(outcomeError), attrErrorType.String(code))
			case ok:
				attrs = append(attrs, AttrOutcome.String(s.yes))
			default:
				attrs = append(attrs, AttrOutcome.String(s.no))
				if reason != "" {
					attrs = append(attrs, AttrReason.String(reason))
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
	span.SetAttributes(AttrOutcome.String(outcomeError), attrErrorType.String(code))
	span.RecordError(err)
	span.SetStatus(codes.Error, code)
}

// Acquire implements syncguard.LockBackend: one attempt, in a client span
// "syncguard.acquire" (outcome acquired or contended).
func (b *Backend) Acquire(ctx context.Context, key string, ttl time.Duration) (syncguard.AcquireResult, error) {
	ctx, span := b.startOp(ctx, b.ops.acquire)
	r, err := b.tb.Acquire(ctx, key, ttl)
	b.endOp(span, b.ops.acquire, key, r.OK, "", err)
	return r, err
}

// Release implements syncguard.LockBackend, in a client span
// "syncguard.release" (outcome ok or failed, with the reason).
func (b *Backend) Release(ctx context.Context, lockID string) (syncguard.ReleaseResult, error) {
	ctx, span := b.startOp(ctx, b.ops.release)
	r, err := b.tb.Release(ctx, lockID)
	b.endOp(span, b.ops.release, "", r.OK, r.Reason, err)
	return r, err
}

// Extend implements syncguard.LockBackend, in a client span
// "syncguard.extend" (outcome ok or failed, with the reason).
func (b *Backend) Extend(ctx context.Context, lockID string, ttl time.Duration) (syncguard.ExtendResult, error) {
	ctx, span := b.startOp(ctx, b.ops.extend)
	r, err := b.tb.Extend(ctx, lockID, ttl)
	b.endOp(span, b.ops.extend, "", r.OK, r.Reason, err)
	return r, err
}

// IsLocked implements syncguard.LockBackend, in a client span
// "syncguard.isLocked".
func (b *Backend) IsLocked(ctx context.Context, key string) (bool, error) {
	ctx, span := b.startOp(ctx, b.ops.isLocked)
	locked, err := b.tb.IsLocked(ctx, key)
	b.endOp(span, b.ops.isLocked, key, locked, "", err)
	return locked, err
}

// LookupKey implements syncguard.LockBackend, in a client span
// "syncguard.lookup".
func (b *Backend) LookupKey(ctx context.Context, key string) (*syncguard.LockInfo, error) {
	ctx, span := b.startOp(ctx, b.ops.lookup)
	info, err := b.tb.LookupKey(ctx, key)
	b.endOp(span, b.ops.lookup, key, info != nil, "", err)
	return info, err
}

// LookupID implements syncguard.LockBackend, in a client span
// "syncguard.lookup".
func (b *Backend) LookupID(ctx context.Context, lockID string) (*syncguard.LockInfo, error) {
	ctx, span := b.startOp(ctx, b.ops.lookup)
	info, err := b.tb.LookupID(ctx, lockID)
	b.endOp(span, b.ops.lookup, "", info != nil, "", err)
	return info, err
}

// Queue implements syncguard.Queuer: the wrapped backend's waiter (nil,
// so that Lock polls, when it has no queue), each attempt in a client span
// "syncguard.acquire" as Acquire's.
func (b *Backend) Queue(key, identity string, once bool) syncguard.Waiter {
	w := b.tb.Queue(key, identity, once)
	if w == nil {
		return nil
	}
	return &waiter{Waiter: w, b: b, key: key}
}

// waiter is a Waiter of the wrapped backend whose attempts have spans.
type waiter struct {
	syncguard.Waiter
	b   *Backend
	key string
}

// Attempt is the wrapped waiter's, in a client span "syncguard.acquire".
func (w *waiter) Attempt(ctx context.Context, ttl time.Duration) (syncguard.AcquireResult, error) {
	ctx, span := w.b.startOp(ctx, w.b.ops.acquire)
	r, err := w.Waiter.Attempt(ctx, ttl)
	w.b.endOp(span, w.b.ops.acquire, w.key, r.OK, "", err)
	return r, err
}
