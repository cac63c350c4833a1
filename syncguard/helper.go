package syncguard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/syncguard/syncguard-go/internal/rules"
)

// Defaults of the lock helper: the reference implementation's
// BACKEND_DEFAULTS (ttl) and LOCK_DEFAULTS (acquisition). Each is
// documented on its option field.
const (
	defaultTTL            = 30 * time.Second
	defaultMaxRetries     = 10
	defaultRetryDelay     = 100 * time.Millisecond
	defaultAcquireTimeout = 5 * time.Second
)

// Values of AcquisitionOptions.Backoff and .Jitter, the spec's words.
const (
	backoffExponential = "exponential"
	backoffFixed       = "fixed"
	jitterEqual        = "equal"
	jitterFull         = "full"
	jitterNone         = "none"
)

// AcquisitionOptions are the limits of waiting for a contended key in Lock
// and WithLock. The zero value means the defaults documented on each
// field, which are the reference implementation's.
//
// On a *Backend (or a TelemetryBackend around one) a waiting caller also
// attempts when the key is released, by any process, or its holder's lock
// expires, and waiters take the key in arrival order: see "Waiting" in
// docs/design.md. Those attempts are not retries: the retries below are
// the schedule, as in the reference implementation, and its end is the end
// of waiting.
type AcquisitionOptions struct {
	// MaxRetries is the number of scheduled retries after the first
	// attempt. A retry may be skipped while the holder is known to
	// announce its release, but the last one is always attempted before
	// the acquisition gives up. Default 10; any negative value makes a
	// single attempt, and no wait.
	MaxRetries int
	// RetryDelay is the base delay between attempts. Default 100 ms.
	RetryDelay time.Duration
	// Backoff says how the delay grows: "exponential" (the default) waits
	// RetryDelay * 2^(n-1) before retry n, "fixed" waits RetryDelay every
	// time. Any other value fails Lock with ErrInvalidArgument.
	Backoff string
	// Jitter randomizes each delay d: "equal" (the default) waits
	// d/2 + rand*d/2, "full" waits rand*d, "none" waits exactly d. Any
	// other value fails Lock with ErrInvalidArgument.
	Jitter string
	// Timeout bounds the whole acquisition, attempts and waits together.
	// A wait never extends past it. Default 5 s.
	Timeout time.Duration
}

// LockOptions configures Lock and WithLock. A nil *LockOptions, or the zero
// value, means the defaults documented on each field.
type LockOptions struct {
	// TTL is the lock's time to live, and with AutoExtend the lifetime
	// each extension adds. Default 30 s. PostgreSQL counts it in whole
	// milliseconds.
	TTL time.Duration

	// Acquisition configures the retries on contention.
	Acquisition AcquisitionOptions

	// AutoExtend keeps the lock alive while it is held: the lease extends
	// itself by TTL once a third of the current lifetime has passed, and
	// retries failed extensions until ownership can no longer be
	// guaranteed. Lease.Done is then closed with an ErrLockLost cause, and
	// WithLock cancels fn's context with that cause. Auto-extension stops
	// when the lease is released or lost, or when the ctx passed to Lock or
	// WithLock is done. See Lease for the timing rules.
	AutoExtend bool

	// ReleaseTimeout bounds the release done by WithLock after fn returns
	// and by Lease.Close. That release runs with a context detached from
	// the caller's cancellation (context.WithoutCancel), so a cancelled
	// caller still frees the lock at once instead of leaving it held until
	// its TTL. Default: the backend's Config.ReleaseTimeout (5 s unless
	// set), or 5 s for a Locker that is not a *Backend.
	ReleaseTimeout time.Duration

	// OnReleaseError receives the error of a release done by WithLock or
	// Lease.Close, which cannot return it without hiding fn's own result.
	// A release that finds the lock already gone (ReleaseResult.OK false)
	// is not an error. Default: an Error record on Logger that names the
	// source, the error code and the key's hash, never the key or lockId.
	OnReleaseError func(err error, info ReleaseErrorInfo)

	// Logger receives the default OnReleaseError records and warnings about
	// failed auto-extensions. Default slog.Default().
	Logger *slog.Logger
}

