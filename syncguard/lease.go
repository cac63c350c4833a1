package syncguard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// ErrLockLost is the cause (errors.Is) reported by Lease.Err, and by the
// context WithLock gives fn with AutoExtend, once ownership of the lock can
// no longer be guaranteed: an extend found the lock gone or expired, or no
// extend succeeded before the guaranteed lifetime ran out.
var ErrLockLost = errors.New("syncguard: lock lost")

// ErrLeaseReleased is Lease.Err after the lease released its lock.
var ErrLeaseReleased = errors.New("syncguard: lease released")

// Lease is a held lock, returned by Lock and passed to WithLock's fn. Its
// methods are safe for concurrent use.
//
// # Ending a lease
//
// Release releases the lock once; later calls return the first result
// without I/O, and a call made while a release is in flight waits for it. A
// release that failed with an error may be tried again. Close is Release
// for defer: it runs at most once (concurrent calls wait for the first
// one's release), uses a context detached from the acquire's cancellation
// and bounded by LockOptions.ReleaseTimeout, and hands an error to
// LockOptions.OnReleaseError instead of returning it. OnReleaseError may
// call Close (which then returns at once) or Release (which tries again).
//
// # Extending
//
// Extend works only while the lease holds its lock. Once the lease has
// ended (Done closed), Extend makes no I/O and returns an *Error with Code
// InvalidArgument that wraps Err, so errors.Is(err, ErrLockLost) or
// errors.Is(err, ErrLeaseReleased) tells which; if the lease ends while an
// extend is in flight, that extend returns the same error whatever the
// server answered. Extend therefore never reports OK for a lease whose Err
// is not nil, and never revives a lost lease. A lease declared lost may
// still have its row on the server (the loss is declared early, see below):
// Release or Close frees it.
//
// # Loss and timing
//
// Done is closed, and Err set, when the lease ends: on release
// (ErrLeaseReleased), or when ownership can no longer be guaranteed
// (errors.Is(err, ErrLockLost)): an Extend, explicit or automatic, found
// the lock expired or gone, or the guaranteed lifetime ran out without a
// successful extend.
//
// PostgreSQL's clock decides expiry, and client and server wall clocks
// cannot be compared: the lease never compares ExpiresAt (server time) with
// time.Now, it translates the granted lifetime onto the local monotonic
// clock. The server set ExpiresAt to its statement time (truncated to the
// millisecond) + ttl (docs/spec.md, rule T1), and that statement cannot
// have started before this process sent the request, so the lock is held
// at least until
//
//	sent + ttl - 1ms   (local monotonic clock)
//
// (the round trip is the margin for latency). A tenth of the lifetime (at
// most 1 s) is kept back on top for timer latency and clock-rate
// differences: the lease is declared lost then, before the server-side
// expiry, never after it. Others may take the key only one liveness
// tolerance (1 s) after ExpiresAt: headroom, not counted on. A step of the
// server's clock (a manual change, not NTP slewing) breaks every TTL-based
// lock; fencing tokens protect the resource then.
//
// An extend that returns an error (other than InvalidArgument, which is
// reported before any I/O) has an unknown outcome: it may have committed
// although its answer was lost. Extend sets the expiry to server now + ttl,
// so a ttl shorter than what is left would then have shortened the lock.
// The guaranteed lifetime after such an extend is therefore the earlier of
// the current one and sent + ttl - 1ms minus the margin, for manual and
// automatic extends alike; the next successful extend sets it afresh.
// ExpiresAt keeps reporting the last confirmed expiry.
//
// With LockOptions.AutoExtend the lease extends itself by TTL once a third
// of the current lifetime has passed (from that request's send time),
// retries a failed extend every tenth of the lifetime, and gives up when
// the lifetime runs out; such an outage logs one warning (to
// LockOptions.Logger) as it starts, one line as it ends. Extensions are
// serialized, so the latest response describes the latest expiry. A
// successful manual Extend sets the current lifetime too: the next
// automatic extend is due a third of its ttl after it was sent.
type Lease struct {
	backend Locker
	key     string
	lockID  string
	fence   Fence
	cfg     lockConfig
	base    context.Context // the acquire's ctx without its cancellation: values for Close

	ctx context.Context // done when the lease ends; its cause is Err
	end context.CancelCauseFunc

	extendSem chan struct{} // capacity 1: serializes extends

	// mu guards the fields below, and every call of end is made holding it,
	// so "the lease has ended" (ctx.Err() != nil) is stable under mu.
	mu        sync.Mutex
	expiresAt time.Time
	lostAt    time.Time // local monotonic instant up to which ownership is guaranteed, minus the margin
	heldUntil time.Time // local monotonic instant up to which ownership is guaranteed
	extendAt  time.Time // when the latest successful extend (or the acquire) says to extend next
	lastErr   error     // last failed extend, for the loss message
	watchdog  *time.Timer
	releasing chan struct{} // non-nil while a release is in flight; closed when it ends
	released  bool
	result    ReleaseResult
	loss      string // LockEvent.LossReason, once lost

	closing chan struct{} // non-nil once Close started; closed when it is done

	stopExtender context.CancelFunc // nil without AutoExtend
	extenderDone chan struct{}
	// rescheduled (capacity 1) tells the auto-extender that a manual Extend
	// succeeded, so it must take its timer from extendAt. Sent to and
	// drained only while holding extendSem.
	rescheduled chan struct{}
}

