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
// no longer be guaranteed (see Lease).
var ErrLockLost = errors.New("syncguard: lock lost")

// ErrLeaseReleased is Lease.Err after the lease released its lock.
var ErrLeaseReleased = errors.New("syncguard: lease released")

// Lease is a held lock, returned by Lock and passed to WithLock's fn. Its
// methods are safe for concurrent use.
//
// Done is closed, and Err set, when the lease ends: on release
// (ErrLeaseReleased), or when ownership can no longer be guaranteed
// (errors.Is(err, ErrLockLost)): an extend found the lock expired or gone,
// or the guaranteed lifetime ran out without a successful extend. On an
// ended lease, or one that ends while the extend is in flight, Extend
// returns an InvalidArgument *Error wrapping Err: it never reports OK once
// Err is set, and never revives a lost lease. A lease declared lost may
// still have its row: Release or Close frees it.
//
// The lease never compares ExpiresAt (server time) with time.Now: the lock
// is held at least until sent + ttl - 1ms on the local monotonic clock, and
// the lease is declared lost a tenth of the lifetime (at most 1 s) before
// that. A failed extend (not InvalidArgument) may have committed a shorter
// lifetime, which then counts if earlier; ExpiresAt keeps the last
// confirmed expiry ("How guaranteed is computed" in docs/usage.md).
//
// With LockOptions.AutoExtend the lease extends itself by TTL a third of
// the current lifetime after the last extend's (or acquire's) send time,
// retries every tenth until the lifetime runs out, and logs an outage once
// as it starts and once as it ends. Extensions are serialized.
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
	loss      string // LossReason, once lost

	closing chan struct{} // non-nil once Close started; closed when it is done

	stopExtender context.CancelFunc // nil without AutoExtend
	extenderDone chan struct{}
	rescheduled  chan struct{} // capacity 1: a manual Extend moved extendAt; used holding extendSem

	trace *lockTrace // nil without a Tracer
}

// schedule returns, for a lock granted ttl by a request sent at sent, when
// ownership stops being guaranteed and when to extend next.
func schedule(sent time.Time, ttl time.Duration) (lostAt, extendAt time.Time) {
	granted := heldUntil(sent, ttl).Sub(sent)
	margin := min(granted/10, time.Second)
	return sent.Add(granted - margin), sent.Add(granted / 3)
}

// heldUntil is sent + ttl - 1 ms (PostgreSQL counts whole milliseconds).
func heldUntil(sent time.Time, ttl time.Duration) time.Time {
	return sent.Add(max(ttl.Truncate(time.Millisecond)-time.Millisecond, 0))
}

func newLease(ctx context.Context, b Locker, key string, res AcquireResult, sent time.Time, cfg lockConfig, lt *lockTrace) *Lease {
	l := &Lease{
		backend: b, key: key, lockID: res.LockID, fence: res.Fence, cfg: cfg,
		base: context.WithoutCancel(ctx), expiresAt: res.ExpiresAt,
		extendSem: make(chan struct{}, 1), trace: lt,
	}
	l.ctx, l.end = context.WithCancelCause(context.Background())
	lostAt, extendAt := schedule(sent, cfg.TTL)
	l.mu.Lock()
	l.lostAt, l.extendAt, l.heldUntil = lostAt, extendAt, heldUntil(sent, cfg.TTL)
	l.watchdog = time.AfterFunc(time.Until(lostAt), l.checkLifetime)
	l.mu.Unlock()
	if cfg.AutoExtend {
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

// Locker returns the Locker the lease was taken from (and extends and
// releases through), as passed to Lock or WithLock: a wrapper stays
// wrapped (As finds what it wraps). Package txguard reads it to know
// which kind of lock, and which tables, hold the lease.
func (l *Lease) Locker() Locker { return l.backend }

// Fence returns the fencing token of this holding. Pass it to the resource
// you protect and have it reject writes with a smaller fence.
func (l *Lease) Fence() Fence { return l.fence }

// ExpiresAt returns the server-computed expiry from the acquire or the
// latest successful extend (server clock; see Lease).
func (l *Lease) ExpiresAt() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.expiresAt
}

// HeldUntil returns the local instant (monotonic clock) up to which the
// lock is guaranteed held: the send time of the request that took or last
// extended it + ttl - 1 ms (a key handed over by a release counts from the
// release). Done closes a margin before it.
func (l *Lease) HeldUntil() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.heldUntil
}