func (o *LockOptions) resolve() (lockConfig, error) {
	var opts LockOptions
	if o != nil {
		opts = *o
	}
	a := opts.Acquisition
	c := lockConfig{
		ttl: opts.TTL, maxRetries: a.MaxRetries, retryDelay: a.RetryDelay,
		backoff: a.Backoff, jitter: a.Jitter, timeout: a.Timeout,
		autoExtend: opts.AutoExtend, releaseTimeout: opts.ReleaseTimeout,
		onReleaseError: opts.OnReleaseError, logger: opts.Logger,
	}
	for _, d := range []struct {
		name string
		v    *time.Duration
		def  time.Duration
	}{
		{"TTL", &c.ttl, defaultTTL},
		{"Acquisition.RetryDelay", &c.retryDelay, defaultRetryDelay},
		{"Acquisition.Timeout", &c.timeout, defaultAcquireTimeout},
		{"ReleaseTimeout", &c.releaseTimeout, 0}, // 0: the backend's, see Lock
	} {
		if *d.v < 0 {
			return c, invalidArg("lock", fmt.Sprintf("%s must not be negative, got %v", d.name, *d.v))
		}
		if *d.v == 0 {
			*d.v = d.def
		}
	}
	switch {
	case c.maxRetries == 0:
		c.maxRetries = defaultMaxRetries
	case c.maxRetries < 0:
		c.maxRetries = 0
	}
	switch c.backoff {
	case "":
		c.backoff = backoffExponential
	case backoffExponential, backoffFixed:
	default:
		return c, invalidArg("lock", fmt.Sprintf("unknown Acquisition.Backoff %q (want %q or %q)", c.backoff, backoffExponential, backoffFixed))
	}
	switch c.jitter {
	case "":
		c.jitter = jitterEqual
	case jitterEqual, jitterFull, jitterNone:
	default:
		return c, invalidArg("lock", fmt.Sprintf("unknown Acquisition.Jitter %q (want %q, %q or %q)", c.jitter, jitterEqual, jitterFull, jitterNone))
	}
	if c.logger == nil {
		c.logger = slog.Default()
	}
	if c.onReleaseError == nil {
		c.onReleaseError = logReleaseError(c.logger)
	}
	return c, nil
}

// logReleaseError is the default OnReleaseError: visible, and sanitized.
func logReleaseError(logger *slog.Logger) func(error, ReleaseErrorInfo) {
	return func(err error, info ReleaseErrorInfo) {
		logger.Error("syncguard: releasing a lock failed; it stays held until its TTL expires",
			slog.String("source", info.Source), slog.String("keyHash", rules.HashKey(info.Key)),
			slog.String("code", string(CodeOf(err))), slog.String("error", err.Error()))
	}
}