// schedule returns, for a lock granted ttl by a request sent at sent,
// when ownership stops being guaranteed (lostAt) and when to extend next.
func schedule(sent time.Time, ttl time.Duration) (lostAt, extendAt time.Time) {
	granted := heldUntil(sent, ttl).Sub(sent)
	margin := min(granted/10, time.Second)
	return sent.Add(granted - margin), sent.Add(granted / 3)
}

// heldUntil is sent + ttl - 1 ms (PostgreSQL counts whole milliseconds).
func heldUntil(sent time.Time, ttl time.Duration) time.Time {
	return sent.Add(max(ttl.Truncate(time.Millisecond)-time.Millisecond, 0))
}

// extendRetryDelay is the wait after a failed automatic extend.
func extendRetryDelay(ttl time.Duration) time.Duration {
	return max(ttl/10, time.Millisecond)
}

func newLease(ctx context.Context, b Locker, key string, res AcquireResult, sent time.Time, cfg lockConfig, sink helperSink) *Lease {
	l := &Lease{
		backend: b, key: key, lockID: res.LockID, fence: res.Fence, cfg: cfg,
		base: context.WithoutCancel(ctx), expiresAt: res.ExpiresAt,
		extendSem: make(chan struct{}, 1),
	}
	l.ctx, l.end = context.WithCancelCause(context.Background())
	if sink != nil {
		l.reportHold(sink)
	}
	lostAt, extendAt := schedule(sent, cfg.ttl)
	l.mu.Lock()
	l.lostAt, l.extendAt, l.heldUntil = lostAt, extendAt, heldUntil(sent, cfg.ttl)
	l.watchdog = time.AfterFunc(time.Until(lostAt), l.checkLifetime)
	l.mu.Unlock()
	if cfg.autoExtend {
		ectx, stop := context.WithCancel(ctx)
		l.stopExtender, l.extenderDone = stop, make(chan struct{})
		l.rescheduled = make(chan struct{}, 1)
		go l.autoExtend(ectx, extendAt)
	}
	return l
}

// Key returns the key as passed to Lock.
func (l *Lease) Key() string { return l.key }

// LockID returns the lockId. It is a capability: whoever has it can
// release the lock. Don't log it (HashKey(lease.LockID()) is safe to log).
func (l *Lease) LockID() string { return l.lockID }

// Fence returns the fencing token of this holding. Pass it to the resource
// you protect and have it reject writes with a smaller fence.
func (l *Lease) Fence() Fence { return l.fence }

// ExpiresAt returns the server-computed expiry from the acquire or the
// latest successful extend (server clock; see Lease for how it is used).
func (l *Lease) ExpiresAt() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.expiresAt
}

// HeldUntil returns the local instant (monotonic clock) up to which the
// lock is guaranteed held by the server's answers: the request that took or
// last extended it was sent before the server started its ttl, so until
// that send time + ttl - 1 ms. A key handed over by a release counts from
// the release (the waiter's send time moved back by the lock's age on the
// server's clock). Done closes a margin before it. For programs that keep
// the lock by their own means (syncguard run does).
func (l *Lease) HeldUntil() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.heldUntil
}

