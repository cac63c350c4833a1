//go:build unix && !linux

package cli

import (
	"syscall"
	"time"
)

// wContinued: the stop report of a child is not cleared when it continues
// (a second stop of the same process goes unreported).
const wContinued = 0

func setPdeathsig(*syscall.SysProcAttr)    {}
func procAvailable() bool                  { return false }
func procState(int) (byte, bool)           { return 0, false }
func decodeDeadline(v int64) time.Duration { return time.Duration(v) }