// WithLock runs fn while holding the lock on key and releases the lock
// afterwards. It is the helper most programs should use; the backend's
// methods are single attempts (docs/spec.md, rules O1 and H1).
//
// Acquisition waits on contention within the limits of opts.Acquisition
// (MaxRetries scheduled retries, Timeout), woken when the key is released
// (see AcquisitionOptions), and fails with ErrAcquisitionTimeout when time
// or retries run out; the error says how many attempts were made.
// A backend error is returned at once, not retried. Cancelling ctx while
// waiting returns ErrAborted at once. Nothing is acquired in any of these
// cases and fn does not run.
//
// fn receives the Lease, for its Fence (pass it to the resource you
// protect) and expiry. The lock is released when fn returns, fails or
// panics (the panic continues after the release), with a context detached
// from ctx's cancellation and bounded by opts.ReleaseTimeout. WithLock
// returns fn's error unchanged; a release error goes to
// opts.OnReleaseError instead.
//
// Without opts.AutoExtend, fn gets ctx itself and the lock simply expires
// if fn outlives the TTL. With it, fn gets a context that is also cancelled
// when the lease can no longer guarantee ownership, before the lock's
// server-side expiry; context.Cause then satisfies errors.Is(cause,
// ErrLockLost). The lock-lost signal helps fn stop early; it cannot stop a
// write already on its way, so fencing tokens remain the protection against
// a paused process.
//
// Pass a pool backend (a *Backend on a *sql.DB, possibly wrapped), not a
// Backend.WithTx view, unless the lock is released before the transaction
// ends: a release or extend on the view after commit or rollback fails
// (sql.ErrTxDone, InvalidArgument) and the lock stays until its TTL.
func WithLock(ctx context.Context, backend Locker, key string, fn func(ctx context.Context, lease *Lease) error, opts *LockOptions) error {
	if fn == nil {
		return invalidArg("lock", "fn must not be nil")
	}
	lease, err := Lock(ctx, backend, key, opts)
	if err != nil {
		return err
	}
	defer lease.dispose(releaseSourceWithLock)
	fnCtx := ctx
	if lease.cfg.autoExtend {
		var cancel context.CancelFunc
		fnCtx, cancel = lease.Context(ctx)
		defer cancel()
	}
	return fn(fnCtx, lease)
}

// Lock acquires the lock on key, retrying on contention exactly as
// WithLock does, and returns a Lease for it. The caller must end the lease,
// usually with defer lease.Close(). On error no lease is returned and
// nothing is left to release.
//
// The lease keeps using backend for Extend, auto-extension and Release, so
// pass a pool backend, not a Backend.WithTx view, unless the lease ends
// (Release or Close) before the transaction does: after commit or rollback
// every operation on the view fails with sql.ErrTxDone (InvalidArgument),
// the lease cannot release its lock, and the lock stays until its TTL.
func Lock(ctx context.Context, backend Locker, key string, opts *LockOptions) (*Lease, error) {
	if backend == nil {
		return nil, invalidArg("lock", "backend must not be nil")
	}
	cfg, err := opts.resolve()
	if err != nil {
		return nil, err
	}
	if cfg.releaseTimeout == 0 {
		cfg.releaseTimeout = releaseTimeoutOf(backend)
	}
	res, sent, err := acquire(ctx, backend, key, &cfg)
	if err != nil {
		return nil, err
	}
	return newLease(ctx, backend, key, res, sent, cfg), nil
}

// waitable is a backend whose hub is known before the first attempt:
// *Backend, and the wrappers of this package around it. Lock and WithLock
// then queue a new caller behind this process's waiters at once.
type waitable interface {
	waitHub() *hub // nil: none (a wrapper around another backend)
}

// attemptInfo travels in the context of each attempt Lock and WithLock
// make, through any Locker that passes its ctx on, down to the *Backend
// that runs it. The Backend sends note (see wake.go) when it takes the
// key, and leaves its hub and the hub's event count from before the
// attempt, so that waiting on a wrapper of a user's own (tracing, metrics)
// is woken on release as on the Backend itself.
type attemptInfo struct {
	kh   string // wakeKeyHash of the key Lock waits for
	note string
	hub  atomic.Pointer[hub]
	seq  atomic.Uint64 // hub.seqNow() when the Backend was called
	// retryIn is AcquireResult.retryIn of a failed attempt, for a wrapper
	// that returns a result of its own making (the field is unexported).
	retryIn atomic.Int64
}

type attemptKey struct{}

// attemptOf returns the attemptInfo in ctx, or nil.
func attemptOf(ctx context.Context) *attemptInfo {
	a, _ := ctx.Value(attemptKey{}).(*attemptInfo)
	return a
}

