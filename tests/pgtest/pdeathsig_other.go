//go:build !linux

package pgtest

import "syscall"

// setPdeathsig: only Linux has a parent-death signal.
func setPdeathsig(*syscall.SysProcAttr) {}
