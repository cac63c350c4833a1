//go:build unix && !linux

package cli

import "syscall"

func setPdeathsig(*syscall.SysProcAttr) {}