// Done returns a channel that is closed when the lease ends (see Err).
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

// LossReason says why the lease lost its lock: "not-extended" (no extend
// confirmed in its guaranteed lifetime), "expired" or "gone" (what an
// extend found: released elsewhere, deleted or taken over); "" while it
// holds it, or when it ended otherwise (released).
func (l *Lease) LossReason() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.loss
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
// owns it; it never revives an expired lock. A result with OK false ends the
// lease with an ErrLockLost cause. A successful extend moves the guaranteed
// lifetime, and the next automatic extend, to what ttl grants; a failed one
// may shorten it (see Lease). On an ended lease it returns an error
// wrapping Err without I/O.
func (l *Lease) Extend(ctx context.Context, ttl time.Duration) (ExtendResult, error) {
	res, _, err := l.extend(ctx, ttl, true)
	return res, err
}

// endedError is the error of an extend on a lease that has ended.
func (l *Lease) endedError() error {
	return &Error{Op: "extend", Code: ErrInvalidArgument, Key: l.key, LockID: l.lockID,
		Msg: "the lease has ended", Err: l.Err()}
}

// extend does one extend and returns when to extend next; manual is false
// for the auto-extender, whose errors are kept in lastErr.
func (l *Lease) extend(ctx context.Context, ttl time.Duration, manual bool) (res ExtendResult, next time.Time, err error) {
	if l.cfg.OnExtend != nil {
		defer func() { // after mu and extendSem are released
			if err == nil && res.OK {
				l.cfg.OnExtend(res)
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
		select { // a manual extend signalled so far ran before this one
		case <-l.rescheduled:
		default:
		}
	}
	if l.ctx.Err() != nil { // ended while waiting for extendSem
		return ExtendResult{}, time.Time{}, l.endedError()
	}
	sent := time.Now()
	res, err = l.backend.Extend(ctx, l.lockID, ttl)

	defer l.traceHold() // after mu is released
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ctx.Err() != nil {
		return ExtendResult{}, time.Time{}, l.endedError()
	}
	if err != nil {
		if !manual {
			l.lastErr = err
		}
		if mayHaveCommitted(err) {
			// It may have committed a shorter lifetime: keep the earlier.
			if lostAt, _ := schedule(sent, ttl); lostAt.Before(l.lostAt) {
				l.lostAt, l.lastErr = lostAt, err
				l.watchdog.Reset(time.Until(lostAt))
			}
		}
		return res, time.Time{}, err
	}
	if !res.OK {
		how := "gone (released, deleted or taken over)"
		l.loss = lossGone
		if res.Reason == ReasonExpired {
			how, l.loss = "expired", lossExpired
		}
		l.end(fmt.Errorf("%w: extend found it %s", ErrLockLost, how))
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

// mayHaveCommitted: every error but InvalidArgument (before any I/O) may
// have committed, as far as a Locker tells; treating a rejection as unknown
// only ends a lease early.
func mayHaveCommitted(err error) bool {
	return CodeOf(err) != ErrInvalidArgument
}

// checkLifetime runs when the watchdog fires.
func (l *Lease) checkLifetime() {
	defer l.traceHold() // after mu is released
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.released || time.Now().Before(l.lostAt) {
		return
	}
	l.loss = lossNotExtended
	err := fmt.Errorf("%w: not extended before its guaranteed lifetime ran out", ErrLockLost)
	if l.lastErr != nil {
		err = fmt.Errorf("%w; last extend error: %w", err, l.lastErr)
	}
	l.end(err)
}

// autoExtend is the extension loop of an AutoExtend lease.
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
			l.cfg.Logger.Warn("syncguard: automatic lock extension gave up: the lock is lost", keyHash, since(outage), slog.String("error", err.Error()))
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
			l.mu.Lock()
			next = l.extendAt
			l.mu.Unlock()
			t.Reset(time.Until(next))
			continue
		}
		l.mu.Lock()
		lostAt := l.lostAt
		l.mu.Unlock()
		actx, cancel := context.WithDeadline(ctx, lostAt)
		res, n, err := l.extend(actx, l.cfg.TTL, false)
		cancel()
		switch {
		case ctx.Err() != nil, l.ctx.Err() != nil:
			return // stopped, or ended: the outcome no longer matters
		case err == nil && res.OK:
			if !outage.IsZero() {
				l.cfg.Logger.Info("syncguard: automatic lock extension works again; the lock is still held", keyHash, since(outage))
			}
			next, outage = n, time.Time{}
		case err == nil:
			return // lost; extend ended the lease
		default:
			if outage.IsZero() {
				outage = time.Now()
				l.cfg.Logger.Warn("syncguard: automatic lock extension failed; retrying until the lock's guaranteed lifetime runs out", keyHash,
					slog.String("code", string(CodeOf(err))), slog.Duration("lostIn", time.Until(lostAt).Round(time.Millisecond)), slog.String("error", err.Error()))
			}
			next = time.Now().Add(max(l.cfg.TTL/10, time.Millisecond)) // retry every tenth
		}
		t.Reset(time.Until(next))
	}
}

// Release releases the lock if the lease still owns it, after stopping
// auto-extension. The first call that completes without error decides the
// result; later calls return it without I/O; a call made while another is
// in flight waits for it (within ctx); a failed one may be tried again.
func (l *Lease) Release(ctx context.Context) (ReleaseResult, error) {
	if l.stopExtender != nil { // no extend may run concurrently with or after the release
		l.stopExtender()
		select {
		case <-l.extenderDone:
		case <-ctx.Done():
		}
	}
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
		l.traceHold()
		return res, err
	}
}

