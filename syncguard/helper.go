package syncguard

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/syncguard/syncguard-go/internal/rules"
)

// Defaults of the lock helper: the reference implementation's.
const (
	defaultTTL            = 30 * time.Second
	defaultRetryDelay     = 100 * time.Millisecond
	defaultAcquireTimeout = 5 * time.Second
)

// AcquisitionOptions are the limits of waiting for a contended key in Lock
// and WithLock. The zero value means the defaults documented on each
// field, which are the reference implementation's. On a Queuer (a *Backend)
// a waiter also attempts when the key is released or its holder's lock
// expires, and waiters take the key in arrival order ("Waiting" in
// docs/design.md); those attempts are not retries.
type AcquisitionOptions struct {
	// MaxRetries is the number of scheduled retries after the first
	// attempt; when they have run out the acquisition gives up. Default: no
	// limit, so Timeout (or ctx) is the wait limit (the reference
	// implementation's default is 10). Negative: a single attempt, no wait.
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
	// A wait never extends past it. Default 5 s. Negative: no bound but
	// ctx (a campaign, a job that waits its turn however long).
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
	// AutoExtend keeps the lock alive while it is held (see Lease), until
	// the lease is released or lost or the ctx of Lock or WithLock is done;
	// a loss closes Lease.Done with an ErrLockLost cause, and WithLock
	// cancels fn's context with it.
	AutoExtend bool
	// ReleaseTimeout bounds the release done by WithLock after fn returns
	// and by Lease.Close, which runs detached from the caller's
	// cancellation, so a cancelled caller still frees the lock at once.
	// Default: the backend's Config.ReleaseTimeout (5 s unless set), or 5 s
	// for a Locker that is not a *Backend.
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
	// OnAttempt, if set, is called after each acquire attempt of Lock and
	// WithLock, on the caller's goroutine, with its result (tracing, a
	// progress line). Default: none.
	OnAttempt func(res AcquireResult, err error)
	// OnExtend, if set, is called after each extension of the lease that
	// the server confirmed (AutoExtend's and Lease.Extend's), with its
	// result, on the goroutine that extended. Default: none.
	OnExtend func(res ExtendResult)
	// Logger receives the default OnReleaseError records and warnings about
	// failed auto-extensions. Default: the backend's LeaseLogger() when it
	// has one (syncguardtest's discards), else slog.Default().
	Logger *slog.Logger
}

func (o *LockOptions) resolve() (lockConfig, error) {
	var c lockConfig
	if o != nil {
		c.LockOptions = *o
	}
	c.maxRetries = c.Acquisition.MaxRetries
	if err := checkIdentity("lock", "Identity", c.Identity); err != nil {
		return c, err
	}
	for _, d := range []struct {
		name string
		v    *time.Duration
		def  time.Duration
	}{
		{"TTL", &c.TTL, defaultTTL},
		{"Acquisition.RetryDelay", &c.Acquisition.RetryDelay, defaultRetryDelay},
		{"ReleaseTimeout", &c.ReleaseTimeout, 0}, // 0: the backend's, see Lock
	} {
		if *d.v < 0 {
			return c, invalidArg("lock", fmt.Sprintf("%s must not be negative, got %v", d.name, *d.v))
		}
		if *d.v == 0 {
			*d.v = d.def
		}
	}
	if c.Acquisition.Timeout == 0 {
		c.Acquisition.Timeout = defaultAcquireTimeout
	}
	switch {
	case c.maxRetries == 0:
		c.maxRetries = math.MaxInt // Timeout (and ctx) is the limit
	case c.maxRetries < 0:
		c.maxRetries = 0
	}
	switch c.Acquisition.Backoff {
	case "":
		c.Acquisition.Backoff = backoffExponential
	case backoffExponential, backoffFixed:
	default:
		return c, invalidArg("lock", fmt.Sprintf("unknown Acquisition.Backoff %q (want %q or %q)", c.Acquisition.Backoff, backoffExponential, backoffFixed))
	}
	switch c.Acquisition.Jitter {
	case "":
		c.Acquisition.Jitter = jitterEqual
	case jitterEqual, jitterFull, jitterNone:
	default:
		return c, invalidArg("lock", fmt.Sprintf("unknown Acquisition.Jitter %q (want %q, %q or %q)", c.Acquisition.Jitter, jitterEqual, jitterFull, jitterNone))
	}
	return c, nil // Logger and OnReleaseError: see Lock
}

// logReleaseError is the default OnReleaseError.
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
// Acquisition waits on contention within opts.Acquisition and fails with
// ErrAcquisitionTimeout when time or retries run out (the outage's code
// when no attempt got an answer), saying how many attempts were made. A
// backend error is returned at once, and cancelling ctx while waiting
// returns ErrAborted at once. In these cases nothing is acquired and fn
// does not run.
//
// fn receives the Lease, for its Fence (pass it to the resource you
// protect). The lock is released when fn returns, fails or panics (the
// panic continues), detached from ctx's cancellation and bounded by
// opts.ReleaseTimeout. WithLock returns fn's error unchanged; a release
// error goes to opts.OnReleaseError.
//
// Without opts.AutoExtend, fn gets ctx and the lock simply expires if fn
// outlives the TTL. With it, fn's context is also cancelled, with a cause
// matching ErrLockLost, when the lease can no longer guarantee ownership.
// That signal cannot stop a write already on its way: fencing tokens
// remain the protection against a paused process.
//
// Pass a pool backend, not a Backend.WithTx view, unless the lock is
// released before the transaction ends (see Lock).
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
	if lease.cfg.AutoExtend {
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
// The lease keeps using backend, so pass a pool backend, not a
// Backend.WithTx view, unless the lease ends before the transaction does:
// after commit or rollback every operation on the view fails with
// sql.ErrTxDone (InvalidArgument) and the lock stays until its TTL.
func Lock(ctx context.Context, backend Locker, key string, opts *LockOptions) (*Lease, error) {
	if backend == nil {
		return nil, invalidArg("lock", "backend must not be nil")
	}
	cfg, err := opts.resolve()
	if err != nil {
		return nil, err
	}
	if cfg.ReleaseTimeout == 0 {
		cfg.ReleaseTimeout = defaultReleaseTimeout
		if b, ok := As[interface{ releaseTimeout() time.Duration }](backend); ok {
			cfg.ReleaseTimeout = b.releaseTimeout() // Config.ReleaseTimeout, through wrappers
		}
	}
	if cfg.Logger == nil {
		cfg.Logger = leaseLoggerOf(backend)
	}
	if cfg.OnReleaseError == nil {
		cfg.OnReleaseError = logReleaseError(cfg.Logger)
	}
	sink, _ := As[helperSink](backend)
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

// leaseLoggerOf is the default LockOptions.Logger for leases on backend:
// its LeaseLogger (through wrappers; syncguardtest's discards, so that its
// injected failures do not log to slog.Default), else slog.Default().
func leaseLoggerOf(backend Locker) *slog.Logger {
	if b, ok := As[interface{ LeaseLogger() *slog.Logger }](backend); ok {
		if l := b.LeaseLogger(); l != nil {
			return l
		}
	}
	return slog.Default()
}
