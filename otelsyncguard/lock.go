package otelsyncguard

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/syncguard/syncguard-go/syncguard"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// Lock is syncguard.Lock(ctx, b, key, opts) in a span "syncguard.lock"
// that lasts until the lease ends: the acquire attempts are its children,
// and so are the lease's extends and release when made with a context
// derived from ctx (auto-extension's are). When the lock is acquired the
// span gets the event "acquired" and the attributes syncguard.attempts and
// syncguard.outcome=acquired (or timeout, cancelled, error with error.type
// and status Error); when the lease ends, the event "released" or "lost"
// (with syncguard.loss.reason). End the lease (Close, Release) to end the
// span. The attempts are counted with opts.OnAttempt, which still gets
// each attempt when set.
func (b *Backend) Lock(ctx context.Context, key string, opts *syncguard.LockOptions) (*syncguard.Lease, error) {
	ctx, span := b.startLock(ctx, spanLock, key)
	c := &lockCall{Backend: b}
	start := time.Now()
	lease, err := syncguard.Lock(ctx, c, key, c.options(opts))
	if err != nil {
		c.waitFailed(span, start, err)
		span.End()
		return nil, err
	}
	c.acquired(span, lease, start)
	lctx, cancel := lease.Bind(context.Background())
	context.AfterFunc(lctx, func() {
		cancel()
		c.holdEnded(span, lease.Err())
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
	c := &lockCall{Backend: b}
	start := time.Now()
	var lease *syncguard.Lease
	var inner func(context.Context, *syncguard.Lease) error
	var lost lossOnce
	if fn != nil {
		inner = func(ctx context.Context, l *syncguard.Lease) error {
			lease = l
			c.acquired(span, l, start)
			// The moment of a loss, while fn still runs.
			lctx, cancel := l.Bind(context.Background())
			defer cancel()
			context.AfterFunc(lctx, func() { lost.record(span, c, l.Err(), false) })
			return fn(ctx, l)
		}
	}
	err := syncguard.WithLock(ctx, c, key, inner, c.options(opts))
	if lease == nil {
		c.waitFailed(span, start, err)
		return err
	}
	// The release is done: the lease has ended, unless the release failed.
	cause := lease.Err()
	lost.record(span, c, cause, true)
	if cause != nil && span.IsRecording() {
		if errors.Is(cause, syncguard.ErrLeaseReleased) {
			span.AddEvent(outcomeReleased)
			span.SetAttributes(AttrHoldOutcome.String(outcomeReleased))
		} else {
			span.SetAttributes(AttrHoldOutcome.String(outcomeLost), AttrLossReason.String(c.lossReason(cause)))
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

// A lockCall is the Locker that one Lock or WithLock of a Backend passes
// to syncguard.Lock or WithLock: the Backend itself, plus the count of the
// call's attempts (LockOptions.OnAttempt) for its span.
type lockCall struct {
	*Backend
	// attempts is counted by OnAttempt on the caller's goroutine, and read
	// there once the wait is over.
	attempts int64
	lease    *syncguard.Lease // once acquired
}

var _ syncguard.Queuer = (*lockCall)(nil)

// options returns a copy of opts whose OnAttempt counts the attempt, then
// calls opts.OnAttempt.
func (c *lockCall) options(opts *syncguard.LockOptions) *syncguard.LockOptions {
	var o syncguard.LockOptions
	if opts != nil {
		o = *opts
	}
	user := o.OnAttempt
	o.OnAttempt = func(res syncguard.AcquireResult, err error) {
		c.attempts++
		if user != nil {
			user(res, err)
		}
	}
	return &o
}

// lossReason is the syncguard.loss.reason of the lease's end cause.
func (c *lockCall) lossReason(cause error) string {
	if !errors.Is(cause, syncguard.ErrLockLost) || c.lease == nil {
		return lossUnknown
	}
	return lossValue(c.lease.LossReason())
}

func (c *lockCall) acquired(span trace.Span, lease *syncguard.Lease, start time.Time) {
	c.lease = lease
	if span.IsRecording() {
		span.AddEvent(outcomeAcquired, trace.WithAttributes(AttrAttempts.Int64(c.attempts),
			AttrWaitDuration.Float64(time.Since(start).Seconds())))
		span.SetAttributes(AttrOutcome.String(outcomeAcquired), AttrAttempts.Int64(c.attempts))
	}
}

func (c *lockCall) waitFailed(span trace.Span, start time.Time, err error) {
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
	span.SetAttributes(AttrAttempts.Int64(c.attempts), AttrWaitDuration.Float64(time.Since(start).Seconds()))
	recordError(span, err)
	span.SetAttributes(AttrOutcome.String(outcome))
}

// holdEnded records how the lease of a Lock span ended.
func (c *lockCall) holdEnded(span trace.Span, cause error) {
	if !span.IsRecording() {
		return
	}
	if errors.Is(cause, syncguard.ErrLeaseReleased) {
		span.AddEvent(outcomeReleased)
		span.SetAttributes(AttrHoldOutcome.String(outcomeReleased))
		return
	}
	lostEvent(span, c, cause)
	span.SetAttributes(AttrHoldOutcome.String(outcomeLost), AttrLossReason.String(c.lossReason(cause)))
	span.SetStatus(codes.Error, "lock lost")
}

// lossOnce adds the event "lost" to a span at most once: when the loss
// happens (while fn runs), or at the latest when the span is about to end.
type lossOnce struct {
	mu             sync.Mutex
	recorded, done bool
}

func (o *lossOnce) record(span trace.Span, c *lockCall, cause error, final bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.done || o.recorded {
		o.done = o.done || final
		return
	}
	o.done = final
	if cause != nil && !errors.Is(cause, syncguard.ErrLeaseReleased) {
		o.recorded = true
		lostEvent(span, c, cause)
	}
}

// lostEvent adds the event "lost" if cause is a loss.
func lostEvent(span trace.Span, c *lockCall, cause error) {
	if cause == nil || errors.Is(cause, syncguard.ErrLeaseReleased) || !span.IsRecording() {
		return
	}
	span.AddEvent(outcomeLost, trace.WithAttributes(AttrLossReason.String(c.lossReason(cause)),
		attrExcMsg.String(cause.Error())))
}
