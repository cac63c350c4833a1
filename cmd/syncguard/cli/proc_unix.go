//go:build unix

package cli

import (
	"errors"
	"os"
	"os/signal"
	"slices"
	"syscall"
)

// forwarded are the signals passed on to the command's process tree.
var forwarded = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2}

// notifySignals lists the signals run handles, but those syncguard was
// started with ignored (nohup, a non-interactive shell's background job):
// the tree inherits those ignored.
func notifySignals(foreground bool) []os.Signal {
	s := slices.DeleteFunc(slices.Clone(forwarded), signal.Ignored)
	if !foreground && !signal.Ignored(syscall.SIGTSTP) {
		// ^Z stops syncguard's process group, not the command's own one:
		// stop the command with us (see holding.signal).
		s = append(s, syscall.SIGTSTP)
	}
	return s
}

// abortsWait reports whether s ends a wait for the lock or for its
// release.
func abortsWait(s os.Signal) bool {
	return s == syscall.SIGINT || s == syscall.SIGTERM || s == syscall.SIGHUP || s == syscall.SIGQUIT
}

// forwardable reports whether s is passed on to the command. In foreground
// mode the terminal already delivers SIGINT and SIGQUIT to the command,
// which shares syncguard's process group.
func forwardable(s os.Signal, foreground bool) bool {
	return !(foreground && (s == syscall.SIGINT || s == syscall.SIGQUIT)) && slices.Contains(forwarded, s)
}

func isSuspend(s os.Signal) bool { return s == syscall.SIGTSTP }

const (
	sigTSTP = syscall.SIGTSTP
	sigCONT = syscall.SIGCONT
	sigTTIN = syscall.SIGTTIN
	sigTTOU = syscall.SIGTTOU
)

// stopSelf stops syncguard (SIGSTOP) until it is continued.
func stopSelf() { _ = syscall.Kill(os.Getpid(), syscall.SIGSTOP) }

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
	syscall.SIGSTOP: "SIGSTOP", syscall.SIGTTIN: "SIGTTIN", syscall.SIGTTOU: "SIGTTOU", syscall.SIGCONT: "SIGCONT",
}

func signalName(s os.Signal) string {
	if sig, ok := s.(syscall.Signal); ok {
		if n, ok := signalNames[sig]; ok {
			return n
		}
	}
	return s.String()
}

// reapOrphans, after the supervisor died, kills and waits for the
// processes of the tree that became syncguard's children (it is a child
// subreaper on Linux).
func reapOrphans() {
	for {
		for _, p := range descendants(os.Getpid()) {
			_ = syscall.Kill(p.pid, syscall.SIGKILL)
		}
		var ws syscall.WaitStatus
		_, err := syscall.Wait4(-1, &ws, 0, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return // ECHILD: none left
		}
	}
}
