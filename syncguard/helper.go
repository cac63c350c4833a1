package syncguard

import (
	"context"
	"log/slog"
	"time"

	"github.com/syncguard/syncguard-go/internal/rules"
)

// logReleaseError is the default OnReleaseError.
func logReleaseError(logger *slog.Logger) func(error, ReleaseErrorInfo) {
	return func(err error, info ReleaseErrorInfo) {
		logger.Error("syncguard: releasing a lock failed; it stays held until its TTL expires",
			slog.String("source", info.Source), slog.String("keyHash", rules.HashKey(info.Key)),
			slog.String("code", string(CodeOf(err))), slog.String("error", err.Error()))
	}
}

// WithLock runs fn while holding the lock on key and releases the lock
// afterwards: the helper most programs should use (docs/spec.md, rules O1
// and H1). It acquires as Lock does; on error fn does not run.
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
func WithLock(ctx context.Context, backend Locker, key string, fn func(ctx context.Context, lease *Lease) error, opts *LockOptions) error {
	if fn == nil {
		return invalidArg("lock", "fn must not be nil")
	}
	lease, ctx, err := lock(ctx, backend, key, opts, true)
	if err != nil {
		return err
	}
	var fnErr error
	defer func() {
		lease.dispose(releaseSourceWithLock)
		lease.traceCallEnd(fnErr) // after the release
	}()
	fnCtx := ctx
	if lease.cfg.AutoExtend {
		var cancel context.CancelFunc
		fnCtx, cancel = lease.Bind(ctx)
		defer cancel()
	}
	fnErr = fn(fnCtx, lease)
	return fnErr
}

// Lock acquires the lock on key and returns a Lease for it, which the
// caller must end, usually with defer lease.Close(). It waits on
// contention within opts.Acquisition and fails with ErrAcquisitionTimeout
// when time or retries run out (the outage's code when no attempt got an
// answer), saying how many attempts were made. A backend error is
// returned at once, and cancelling ctx while waiting returns ErrAborted at
// once. On error nothing is left to release.
//
// The lease (and WithLock) keeps using backend, so pass a pool backend,
// not a Backend.WithTx view, unless the lease ends before the transaction
// does: after it, every operation on the view fails with sql.ErrTxDone
// (InvalidArgument) and the lock stays until its TTL.
func Lock(ctx context.Context, backend Locker, key string, opts *LockOptions) (*Lease, error) {
	lease, _, err := lock(ctx, backend, key, opts, false)
	return lease, err
}

// lock is Lock; it also returns the context of the call (its Tracer's).
func lock(ctx context.Context, backend Locker, key string, opts *LockOptions, withLock bool) (*Lease, context.Context, error) {
	if backend == nil {
		return nil, ctx, invalidArg("lock", "backend must not be nil")
	}
	cfg, err := opts.resolve()
	if err != nil {
		return nil, ctx, err
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
	if cfg.Tracer == nil {
		if b, ok := As[interface{ Tracer() Tracer }](backend); ok {
			cfg.Tracer, cfg.lockerTracer = b.Tracer(), true
		}
	}
	var lt *lockTrace
	if cfg.Tracer != nil {
		if lt = startLock(ctx, cfg.Tracer, key, withLock); lt != nil {
			ctx = lt.ctx
		}
	}
	res, sent, attempts, err := acquire(ctx, backend, key, &cfg)
	if lt != nil {
		lt.waitEnd(res, attempts, err)
	}
	if err != nil {
		return nil, ctx, err
	}
	return newLease(ctx, backend, key, res, sent, cfg, lt), ctx, nil
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
