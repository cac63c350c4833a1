package syncguard

import (
	"log/slog"
	"testing"
)

// loggingLocker is a Locker with a LeaseLogger, as syncguardtest's Backend.
type loggingLocker struct {
	Locker
	l *slog.Logger
}

func (b loggingLocker) LeaseLogger() *slog.Logger { return b.l }

func TestLeaseLoggerOf(t *testing.T) {
	mine := discardLogger()
	if got := leaseLoggerOf(loggingLocker{l: mine}); got != mine {
		t.Errorf("a backend's LeaseLogger is not used")
	}
	if got := leaseLoggerOf(loggingLocker{}); got != slog.Default() {
		t.Errorf("a nil LeaseLogger: %v, want slog.Default()", got)
	}
	if got := leaseLoggerOf(&Backend{}); got != slog.Default() {
		t.Errorf("a Backend: %v, want slog.Default()", got)
	}
}
