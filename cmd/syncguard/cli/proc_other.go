//go:build !unix

package cli

import (
	"os"
	"syscall"
)

// Without Unix signals and process groups (Windows): only an interrupt is
// forwarded, and stopping the command kills it.

func notifySignals(bool) []os.Signal { return []os.Signal{os.Interrupt} }

func abortsWait(s os.Signal) bool { return s == os.Interrupt }

func forwardable(os.Signal, bool) bool { return false }

func isSuspend(os.Signal) bool { return false }

func sysProcAttr(bool) *syscall.SysProcAttr { return nil }

func (c *child) send(s os.Signal) { _ = c.cmd.Process.Signal(s) }

func (c *child) terminate() { _ = c.cmd.Process.Kill() }

func (c *child) kill() { _ = c.cmd.Process.Kill() }

func (c *child) groupAlive() bool { return false }

func (c *child) suspend(func()) {}

func exitStatus(ps *os.ProcessState) int {
	if ps == nil {
		return ExitInternal
	}
	return ps.ExitCode()
}

func signalNumber(os.Signal) int { return 2 }

func signalName(s os.Signal) string { return s.String() }
