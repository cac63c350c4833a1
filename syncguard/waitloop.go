package syncguard

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"
)

// acquire is the waiting loop of Lock and WithLock ("When a waiter
// attempts" in docs/design.md). It returns the successful result and its
// request's send time (moved back by the lock's age for a hand-off). Its
// attempts go through one waiter (a queuer's, else one that polls on the
// retry schedule), which says when it attempts next; the loop waits for
// that, the deadline or ctx. A waiter that gives up leaves the queue
// before Lock returns (in the background after an outage or an attempt
// the wait's end left unanswered, so that Lock returns at its Timeout).
func acquire(ctx context.Context, b Locker, key string, c *lockConfig) (AcquireResult, time.Time, int, error) {
	l := &waitLoop{ctx: ctx, b: b, key: key, c: c, start: time.Now()}
	if c.Acquisition.Timeout > 0 {
		l.deadline = l.start.Add(c.Acquisition.Timeout)
	}
	l.w = waiterFor(b, key, c)
	if c.Tracer != nil { // a polling waiter's Acquire traces itself on a Locker with this Tracer
		_, poll := l.w.(*pollWaiter)
		l.trace = !poll || !c.lockerTracer
	}
	res, sent, err := l.run()
	if err != nil || !res.OK {
		leave(ctx, l.w, c.ReleaseTimeout, l.realErr != nil, l.lastErr != nil)
	}
	return res, sent, l.attempts, err
}

// waitLoop is the state of one acquire.
type waitLoop struct {
	ctx                        context.Context
	w                          waiter
	b                          Locker
	key                        string
	c                          *lockConfig
	trace                      bool      // its attempts go to c.Tracer
	start, deadline            time.Time // deadline zero: no Timeout, only ctx
	attempts, retries, refused int       // refused: attempts the server answered with an error (a SQLSTATE)
	answered                   bool      // some attempt got an answer
	holderEnds                 time.Time // when the holder's lock stops being live, as the last answer said (zero: unknown)
	lastErr, realErr           error     // the last attempt's error since an answer; the last not cut by the deadline
}

func (l *waitLoop) run() (AcquireResult, time.Time, error) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	retry := l.start.Add(l.c.delay(1)) // the retry schedule's next attempt
	for final := false; ; {
		res, sent, cut, err := l.attempt()
		switch {
		case err == nil && res.OK:
			return res, sent, nil
		case cut:
			return l.giveUp(context.Cause(l.ctx))
		case err != nil && (l.c.maxRetries == 0 || l.c.Acquisition.FailFast || !CodeOf(err).Retryable()): // else an outage, ridden out
			return AcquireResult{}, time.Time{}, err
		case l.c.maxRetries == 0 || final:
			return l.giveUp(nil)
		}
		wake, at := l.w.Next(retry)
		if l.c.maxRetries != math.MaxInt && (at.IsZero() || retry.Before(at)) {
			at = retry // MaxRetries: the loop keeps the retry schedule
		}
		if !l.deadline.IsZero() && (at.IsZero() || l.deadline.Before(at)) {
			at = l.deadline
		}
		var due <-chan time.Time
		if !at.IsZero() {
			timer.Reset(time.Until(at))
			due = timer.C
		}
		select {
		case <-wake:
		case <-due:
		case <-l.ctx.Done():
			if errors.Is(l.ctx.Err(), context.DeadlineExceeded) {
				return l.giveUp(context.Cause(l.ctx))
			}
			return AcquireResult{}, time.Time{}, &Error{Op: "lock", Code: ErrAborted, Key: l.key, Err: context.Cause(l.ctx),
				Msg: fmt.Sprintf("context cancelled while waiting for the lock after %s", plural(l.attempts, "attempt"))}
		}
		timer.Stop()
		now := time.Now()
		if !l.deadline.IsZero() && !now.Before(l.deadline) {
			return l.giveUp(nil)
		}
		if !now.Before(retry) { // this attempt is the scheduled retry
			l.retries++
			final = l.retries >= l.c.maxRetries
			retry = now.Add(l.c.delay(l.retries + 1))
		}
	}
}

// attempt makes one attempt, ending at the deadline (on a half-open
// connection it would otherwise wait as long as ctx, which must outlive
// Lock for AutoExtend). cut: the wait's end cut it before an answer came.
func (l *waitLoop) attempt() (res AcquireResult, sent time.Time, cut bool, err error) {
	l.attempts++
	sent = time.Now()
	actx, cancel := l.ctx, context.CancelFunc(func() {})
	if !l.deadline.IsZero() {
		actx, cancel = context.WithDeadline(l.ctx, l.deadline)
	}
	if l.trace {
		var o opTrace
		o, actx = startOp(l.c.Tracer, actx, TraceOp{Op: "acquire", Key: l.key, Attempt: l.attempts, Locker: l.b})
		res, err = l.w.Attempt(actx, l.c.TTL)
		o.end(res.OK, res.Reason, res.LockID, err)
	} else {
		res, err = l.w.Attempt(actx, l.c.TTL)
	}
	cancel()
	if err == nil {
		l.answered, l.lastErr, l.holderEnds = true, nil, time.Time{}
		if !res.OK && res.RetryIn > 0 {
			l.holderEnds = sent.Add(res.RetryIn)
		}
		sent = sent.Add(-res.HandedOver) // (sent matters only when res.OK)
	} else {
		cut = l.ctx.Err() == nil && !l.deadline.IsZero() && !time.Now().Before(l.deadline) || errors.Is(l.ctx.Err(), context.DeadlineExceeded)
		if cut {
			err = &Error{Op: "lock", Code: ErrNetworkTimeout, Key: l.key, Err: err,
				Msg: fmt.Sprintf("attempt %d got no answer before the end of the wait (%v)", l.attempts, time.Since(l.start).Round(time.Millisecond))}
		} else {
			l.realErr = err
			if sqlState(err) != "" {
				l.refused++
			}
		}
		l.lastErr = err
	}
	if l.c.OnAttempt != nil {
		l.c.OnAttempt(res, err)
	}
	return res, sent, cut, err
}

// giveUp ends the wait without the lock (cause: ctx's, if done).
func (l *waitLoop) giveUp(cause error) (AcquireResult, time.Time, error) {
	return AcquireResult{}, time.Time{}, waitError(l.key, l.attempts, l.refused, time.Since(l.start).Round(time.Millisecond),
		l.answered, l.lastErr, l.realErr, cause, holderGone(l.holderEnds, l.lastErr))
}