// Close is Release for defer: it runs at most once (concurrent calls wait
// for the first), detached from the acquire's cancellation and bounded by
// LockOptions.ReleaseTimeout, and hands an error to OnReleaseError, which
// may call Close (it returns at once) or Release (it tries again).
func (l *Lease) Close() { l.dispose(releaseSourceClose) }

// dispose releases once; concurrent and later calls wait for the first.
// A channel, not sync.Once: a waiting Close is durably blocked for
// testing/synctest. It is closed before onReleaseError runs, so a Close
// made from the callback returns instead of waiting for itself.
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
		ctx, cancel := context.WithTimeout(l.base, l.cfg.ReleaseTimeout)
		defer cancel()
		_, err := l.Release(ctx)
		return err
	}()
	if err != nil {
		l.cfg.OnReleaseError(err, ReleaseErrorInfo{Key: l.key, LockID: l.lockID, Source: source})
	}
}

const (
	releaseSourceWithLock = "withLock"
	releaseSourceClose    = "close"
)

// traceHold reports the end of the lease, once, if it has ended. It is
// called after each l.end, without l.mu.
func (l *Lease) traceHold() {
	if l.trace == nil || l.ctx.Err() == nil {
		return
	}
	l.trace.once.Do(l.holdEnded)
}

func (l *Lease) holdEnded() {
	lt := l.trace
	l.mu.Lock()
	loss, released, res := l.loss, l.released, l.result
	l.mu.Unlock()
	d := lt.d
	d.Held, d.Err, d.LossReason = time.Since(lt.held), context.Cause(l.ctx), loss
	if loss == "" && released && !res.OK { // it had lost the lock unnoticed
		d.LossReason = lossGone
		if res.Reason == ReasonExpired {
			d.LossReason = lossExpired
		}
	}
	lt.emit(traceHold, d)
	if !d.WithLock {
		lt.emit(traceEnd, lt.d)
	}
}

// traceCallEnd reports the end of a WithLock call that held its lock,
// after the lease's HoldEnd when the lease has ended.
func (l *Lease) traceCallEnd(err error) {
	if l.trace == nil {
		return
	}
	l.traceHold()
	d := l.trace.d
	d.Err = err
	l.trace.emit(traceEnd, d)
}