// Done returns a channel that is closed when the lease ends: when its lock
// is released through it or lost (see Err).
func (l *Lease) Done() <-chan struct{} { return l.ctx.Done() }

// Err returns nil while the lease holds its lock. After Done is closed it
// returns ErrLeaseReleased, or an error for which errors.Is(err,
// ErrLockLost) is true that says how the lock was lost.
func (l *Lease) Err() error {
	if l.ctx.Err() == nil {
		return nil
	}
	return context.Cause(l.ctx)
}

// Bind returns a copy of parent that is also cancelled when the lease
// ends, with Err as its cause (context.Cause). Call cancel when done with
// it. WithLock gives fn such a context when AutoExtend is set.
func (l *Lease) Bind(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	stop := context.AfterFunc(l.ctx, func() { cancel(l.Err()) })
	return ctx, func() {
		stop()
		cancel(context.Canceled)
	}
}

// Extend sets the lock's expiry to server now + ttl, if the lease still
// owns it; it never revives an expired lock. A result with OK false means
// the lock is lost: the lease ends with an ErrLockLost cause. A successful
// extend moves the guaranteed lifetime, and with AutoExtend the next
// automatic extend, to what ttl grants (see Lease). An extend that fails
// may have committed: if its ttl would end the lock earlier than the
// current guaranteed lifetime, the lease keeps only the earlier one. On an
// ended lease, Extend returns an error wrapping Err without I/O.
func (l *Lease) Extend(ctx context.Context, ttl time.Duration) (ExtendResult, error) {
	res, _, err := l.extend(ctx, ttl, true)
	return res, err
}

// endedError is the error of an extend on a lease that has ended. Caller
// holds mu, or knows that the lease has ended.
func (l *Lease) endedError() error {
	return &Error{Op: "extend", Code: CodeInvalidArgument, Key: l.key, LockID: l.lockID,
		Msg: "the lease has ended", Err: l.Err()}
}

// extend does one extend. On success it moves expiresAt, lostAt and
// extendAt and returns when to extend next; a result with OK false ends the
// lease as lost. manual is true for Lease.Extend, false for the
// auto-extender, whose errors are kept in lastErr.
func (l *Lease) extend(ctx context.Context, ttl time.Duration, manual bool) (res ExtendResult, next time.Time, err error) {
	if l.cfg.onExtend != nil {
		defer func() { // after mu and extendSem are released
			if err == nil && res.OK {
				l.cfg.onExtend(res)
			}
		}()
	}
	if l.ctx.Err() != nil {
		return ExtendResult{}, time.Time{}, l.endedError()
	}
	select {
	case l.extendSem <- struct{}{}:
		defer func() { <-l.extendSem }()
	case <-ctx.Done():
		e := fromContext(ctx, "extend", nil)
		e.LockID = l.lockID
		return ExtendResult{}, time.Time{}, e
	}
	if !manual && l.rescheduled != nil {
		// Any manual extend signalled so far ran before this one, which
		// supersedes it.
		select {
		case <-l.rescheduled:
		default:
		}
	}
	if l.ctx.Err() != nil { // ended while waiting for extendSem
		return ExtendResult{}, time.Time{}, l.endedError()
	}
	sent := time.Now()
	res, err = l.backend.Extend(ctx, l.lockID, ttl)

	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ctx.Err() != nil {
		// Ended (lost or released) while the extend was in flight: whatever
		// the server said, the lease does not hold the lock any more.
		return ExtendResult{}, time.Time{}, l.endedError()
	}
	if err != nil {
		if !manual {
			l.lastErr = err // for the loss message
		}
		if mayHaveCommitted(err) {
			// The extend may have committed, setting the expiry to server
			// now + ttl, which is earlier than the current lifetime when
			// ttl is shorter than what is left. Only the earlier of the
			// two is guaranteed.
			if lostAt, _ := schedule(sent, ttl); lostAt.Before(l.lostAt) {
				l.lostAt, l.lastErr = lostAt, err
				l.watchdog.Reset(time.Until(lostAt))
			}
		}
		return res, time.Time{}, err
	}
	if !res.OK {
		l.loss = lossGone
		if res.Reason == ReasonExpired {
			l.loss = lossExpired
		}
		l.end(lostBecause(res.Reason))
		return res, time.Time{}, nil
	}
	lostAt, next := schedule(sent, ttl)
	l.expiresAt, l.lostAt, l.extendAt, l.lastErr = res.ExpiresAt, lostAt, next, nil
	l.heldUntil = heldUntil(sent, ttl)
	l.watchdog.Reset(time.Until(lostAt))
	if manual && l.rescheduled != nil {
		select {
		case l.rescheduled <- struct{}{}:
		default:
		}
	}
	return res, next, nil
}

