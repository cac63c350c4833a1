//go:build !linux

package ha

import "syscall"

func setPdeathsig(*syscall.SysProcAttr, syscall.Signal) {}
