//go:build unix

package cli

import (
	"errors"
	"os"
	"syscall"
)

// forwarded are the signals passed on to the command.
var forwarded = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2}

func notifySignals(foreground bool) []os.Signal {
	s := append([]os.Signal(nil), forwarded...)
	if !foreground {
		// ^Z stops syncguard's process group, not the command's own one:
		// stop the command with us (see child.suspend).
		s = append(s, syscall.SIGTSTP)
	}
	return s
}

// abortsWait reports whether s ends a wait for the lock.
func abortsWait(s os.Signal) bool {
	return s == syscall.SIGINT || s == syscall.SIGTERM || s == syscall.SIGHUP || s == syscall.SIGQUIT
}

// forwardable reports whether s is passed on to the command. In foreground
// mode the terminal already delivers SIGINT and SIGQUIT to the command,
// which shares syncguard's process group.
func forwardable(s os.Signal, foreground bool) bool {
	if foreground && (s == syscall.SIGINT || s == syscall.SIGQUIT) {
		return false
	}
	for _, f := range forwarded {
		if s == f {
			return true
		}
	}
	return false
}

func isSuspend(s os.Signal) bool { return s == syscall.SIGTSTP }

func sysProcAttr(foreground bool) *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{Setpgid: !foreground}
	setPdeathsig(a)
	return a
}

// send delivers s to the command's process group, or in foreground mode to
// the command itself.
func (c *child) send(s os.Signal) {
	sig, ok := s.(syscall.Signal)
	if !ok {
		return
	}
	if c.group {
		_ = syscall.Kill(-c.cmd.Process.Pid, sig)
		return
	}
	_ = c.cmd.Process.Signal(sig)
}

// terminate sends SIGTERM, and SIGCONT so that a stopped command handles it.
func (c *child) terminate() {
	c.send(syscall.SIGTERM)
	c.send(syscall.SIGCONT)
}

func (c *child) kill() { c.send(syscall.SIGKILL) }

// groupAlive reports whether any process of the command's group is left.
func (c *child) groupAlive() bool {
	err := syscall.Kill(-c.cmd.Process.Pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// suspend handles ^Z: stop the command's group, stop ourselves, and when
// continued (fg, bg, SIGCONT) run check, then continue the command.
func (c *child) suspend(check func()) {
	c.send(syscall.SIGTSTP)
	_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP)
	check()
	c.send(syscall.SIGCONT)
}

// exitStatus is the command's exit code, or 128+N when signal N killed it,
// as shells report it.
func exitStatus(ps *os.ProcessState) int {
	if ps == nil {
		return ExitInternal
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

func signalNumber(s os.Signal) int {
	if sig, ok := s.(syscall.Signal); ok {
		return int(sig)
	}
	return 1
}

var signalNames = map[syscall.Signal]string{
	syscall.SIGINT: "SIGINT", syscall.SIGTERM: "SIGTERM", syscall.SIGHUP: "SIGHUP", syscall.SIGQUIT: "SIGQUIT",
	syscall.SIGUSR1: "SIGUSR1", syscall.SIGUSR2: "SIGUSR2", syscall.SIGTSTP: "SIGTSTP", syscall.SIGKILL: "SIGKILL",
}

func signalName(s os.Signal) string {
	if sig, ok := s.(syscall.Signal); ok {
		if n, ok := signalNames[sig]; ok {
			return n
		}
	}
	return s.String()
}