// mayHaveCommitted reports whether an operation that returned err may
// have committed: every error but InvalidArgument (before any I/O, or for
// an ended transaction). A server's rejection did not commit either, but
// a LockBackend need not say so; treating it as unknown only ends a lease
// early.
func mayHaveCommitted(err error) bool {
	return CodeOf(err) != CodeInvalidArgument
}

func lostBecause(reason string) error {
	if reason == ReasonExpired {
		return fmt.Errorf("%w: extend found it expired", ErrLockLost)
	}
	return fmt.Errorf("%w: extend found it gone (released, deleted or taken over)", ErrLockLost)
}

// checkLifetime runs when the watchdog fires: the lease is lost unless an
// extend moved lostAt meanwhile.
func (l *Lease) checkLifetime() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.released || time.Now().Before(l.lostAt) {
		return
	}
	l.loss = lossNotExtended
	if last := l.lastErr; last != nil {
		l.end(fmt.Errorf("%w: not extended before its guaranteed lifetime ran out; last extend error: %w", ErrLockLost, last))
	} else {
		l.end(fmt.Errorf("%w: not extended before its guaranteed lifetime ran out", ErrLockLost))
	}
}

// autoExtend is the extension loop of an AutoExtend lease. An outage logs
// a warning as it starts, a line as it ends (extends work again, or lost).
func (l *Lease) autoExtend(ctx context.Context, next time.Time) {
	defer close(l.extenderDone)
	t := time.NewTimer(time.Until(next))
	defer t.Stop()
	var outage time.Time // when extends started failing; zero while they work
	keyHash, since := slog.String("keyHash", HashKey(l.key)), func(from time.Time) slog.Attr {
		return slog.Duration("outage", time.Since(from).Round(time.Millisecond))
	}
	defer func() {
		if err := l.Err(); !outage.IsZero() && errors.Is(err, ErrLockLost) {
			l.cfg.logger.Warn("syncguard: automatic lock extension gave up: the lock is lost", keyHash, since(outage), slog.String("error", err.Error()))
		}
	}()
	for {
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		case <-l.ctx.Done():
			return
		case <-l.rescheduled:
			// A manual Extend succeeded: the current lifetime is its.
			l.mu.Lock()
			next = l.extendAt
			l.mu.Unlock()
			t.Reset(time.Until(next))
			continue
		}
		l.mu.Lock()
		lostAt := l.lostAt
		l.mu.Unlock()
		// An answer after lostAt is of no use: the lease is lost by then.
		actx, cancel := context.WithDeadline(ctx, lostAt)
		res, n, err := l.extend(actx, l.cfg.ttl, false)
		cancel()
		switch {
		case ctx.Err() != nil, l.ctx.Err() != nil:
			return // stopped by Release or by the caller, or ended: the outcome no longer matters
		case err == nil && res.OK:
			if !outage.IsZero() {
				l.cfg.logger.Info("syncguard: automatic lock extension works again; the lock is still held", keyHash, since(outage))
			}
			next, outage = n, time.Time{}
		case err == nil:
			return // lost; extend ended the lease
		default:
			if outage.IsZero() {
				outage = time.Now()
				l.cfg.logger.Warn("syncguard: automatic lock extension failed; retrying until the lock's guaranteed lifetime runs out", keyHash,
					slog.String("code", string(CodeOf(err))), slog.Duration("lostIn", time.Until(lostAt).Round(time.Millisecond)), slog.String("error", err.Error()))
			}
			next = time.Now().Add(extendRetryDelay(l.cfg.ttl))
		}
		t.Reset(time.Until(next))
	}
}