// acquire is the retry loop. It returns the successful result and the
// local time its request was sent (see Lease for why that time matters).
//
// Attempts happen (see "Waiting" in docs/design.md):
//   - at once, unless this process already has waiters for the key (then
//     the caller queues behind them);
//   - when the caller is the first of this process's waiters for the key
//     and the hub gives it a turn: the key was released (by this process,
//     or as notified), its holder's lock expired, or an extend shortened it;
//   - when the caller's retry delay (AcquisitionOptions) runs out: the
//     first waiter then attempts, on behalf of the caller unless the caller
//     is the first, or this is its last retry;
//   - for a backend without a hub: when the retry delay runs out, or when
//     the holder's lock, as the last attempt saw it, expires.
//
// Only the attempts made when a retry delay ran out count as retries, so
// MaxRetries and Timeout bound the wait exactly as they bound polling.
func acquire(ctx context.Context, b Locker, key string, c *lockConfig) (res AcquireResult, sent time.Time, err error) {
	start := time.Now()
	deadline := start.Add(c.timeout)
	var h *hub
	var kh, note string
	var since uint64 // h.seqNow() from before the last attempt
	if k, kerr := checkKey("lock", key); kerr == nil {
		kh = wakeKeyHash(k.Storage)
	} // else the attempt reports the error, and there is no waiting
	useHub := func(hb *hub) {
		if kh != "" {
			h = hb
		}
	}
	if wb, ok := b.(waitable); ok {
		useHub(wb.waitHub())
	}
	attempts := 0
	try := func() (AcquireResult, time.Time, error) {
		attempts++
		sent := time.Now()
		// The attempt too ends at the deadline: on a half-open connection
		// it would otherwise wait as long as ctx allows (forever without a
		// deadline), and ctx must outlive Lock for AutoExtend.
		actx, cancel := context.WithDeadline(ctx, deadline)
		a := &attemptInfo{kh: kh, note: note}
		res, err := b.Acquire(context.WithValue(actx, attemptKey{}, a), key, c.ttl)
		cancel()
		if h == nil {
			// A wrapper of the caller's own: the Backend beneath it, if any,
			// said which hub it has.
			if hb := a.hub.Load(); hb != nil {
				useHub(hb)
				since = a.seq.Load()
			}
		}
		if err == nil && !res.OK && res.retryIn == 0 {
			res.retryIn = time.Duration(a.retryIn.Load())
		}
		if err != nil {
			if ctx.Err() == nil && !time.Now().Before(deadline) {
				return AcquireResult{}, time.Time{}, &Error{Op: "lock", Code: CodeAcquisitionTimeout, Key: key, Err: err,
					Msg: fmt.Sprintf("attempt %d got no answer before the acquisition timeout (%v)", attempts, time.Since(start).Round(time.Millisecond))}
			}
			return AcquireResult{}, time.Time{}, err
		}
		return res, sent, nil
	}
	timeout := func(cause error) (AcquireResult, time.Time, error) {
		return AcquireResult{}, time.Time{}, acquisitionTimeout(key, attempts, time.Since(start), cause)
	}

	if h != nil {
		since = h.seqNow()
	}
	if h == nil || c.maxRetries == 0 || !h.busy(kh) {
		res, sent, err = try()
		if err != nil || res.OK {
			return res, sent, err
		}
		if c.maxRetries == 0 || !time.Now().Before(deadline) {
			return timeout(nil)
		}
	}

	// Wait.
	var w *waiter
	var turn, nudge <-chan struct{}
	if h != nil {
		w = h.join(kh, since, res.retryIn)
		turn, nudge = w.turn, w.nudge
		defer func() { h.leave(w, err == nil && res.OK) }()
	}
	expiry := stoppedTimer()
	defer expiry.Stop()
	if h == nil && res.retryIn > 0 {
		expiry.Reset(res.retryIn)
	}
	poll := time.NewTimer(c.delay(1))
	defer poll.Stop()
	end := time.NewTimer(time.Until(deadline))
	defer end.Stop()
	retries, skipped := 0, 0
	for {
		if w != nil {
			pctx, cancel := context.WithDeadline(ctx, deadline) // the announcement too ends at the Timeout
			note = h.prepare(pctx, w, time.Until(deadline))
			cancel()
		}
		polled, final := false, false
		select {
		case <-nudge:
			continue
		case <-turn:
		case <-expiry.C:
		case <-poll.C:
			retries++
			polled, final = true, retries >= c.maxRetries
			if !final && w != nil && skipped < maxSkippedRetries && h.holderAnnounced(w) {
				// The holder's release or expiry will wake us.
				skipped++
				poll.Reset(c.delay(retries + 1))
				continue
			}
			if !final && w != nil && !h.isHead(w) {
				// Without notifications, the first waiter attempts on our
				// behalf, in arrival order (as often as our own retries
				// would). With them, its own retries are enough.
				h.pollFor(w)
				poll.Reset(c.delay(retries + 1))
				continue
			}
		case <-end.C:
			return timeout(nil)
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return timeout(context.Cause(ctx))
			}
			return AcquireResult{}, time.Time{}, &Error{Op: "lock", Code: CodeAborted, Key: key,
				Msg: fmt.Sprintf("context cancelled while waiting for the lock after %s", plural(attempts, "attempt")), Err: context.Cause(ctx)}
		}
		if !time.Now().Before(deadline) {
			return timeout(nil)
		}
		var seq uint64
		if w != nil {
			seq = h.attemptSeq(w)
		}
		skipped = 0
		res, sent, err = try()
		if err != nil {
			return AcquireResult{}, time.Time{}, err
		}
		if res.OK {
			if w != nil {
				h.acquired(w, c.ttl+rules.ToleranceMs*time.Millisecond)
			}
			return res, sent, nil
		}
		if final {
			return timeout(nil)
		}
		if w != nil {
			h.failed(w, seq, res.retryIn)
		} else if res.retryIn > 0 {
			expiry.Reset(res.retryIn)
		}
		if polled {
			poll.Reset(c.delay(retries + 1))
		}
	}
}

