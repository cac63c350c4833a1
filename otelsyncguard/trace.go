package otelsyncguard

import (
	"context"
	"errors"
	"time"

	"github.com/syncguard/syncguard-go/syncguard"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// The start options of the spans, made once.
var (
	clientSpan   = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindClient)}
	internalSpan = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindInternal)}
)

// ops are the operations with a client span: its name ("syncguard.<op>";
// db.operation.name is op), and the syncguard.outcome of an OK result or not.
var ops = map[string]struct{ span, yes, no string }{
	"acquire": {"syncguard.acquire", outcomeAcquired, outcomeContended}, "release": {"syncguard.release", outcomeOK, outcomeFailed},
	"extend": {"syncguard.extend", outcomeOK, outcomeFailed}, "isLocked": {"syncguard.isLocked", "locked", "free"},
	"lookup": {"syncguard.lookup", "found", "not-found"},
}

// outcome is the syncguard.outcome of an operation, with its
// syncguard.reason (a failed extend or release) or error.type.
func outcome(op syncguard.TraceOp) (outcome, reason, code string) {
	switch o := ops[op.Op]; {
	case op.Err != nil:
		return outcomeError, "", errorType(op.Err)
	case op.OK:
		return o.yes, "", ""
	case op.Op == "extend" || op.Op == "release":
		return o.no, op.Reason, ""
	default:
		return o.no, "", ""
	}
}

func recordError(span trace.Span, err error) {
	code := errorType(err)
	span.SetAttributes(AttrOutcome.String(outcomeError), attrErrorType.String(code))
	span.RecordError(err)
	span.SetStatus(codes.Error, code)
}

// OpStart implements syncguard.Tracer: it starts the client span
// "syncguard.<operation>" (an attempt of a wait is an acquire).
func (t *Tracer) OpStart(ctx context.Context, op syncguard.TraceOp) context.Context {
	if o, ok := ops[op.Op]; ok {
		ctx, _ = t.tracer.Start(ctx, o.span, clientSpan...)
	}
	return ctx
}

// OpEnd implements syncguard.Tracer: it ends the operation's span, with
// its attributes (WithAttributes, db.system.name, db.operation.name,
// syncguard.lock.label, syncguard.outcome, syncguard.reason or
// error.type), and records its metrics.
func (t *Tracer) OpEnd(ctx context.Context, op syncguard.TraceOp) {
	if _, ok := ops[op.Op]; !ok {
		return
	}
	label := t.label(op.Key)
	outcome, reason, code := outcome(op)
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(t.m.set(setKey{op: op.Op, outcome: outcome, reason: reason, code: code, label: label}).kv...)
		if op.Err != nil {
			span.RecordError(op.Err)
			span.SetStatus(codes.Error, code)
		}
		span.End()
	}
	m, bg := t.m, context.Background()
	switch op.Op {
	case "acquire":
		if outcome == outcomeContended { // for the polling metric
			m.lastContended.Store(time.Now().UnixNano())
			if ns, ok := syncguard.As[notificationStatuser](op.Locker); ok {
				m.mu.Lock()
				m.ns = ns
				m.mu.Unlock()
			}
		}
		o := m.set(setKey{outcome: outcome, code: code, label: label})
		m.attempts.Add(bg, 1, o.add...)
		m.acquireDur.Record(bg, op.Duration.Seconds(), o.rec...)
	case "extend":
		m.extends.Add(bg, 1, m.set(setKey{outcome: outcome, reason: reason, code: code}).add...)
	case "release":
		m.releases.Add(bg, 1, m.set(setKey{outcome: outcome, reason: reason, code: code}).add...)
	}
}

// LockStart implements syncguard.Tracer: it starts the span
// "syncguard.lock" or "syncguard.with_lock".
func (t *Tracer) LockStart(ctx context.Context, l syncguard.TraceLock) context.Context {
	name := "syncguard.lock"
	if l.WithLock {
		name = "syncguard.with_lock"
	}
	ctx, span := t.tracer.Start(ctx, name, internalSpan...)
	if span.IsRecording() {
		span.SetAttributes(t.m.base...) // WithAttributes; not a database call
		if label := t.label(l.Key); label != "" {
			span.SetAttributes(AttrLockLabel.String(label))
		}
	}
	return ctx
}

