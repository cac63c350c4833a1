//go:build !linux

package cli

import "time"

// treeTracking: without a subreaper and /proc, the lock covers COMMAND's
// process group on Unix (until it is empty), COMMAND alone elsewhere.
const treeTracking = false

func becomeSubreaper() error     { return nil }
func descendants(int) []procInfo { return nil }
func hasControllingTTY() bool    { return false }

// Deadlines travel as durations from now, late by the pipe's latency at
// most (syncguard enforces the exact deadline itself).
func encodeDeadline(t time.Time) int64 { return int64(time.Until(t)) }