// maxSkippedRetries bounds the retries skipped in a row because the holder
// announced itself: a safety net should the announcement mislead (a
// notification lost with a LISTEN connection that broke silently).
const maxSkippedRetries = 3

func stoppedTimer() *time.Timer {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}

func acquisitionTimeout(key string, attempts int, elapsed time.Duration, cause error) *Error {
	return &Error{Op: "lock", Code: CodeAcquisitionTimeout, Key: key, Err: cause,
		Msg: fmt.Sprintf("lock still held by another owner after %s in %v", plural(attempts, "attempt"), elapsed.Round(time.Millisecond))}
}

const maxDelay = time.Duration(1 << 62)

// delay returns the wait before retry n (1-based), before clamping to the
// remaining time.
func (c *lockConfig) delay(n int) time.Duration {
	d := c.retryDelay
	if c.backoff == backoffExponential {
		for i := 1; i < n && d < maxDelay; i++ {
			d *= 2
		}
	}
	d = min(d, maxDelay) // no overflow below, whatever the options
	switch c.jitter {
	case jitterEqual:
		d = d/2 + rand.N(d-d/2+1)
	case jitterFull:
		d = rand.N(d + 1)
	}
	return d
}

// releaseTimeoutOf is the default LockOptions.ReleaseTimeout for leases on
// backend: its Config.ReleaseTimeout when it is a *Backend (or wraps one,
// like a TelemetryBackend), else the default of Config.ReleaseTimeout.
func releaseTimeoutOf(backend Locker) time.Duration {
	if b, ok := backend.(interface{ releaseTimeout() time.Duration }); ok {
		return b.releaseTimeout()
	}
	return defaultReleaseTimeout
}
