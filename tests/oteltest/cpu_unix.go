//go:build unix

package oteltest

import (
	"syscall"
	"time"
)

// CPUTime is the CPU time (user + system) this process has used so far:
// every goroutine's, the telemetry goroutine's, the span batcher's and
// the garbage collector's included.
func CPUTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
