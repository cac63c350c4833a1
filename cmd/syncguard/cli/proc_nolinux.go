//go:build !linux

package cli

import "time"

// treeTracking: without a child subreaper and /proc, the lock covers
// COMMAND's process group (until it is empty) on Unix, COMMAND alone
// elsewhere: not processes that leave it.
const treeTracking = false

func becomeSubreaper() error     { return nil }
func descendants(int) []procInfo { return nil }
func hasControllingTTY() bool    { return false }

// Deadlines travel as durations from now: the supervisor reads them at
// once, so they are late by the pipe's latency at most (the main process
// enforces the exact deadline itself).
func encodeDeadline(t time.Time) int64 { return int64(time.Until(t)) }
