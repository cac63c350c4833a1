package syncguard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"time"

	"github.com/syncguard/syncguard-go/internal/rules"
)

// Defaults of the lock helper: the reference implementation's
// BACKEND_DEFAULTS (ttl) and LOCK_DEFAULTS (acquisition). Each is
// documented on its option field.
const (
	defaultTTL            = 30 * time.Second
	defaultRetryDelay     = 100 * time.Millisecond
	defaultAcquireTimeout = 5 * time.Second
	// Values of AcquisitionOptions.Backoff and .Jitter, the spec's words.
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
	// attempt; when they have run out the acquisition gives up. Default:
	// no limit, so Timeout (or ctx) is the wait limit, as the wait of
	// etcd's Mutex.Lock(ctx) is. Set it to keep the reference
	// implementation's numbers (its default is 10); any negative value
	// makes a single attempt, and no wait.
	MaxRetries int
	// RetryDelay is the base delay between attempts. Default 100 ms.
	RetryDelay time.Duration
	// Backoff says how the delay grows: "exponential" (the default) waits
	// RetryDelay * 2^(n-1) before retry n (without MaxRetries, at most 1 s
	// or RetryDelay), "fixed" waits RetryDelay every time. Any other value fails Lock with ErrInvalidArgument.
	Backoff string
	// Jitter randomizes each delay d: "equal" (the default) waits
	// d/2 + rand*d/2, "full" waits rand*d, "none" waits exactly d. Any
	// other value fails Lock with ErrInvalidArgument.
	Jitter string
	// Timeout bounds the whole acquisition, attempts and waits together.
	// A wait never extends past it. Default 5 s.
	Timeout time.Duration
	// FailFast returns an outage's error (ServiceUnavailable,
	// NetworkTimeout) at once. By default waiting rides it out within
	// Timeout; the wait ends busy (AcquisitionTimeout) once any attempt got
	// an answer, else with the last real outage error (code and cause).
	FailFast bool
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

	// Identity is stored as this lock's holder, in place of the Backend's
	// Config.Identity (see there). Default: Config.Identity.
	Identity string

	// Logger receives the default OnReleaseError records and warnings about
	// failed auto-extensions. Default: the backend's LeaseLogger() when it
	// has one (syncguardtest's discards), else slog.Default().
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
		backoff: a.Backoff, jitter: a.Jitter, timeout: a.Timeout, failFast: a.FailFast,
		autoExtend: opts.AutoExtend, releaseTimeout: opts.ReleaseTimeout,
		onReleaseError: opts.OnReleaseError, logger: opts.Logger, identity: opts.Identity,
	}
	if err := checkIdentity("lock", "Identity", c.identity); err != nil {
		return c, err
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
		c.maxRetries = math.MaxInt // Timeout (and ctx) is the limit
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
// or retries run out (the outage's code when no attempt got an answer);
// the error says how many attempts were made.
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
		fnCtx, cancel = lease.Bind(ctx)
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
	if opts == nil || opts.Logger == nil {
		cfg.logger = leaseLoggerOf(backend)
		if opts == nil || opts.OnReleaseError == nil {
			cfg.onReleaseError = logReleaseError(cfg.logger)
		}
	}
	sink, _ := backend.(helperSink)
	start := time.Now()
	res, sent, attempts, err := acquire(ctx, backend, key, &cfg)
	if sink != nil {
		sink.helperEvent(waitEvent(key, res, err, attempts, start))
	}
	if err != nil {
		return nil, err
	}
	return newLease(ctx, backend, key, res, sent, cfg, sink), nil
}

