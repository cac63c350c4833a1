package syncguard

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// acquire is the waiting loop of Lock and WithLock ("When a waiter
// attempts" in docs/design.md). It returns the successful result and its
// request's send time (moved back by the lock's age for a hand-off). On a
// Queuer the attempts go through one Waiter, else the loop polls. A waiter
// that gives up leaves the queue before Lock returns (in the background
// after an outage, so that Lock returns at its Timeout).
func acquire(ctx context.Context, b Locker, key string, c *lockConfig) (AcquireResult, time.Time, int, error) {
	l := &waitLoop{ctx: ctx, b: b, key: key, c: c, start: time.Now()}
	if c.Acquisition.Timeout > 0 {
		l.deadline = l.start.Add(c.Acquisition.Timeout)
	}
	if q, ok := b.(Queuer); ok {
		l.w = q.Queue(key, c.Identity, c.maxRetries == 0)
	}
	res, sent, err := l.run()
	if l.w != nil && (err != nil || !res.OK) {
		leave := func() {
			lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.ReleaseTimeout)
			defer cancel()
			_ = l.w.Leave(lctx) // a Waiter that cannot leave now cleans up after itself
		}
		if l.realErr != nil {
			go leave() // an outage: the server may not answer before the release timeout
		} else {
			leave()
		}
	}
	return res, sent, l.attempts, err
}

// cue is an event the loop waits for between two attempts.
type cue int

const (
	cueDeadline cue = iota // Timeout reached: the wait ends
	cueRetry               // a scheduled retry, counted against MaxRetries
	cueExpiry              // the holder's lock, as the last attempt saw it, is no longer live
	cueRenew               // the waiter's place in the queue needs renewing
	cuePoll                // no release can hand the waiter the key: it looks itself
	cueHeed                // a fruitless wake-up's pause is over: wake-ups count again
	numCues
	cueWoken     // a release may have handed the key to the waiter
	cueCancelled // ctx is done
)

const (
	maxDelay          = time.Duration(1 << 62)
	unboundedMaxDelay = time.Second // the retry delay's cap without MaxRetries
)

// delay returns the wait before retry n (1-based).
func (c *lockConfig) delay(n int) time.Duration {
	d := c.Acquisition.RetryDelay
	if c.Acquisition.Backoff == backoffExponential {
		for i := 1; i < n && d < maxDelay; i++ {
			d *= 2
		}
	}
	d = min(d, maxDelay) // no overflow below
	if c.maxRetries == math.MaxInt {
		d = min(d, max(c.Acquisition.RetryDelay, unboundedMaxDelay))
	}
	switch c.Acquisition.Jitter {
	case jitterEqual:
		d = d/2 + rand.N(d-d/2+1)
	case jitterFull:
		d = rand.N(d + 1)
	}
	return d
}

// retriesQueued: a queued waiter keeps its scheduled retries this long
// into its wait: a release in flight when it queued did not see its row,
// and left the key free without a hint. A waiter far back (farBack) needs
// none: the key is not free for it while those ahead wait, and its
// approach (Hints' renew) brings it near the head.
const retriesQueued = 2 * time.Second

// farBacker is the core's Waiter, which knows its place (a wrapper from
// another package cannot implement it, and keeps the retries).
type farBacker interface{ farBack() bool }

// The polling of a waiter that no notification reaches: pollMin doubling
// to pollMax; while the holder's lock stays the same (its expiry, as the
// attempts see it: within the span from an attempt's send to its answer
// plus RetryIn, which a loaded server widens), on to a quarter of how long
// it has stayed, up to pollStall. A hand-off or an extend resets it: short
// holds are polled at pollMax, and a release after a long one waits at
// most a quarter of the hold (or pollStall) for the poll that finds the
// key.
const (
	pollMin   = 5 * time.Millisecond
	pollMax   = 25 * time.Millisecond
	pollStall = time.Second
)

