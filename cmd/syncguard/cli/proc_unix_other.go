//go:build unix && !linux

package cli

import (
	"syscall"
	"time"
)

// treeTracking: without a child subreaper and /proc, the lock covers the
// command's process group (until it is empty), not processes that leave
// it.
const treeTracking = false

// wContinued: the stop report of a child is not cleared when it continues
// (a second stop of the same process goes unreported).
const wContinued = 0

func becomeSubreaper() error { return nil }

func setPdeathsig(*syscall.SysProcAttr) {}

type procInfo struct {
	pid, ppid, pgrp, tty, tpgid int
	state                       byte
}

func descendants(int) []procInfo { return nil }

func procAvailable() bool { return false }

func procState(int) (byte, bool) { return 0, false }

func hasControllingTTY() bool { return false }

// Deadlines travel as durations from now: the supervisor reads them at
// once, so they are late by the pipe's latency at most (the main process
// enforces the exact deadline itself).
func encodeDeadline(t time.Time) int64 { return int64(time.Until(t)) }

func decodeDeadline(v int64) time.Duration { return time.Duration(v) }
