package syncguard

import "log/slog"

// leaseLoggerOf is the default LockOptions.Logger for leases on backend:
// the LeaseLogger of a backend that has one (through wrappers), else
// slog.Default(). syncguardtest's Backend has one, which discards unless
// the test sets a logger: its injected failures would otherwise log a
// warning to slog.Default at every failed automatic extension.
//
// Lock applies it when LockOptions.Logger is nil (and to the default
// OnReleaseError when that is nil too).
func leaseLoggerOf(backend Locker) *slog.Logger {
	if b, ok := As[interface{ LeaseLogger() *slog.Logger }](backend); ok {
		if l := b.LeaseLogger(); l != nil {
			return l
		}
	}
	return slog.Default()
}
