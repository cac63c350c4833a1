//go:build !unix

package oteltest

import "time"

// CPUTime is 0 where getrusage is not available.
func CPUTime() time.Duration { return 0 }