// waitLoop is the state of one acquire.
type waitLoop struct {
	ctx             context.Context
	b               Locker
	w               Waiter // nil: polling on the schedule
	key             string
	c               *lockConfig
	start, deadline time.Time // deadline zero: no Timeout, only ctx

	attempts, retries int
	final             bool          // the last scheduled retry is running
	answered          bool          // some attempt got an answer
	fastest           time.Duration // the quickest answer so far
	lastErr, realErr  error         // the last attempt's error since an answer; the last not cut by the deadline

	due                          [numCues]time.Time // zero: not expected
	timer                        *time.Timer
	wake, hintWake               <-chan struct{} // the waiter's wake-up: heeded, and as the waiter gave it
	hintGap, pollGap             time.Duration
	holderLo, holderHi, holderAt time.Time // the holder's expiry as polled (a span), and when it was first seen
}

func (l *waitLoop) run() (AcquireResult, time.Time, error) {
	l.timer = time.NewTimer(time.Hour)
	defer l.timer.Stop()
	if !l.deadline.IsZero() {
		l.due[cueDeadline] = l.deadline
	}
	l.due[cueRetry] = l.start.Add(l.c.delay(1))
	woken := false
	for {
		res, sent, cut, err := l.attempt()
		switch {
		case err == nil && res.OK:
			return res, sent, nil
		case cut:
			return l.giveUp(context.Cause(l.ctx))
		case err != nil && (l.c.maxRetries == 0 || !l.outage(err)):
			return AcquireResult{}, time.Time{}, err
		case l.c.maxRetries == 0 || l.final:
			return l.giveUp(nil)
		}
		l.plan(res, sent, err == nil, woken && err == nil)
		woken = false
	wait:
		for {
			switch ev := l.next(); ev {
			case cueDeadline:
				return l.giveUp(nil)
			case cueCancelled:
				if errors.Is(l.ctx.Err(), context.DeadlineExceeded) {
					return l.giveUp(context.Cause(l.ctx))
				}
				return AcquireResult{}, time.Time{}, &Error{Op: "lock", Code: CodeAborted, Key: l.key, Err: context.Cause(l.ctx),
					Msg: fmt.Sprintf("context cancelled while waiting for the lock after %s", plural(l.attempts, "attempt"))}
			case cueHeed:
				l.wake = l.hintWake
			case cueRetry:
				l.retries++
				l.final = l.retries >= l.c.maxRetries
				l.due[cueRetry] = time.Now().Add(l.c.delay(l.retries + 1))
				break wait
			case cueWoken:
				woken = true
				break wait
			default: // cueExpiry, cueRenew, cuePoll
				break wait
			}
		}
		if !l.deadline.IsZero() && !time.Now().Add(l.fastest).Before(l.deadline) {
			return l.giveUp(nil) // no answer would come in time: no attempt is cut (pgx closes a cut statement's connection)
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
	if l.w != nil {
		res, err = l.w.Attempt(actx, l.c.TTL)
	} else {
		res, err = l.b.Acquire(actx, l.key, l.c.TTL)
	}
	cancel()
	if err == nil {
		if d := time.Since(sent); !l.answered || d < l.fastest {
			l.fastest = d
		}
		l.answered, l.lastErr = true, nil
		sent = sent.Add(-res.HandedOver) // (sent matters only when res.OK)
	} else {
		cut = l.ctx.Err() == nil && !l.deadline.IsZero() && !time.Now().Before(l.deadline) || errors.Is(l.ctx.Err(), context.DeadlineExceeded)
		if cut {
			err = &Error{Op: "lock", Code: CodeNetworkTimeout, Key: l.key, Err: err,
				Msg: fmt.Sprintf("attempt %d got no answer before the end of the wait (%v)", l.attempts, time.Since(l.start).Round(time.Millisecond))}
		} else {
			l.realErr = err
		}
		l.lastErr = err
	}
	if l.c.OnAttempt != nil {
		l.c.OnAttempt(res, err)
	}
	return res, sent, cut, err
}

// plan sets the cues after a failed attempt sent at sent (answered: not
// an outage's); fruitless: a woken one's.
func (l *waitLoop) plan(res AcquireResult, sent time.Time, answered, fruitless bool) {
	now := time.Now()
	if res.RetryIn > 0 {
		l.due[cueExpiry] = now.Add(res.RetryIn)
	}
	if l.w == nil {
		return
	}
	wake, renew, poll := l.w.Hints()
	l.hintWake = wake
	switch {
	case answered && wake != nil && l.c.maxRetries == math.MaxInt && res.RetryIn > 0 && now.Sub(l.start) > retriesQueued,
		answered && wake != nil && l.c.maxRetries == math.MaxInt && isFarBack(l.w):
		l.due[cueRetry] = time.Time{} // queued behind a live lock, or far back: releases, expiry and renewals cue its attempts
	case l.due[cueRetry].IsZero():
		l.due[cueRetry] = now.Add(l.c.delay(l.retries + 1))
	}
	if l.due[cueHeed].IsZero() {
		l.wake = wake
	}
	if renew > 0 {
		l.due[cueRenew] = now.Add(renew)
	}
	if poll {
		limit := pollMax
		if res.RetryIn > 0 {
			lo, hi := sent.Add(res.RetryIn), now.Add(res.RetryIn)
			if lo.After(l.holderHi) || hi.Before(l.holderLo) {
				l.holderLo, l.holderHi, l.holderAt = lo, hi, now // another expiry: a hand-off or an extend
			}
			if lo.After(l.holderLo) { // the same holder: keep the spans' overlap
				l.holderLo = lo
			}
			if hi.Before(l.holderHi) {
				l.holderHi = hi
			}
			limit = min(max(limit, now.Sub(l.holderAt)/4), pollStall)
		}
		l.pollGap = min(max(2*l.pollGap, pollMin), limit)
		l.due[cuePoll] = now.Add(l.pollGap)
	} else {
		l.pollGap, l.due[cuePoll] = 0, time.Time{}
	}
	if fruitless {
		// the next wake-up is heeded after a pause (forged or replayed hints)
		l.hintGap = min(max(2*l.hintGap, 5*time.Millisecond), time.Second)
		l.wake, l.due[cueHeed] = nil, now.Add(l.hintGap)
	}
}

func (l *waitLoop) next() cue {
	first := numCues
	for i, t := range l.due {
		if !t.IsZero() && (first == numCues || t.Before(l.due[first])) {
			first = cue(i)
		}
	}
	var timer <-chan time.Time
	if first != numCues {
		l.timer.Reset(time.Until(l.due[first]))
		timer = l.timer.C
	}
	select {
	case <-l.wake:
		return cueWoken
	case <-timer:
		if first != cueRetry && first != cueDeadline {
			l.due[first] = time.Time{}
		}
		return first
	case <-l.ctx.Done():
		return cueCancelled
	}
}

// outage reports whether err is ridden out rather than returned.
func (l *waitLoop) outage(err error) bool {
	return !l.c.Acquisition.FailFast && CodeOf(err).Retryable()
}

// giveUp ends the wait (cause: ctx's, if done): busy once any attempt got
// an answer, else the outage, with its last real cause.
func (l *waitLoop) giveUp(cause error) (AcquireResult, time.Time, error) {
	elapsed := time.Since(l.start).Round(time.Millisecond)
	e := &Error{Op: "lock", Code: CodeAcquisitionTimeout, Key: l.key, Err: cause,
		Msg: fmt.Sprintf("lock still held by another owner after %s in %v", plural(l.attempts, "attempt"), elapsed)}
	switch {
	case !l.answered && l.realErr == nil:
		return AcquireResult{}, time.Time{}, l.lastErr // the only attempt, cut
	case !l.answered:
		e.Code, e.Err, e.Msg = CodeOf(l.realErr), l.realErr, fmt.Sprintf("no answer from the server to %s in %v", plural(l.attempts, "attempt"), elapsed)
	case l.lastErr != nil:
		e.Msg += fmt.Sprintf(" (the last attempt got no answer: %s)", CodeOf(l.lastErr))
	}
	return AcquireResult{}, time.Time{}, e
}

func isFarBack(w Waiter) bool {
	f, ok := w.(farBacker)
	return ok && f.farBack()
}