// acquire is the waiting loop of Lock and WithLock. It returns the
// successful result and the local time its request was sent, moved back by
// the lock's age when a release handed it over before this attempt (see
// Lease for why that time matters).
//
// Every attempt goes through b with a waitRecord in its context (wait.go):
// on a *Backend beneath, the waiter keeps one place in the queue of the
// key, and a release hands it the key in the release's own commit. After a
// failed attempt the waiter attempts again when:
//   - a release handed it the key (its wake-up: the Backend's own release,
//     or the notification naming it), or the key's channel starts being
//     listened on, or the LISTEN connection fails (a hint may be lost);
//   - the holder's lock, as the last attempt saw it, is no longer live (a
//     crashed holder: the first live waiter takes the key);
//   - a third of the queue window has passed (the attempt renews the
//     waiter's place; a release skips a waiter that stopped renewing);
//   - a scheduled retry is due (AcquisitionOptions);
//   - no notification reaches it: no release hands it the key, so it
//     polls for the free key, 5 ms after its last attempt, doubling to
//     25 ms (only the first waiter can take it).
//
// Only scheduled retries count against MaxRetries. Wake-ups that find
// nothing (forged or replayed notifications) are spaced out, from 5 ms
// doubling to 1 s. An error that an outage causes (ServiceUnavailable,
// NetworkTimeout) is retried on the schedule within Timeout unless
// FailFast; giveUp says how a wait ends. A waiter that gives up leaves
// the queue with one statement (a release of its lockId, which passes on a
// key handed to it meanwhile).
func acquire(ctx context.Context, b Locker, key string, c *lockConfig) (res AcquireResult, sent time.Time, attempts int, err error) {
	start := time.Now()
	deadline := start.Add(c.timeout)
	var rec *waitRecord
	if c.maxRetries > 0 || c.identity != "" {
		rec = waitRecordFor(key, c.identity, c.maxRetries == 0)
	}
	var lastErr, realErr error                   // the last attempt's error since an answer; the last not cut by the deadline
	answered, fastest := false, time.Duration(0) // fastest: the quickest answer so far
	try := func() (AcquireResult, time.Time, bool, error) {
		attempts++
		sent := time.Now()
		// The attempt too ends at the deadline: on a half-open connection
		// it would otherwise wait as long as ctx allows (forever without a
		// deadline), and ctx must outlive Lock for AutoExtend.
		actx, cancel := context.WithDeadline(ctx, deadline)
		if rec != nil {
			actx = context.WithValue(actx, waitKey{}, rec)
		}
		res, err := b.Acquire(actx, key, c.ttl)
		cancel()
		if err == nil {
			if d := time.Since(sent); !answered || d < fastest {
				fastest = d
			}
			answered, lastErr = true, nil
			return res, sent.Add(-rec.grantAge()), false, nil // (sent matters only when res.OK)
		}
		// Cut by the wait's end: no answer yet, which says nothing of the server.
		cut := ctx.Err() == nil && !time.Now().Before(deadline) || errors.Is(ctx.Err(), context.DeadlineExceeded)
		if cut {
			err = &Error{Op: "lock", Code: CodeNetworkTimeout, Key: key, Err: err,
				Msg: fmt.Sprintf("attempt %d got no answer before the end of the wait (%v)", attempts, time.Since(start).Round(time.Millisecond))}
		} else {
			realErr = err
		}
		lastErr = err
		return AcquireResult{}, time.Time{}, cut, err
	}
	// giveUp ends the wait (cause: ctx's, if done): busy once any attempt
	// got an answer, else the outage, with its last real cause.
	giveUp := func(cause error) (AcquireResult, time.Time, int, error) {
		elapsed := time.Since(start).Round(time.Millisecond)
		e := &Error{Op: "lock", Code: CodeAcquisitionTimeout, Key: key, Err: cause,
			Msg: fmt.Sprintf("lock still held by another owner after %s in %v", plural(attempts, "attempt"), elapsed)}
		switch {
		case !answered && realErr == nil:
			return AcquireResult{}, time.Time{}, attempts, lastErr // the only attempt, cut
		case !answered:
			e.Code, e.Err, e.Msg = CodeOf(realErr), realErr, fmt.Sprintf("no answer from the server to %s in %v", plural(attempts, "attempt"), elapsed)
		case lastErr != nil:
			e.Msg += fmt.Sprintf(" (the last attempt got no answer: %s)", CodeOf(lastErr))
		}
		return AcquireResult{}, time.Time{}, attempts, e
	}
	outage := func(err error) bool { // ridden out rather than returned
		return !c.failFast && (CodeOf(err) == CodeServiceUnavailable || CodeOf(err) == CodeNetworkTimeout)
	}
	if rec != nil {
		defer func() { rec.end(err == nil && res.OK, realErr != nil) }() // a cut attempt is no outage: withdraw now
	}

	res, sent, cut, err := try()
	switch {
	case err == nil && res.OK:
		return res, sent, attempts, nil
	case err != nil && (c.maxRetries == 0 || !cut && !outage(err)):
		return AcquireResult{}, time.Time{}, attempts, err
	case cut || c.maxRetries == 0 || !time.Now().Before(deadline):
		return giveUp(context.Cause(ctx))
	}

	// Wait.
	var wake <-chan struct{}
	expiry, renew, hintOK, look := stoppedTimer(), stoppedTimer(), stoppedTimer(), stoppedTimer()
	defer func() { expiry.Stop(); renew.Stop(); hintOK.Stop(); look.Stop() }()
	hintGap, paused, pollGap := time.Duration(0), false, time.Duration(0)
	learn := func() {
		if rec == nil {
			return
		}
		w, every, retryIn, poll := rec.state()
		if !paused {
			wake = w
		}
		if retryIn > 0 {
			expiry.Reset(retryIn)
		}
		if every > 0 {
			renew.Reset(every)
		}
		// Without notifications no release hands it the key: it looks for
		// the free key itself, soon after each attempt (5 ms, doubling to
		// 25 ms); the queue keeps the order.
		if poll {
			pollGap = min(max(2*pollGap, pollMin), pollMax)
			look.Reset(pollGap)
		} else {
			pollGap = 0
			look.Stop()
		}
	}
	learn()
	retry := time.NewTimer(c.delay(1))
	defer retry.Stop()
	end := time.NewTimer(time.Until(deadline))
	defer end.Stop()
	retries := 0
	for {
		hinted, final := false, false
		select {
		case <-wake:
			hinted = true
		case <-hintOK.C:
			paused = false
			wake = rec.wakeC()
			continue
		case <-expiry.C:
		case <-renew.C:
		case <-look.C:
		case <-retry.C:
			retries++
			final = retries >= c.maxRetries
			retry.Reset(c.delay(retries + 1))
		case <-end.C:
			return giveUp(nil)
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return giveUp(context.Cause(ctx))
			}
			return AcquireResult{}, time.Time{}, attempts, &Error{Op: "lock", Code: CodeAborted, Key: key,
				Msg: fmt.Sprintf("context cancelled while waiting for the lock after %s", plural(attempts, "attempt")), Err: context.Cause(ctx)}
		}
		if !time.Now().Add(fastest).Before(deadline) { // (fastest: 0 before any answer)
			return giveUp(nil) // no answer would come in time: no attempt is cut (pgx closes a cut statement's connection)
		}
		res, sent, cut, err = try()
		switch {
		case err == nil && res.OK:
			return res, sent, attempts, nil
		case cut:
			return giveUp(context.Cause(ctx))
		case err != nil && !outage(err):
			return AcquireResult{}, time.Time{}, attempts, err
		case final:
			return giveUp(nil)
		}
		learn()
		if hinted && err == nil {
			// A wake-up that found the key still held: the next one is
			// heeded only after a pause (forged or replayed hints).
			hintGap = min(max(2*hintGap, 5*time.Millisecond), time.Second)
			wake, paused = nil, true
			hintOK.Reset(hintGap)
		}
	}
}

func stoppedTimer() *time.Timer {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}

const (
	maxDelay = time.Duration(1 << 62)
	// unboundedMaxDelay caps the retry delay when MaxRetries is not set.
	unboundedMaxDelay = time.Second
	// The polling of a waiter that no notification reaches (acquire).
	pollMin = 5 * time.Millisecond
	pollMax = 25 * time.Millisecond
)

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
	if c.maxRetries == math.MaxInt {
		// Without MaxRetries the schedule is a safety net, not a budget:
		// it stops growing at unboundedMaxDelay.
		d = min(d, max(c.retryDelay, unboundedMaxDelay))
	}
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
