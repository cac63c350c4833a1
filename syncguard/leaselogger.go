package syncguard

import "log/slog"

// leaseLoggerOf is the default LockOptions.Logger for leases on backend:
// the LeaseLogger of a backend that has one, else slog.Default().
// syncguardtest's Backend has one, which discards unless the test sets a
// logger: its injected failures would otherwise log a warning to
// slog.Default at every failed automatic extension.
//
// Lock applies it when LockOptions.Logger is nil (and to the default
// OnReleaseError when that is nil too).
func leaseLoggerOf(backend Locker) *slog.Logger {
	if b, ok := backend.(interface{ LeaseLogger() *slog.Logger }); ok {
		if l := b.LeaseLogger(); l != nil {
			return l
		}
	}
	if w, ok := backend.(interface{ Unwrap() LockBackend }); ok {
		return leaseLoggerOf(w.Unwrap()) // a TelemetryBackend around the fake
	}
	return slog.Default()
}