// WaitEnd implements syncguard.Tracer: when the lock is acquired the span
// gets the event "acquired" and the attributes syncguard.attempts and
// syncguard.outcome=acquired; else syncguard.outcome timeout, cancelled
// or error, with error.type and status Error.
func (t *Tracer) WaitEnd(ctx context.Context, l syncguard.TraceLock) {
	outcome, code, label := outcomeAcquired, "", t.label(l.Key)
	switch {
	case l.Err == nil:
	case errors.Is(l.Err, syncguard.ErrAcquisitionTimeout):
		outcome = outcomeTimeout
	case errors.Is(l.Err, syncguard.ErrAborted):
		outcome = outcomeCancelled
	default:
		outcome, code = outcomeError, errorType(l.Err)
	}
	m, bg := t.m, context.Background()
	m.waitDur.Record(bg, l.Waited.Seconds(), m.set(setKey{outcome: outcome, code: code, label: label}).rec...)
	if l.Err == nil {
		m.held.Add(bg, 1, m.set(setKey{label: label}).add...)
	}
	if l.Attempts > 1 {
		m.lastContended.Store(time.Now().UnixNano())
	}
	span := trace.SpanFromContext(ctx)
	switch {
	case !span.IsRecording():
	case l.Err == nil:
		span.AddEvent(outcomeAcquired, trace.WithAttributes(AttrAttempts.Int(l.Attempts),
			AttrWaitDuration.Float64(l.Waited.Seconds())))
		span.SetAttributes(AttrOutcome.String(outcomeAcquired), AttrAttempts.Int(l.Attempts))
	default:
		span.SetAttributes(AttrAttempts.Int(l.Attempts), AttrWaitDuration.Float64(l.Waited.Seconds()))
		recordError(span, l.Err)
		span.SetAttributes(AttrOutcome.String(outcome))
	}
}

// HoldEnd implements syncguard.Tracer: the span gets the event "released",
// or "lost" with syncguard.loss.reason (and status Error), and
// syncguard.hold.outcome. The metrics count a holding whose release found
// the lock expired or gone (LossReason) as lost too.
func (t *Tracer) HoldEnd(ctx context.Context, l syncguard.TraceLock) {
	released, label := errors.Is(l.Err, syncguard.ErrLeaseReleased), t.label(l.Key)
	outcome := outcomeReleased
	if !released || l.LossReason != "" {
		outcome = outcomeLost
	}
	m, bg := t.m, context.Background()
	m.holdDur.Record(bg, l.Held.Seconds(), m.set(setKey{outcome: outcome, label: label}).rec...)
	m.held.Add(bg, -1, m.set(setKey{label: label}).add...)
	if outcome == outcomeLost {
		m.losses.Add(bg, 1, m.set(setKey{loss: lossValue(l.LossReason), label: label}).add...)
	}
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	if released {
		span.AddEvent(outcomeReleased)
		span.SetAttributes(AttrHoldOutcome.String(outcomeReleased))
		return
	}
	why := lossUnknown
	if errors.Is(l.Err, syncguard.ErrLockLost) {
		why = lossValue(l.LossReason)
	}
	if l.Err != nil {
		span.AddEvent(outcomeLost, trace.WithAttributes(AttrLossReason.String(why), attrExcMsg.String(l.Err.Error())))
	}
	span.SetAttributes(AttrHoldOutcome.String(outcomeLost), AttrLossReason.String(why))
	span.SetStatus(codes.Error, "lock lost")
}

// LockEnd implements syncguard.Tracer: it ends the span, with fn's error
// recorded for WithLock.
func (t *Tracer) LockEnd(ctx context.Context, l syncguard.TraceLock) {
	span := trace.SpanFromContext(ctx)
	if l.WithLock && l.LockID != "" && l.Err != nil && span.IsRecording() {
		recordError(span, l.Err)
	}
	span.End()
}