// stopAutoExtend stops the extension loop and waits (within ctx) for it to
// exit, so no extend runs concurrently with or after the release.
func (l *Lease) stopAutoExtend(ctx context.Context) {
	if l.stopExtender == nil {
		return
	}
	l.stopExtender()
	select {
	case <-l.extenderDone:
	case <-ctx.Done():
	}
}

// Release releases the lock if the lease still owns it. It stops
// auto-extension first. The first call that completes without error
// decides the result; later calls return it without I/O. A call made while
// another release is in flight waits for it (within ctx).
func (l *Lease) Release(ctx context.Context) (ReleaseResult, error) {
	l.stopAutoExtend(ctx)
	for {
		l.mu.Lock()
		if l.released {
			r := l.result
			l.mu.Unlock()
			return r, nil
		}
		if ch := l.releasing; ch != nil {
			l.mu.Unlock()
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				e := fromContext(ctx, "release", nil)
				e.LockID = l.lockID
				return ReleaseResult{}, e
			}
		}
		ch := make(chan struct{})
		l.releasing = ch
		l.mu.Unlock()

		res, err := l.backend.Release(ctx, l.lockID)

		l.mu.Lock()
		l.releasing = nil
		if err == nil {
			l.released, l.result = true, res
			l.watchdog.Stop()
			l.end(ErrLeaseReleased)
		}
		l.mu.Unlock()
		close(ch)
		return res, err
	}
}

// Close releases the lock, at most once, for use with defer. See Lease.
func (l *Lease) Close() { l.dispose(releaseSourceClose) }

// dispose releases once; concurrent and later calls wait for the first
// one's release. It uses a channel rather than sync.Once so that a waiting
// Close is durably blocked in the eyes of testing/synctest. The channel is
// closed before onReleaseError runs, so a Close made from the callback
// returns instead of waiting for itself.
func (l *Lease) dispose(source string) {
	l.mu.Lock()
	if ch := l.closing; ch != nil {
		l.mu.Unlock()
		<-ch
		return
	}
	ch := make(chan struct{})
	l.closing = ch
	l.mu.Unlock()

	err := func() error {
		defer close(ch)
		ctx, cancel := context.WithTimeout(l.base, l.cfg.releaseTimeout)
		defer cancel()
		_, err := l.Release(ctx)
		return err
	}()
	if err != nil {
		l.cfg.onReleaseError(err, ReleaseErrorInfo{Key: l.key, LockID: l.lockID, Source: source})
	}
}

// Sources of a release error, for ReleaseErrorInfo.Source.
const (
	releaseSourceWithLock = "withLock"
	releaseSourceClose    = "close"
)

// ReleaseErrorInfo tells OnReleaseError which lock a failed release was for.
type ReleaseErrorInfo struct {
	// Key and LockID are raw values. The lockId lets its bearer release the
	// lock and keys may hold personal data: log HashKey of them instead.
	Key    string
	LockID string
	// Source is "withLock" for the release after fn in WithLock, "close"
	// for Lease.Close.
	Source string
}

// lockConfig is LockOptions with defaults applied.
type lockConfig struct {
	ttl, retryDelay, timeout, releaseTimeout time.Duration
	maxRetries                               int
	backoff, jitter, identity                string
	failFast, autoExtend                     bool
	onReleaseError                           func(error, ReleaseErrorInfo)
	onAttempt                                func(AcquireResult, error)
	onExtend                                 func(ExtendResult)
	logger                                   *slog.Logger
}

// reportHold makes the lease emit its "hold" event to sink when it ends,
// from the call that ends it (so the event is queued before that call
// returns). Called before the lease is shared.
func (l *Lease) reportHold(sink helperSink) {
	start, end := time.Now(), l.end
	var once sync.Once
	l.end = func(cause error) {
		end(cause)
		once.Do(func() {
			cause := context.Cause(l.ctx) // the first one
			e := rawEvent{typ: EventHold, ok: errors.Is(cause, ErrLeaseReleased), reason: reasonReleased,
				key: l.key, lockID: l.lockID, dur: time.Since(start)}
			if !e.ok {
				e.reason, e.err, e.loss = reasonLost, cause, l.loss
			}
			sink.helperEvent(e)
		})
	}
}
