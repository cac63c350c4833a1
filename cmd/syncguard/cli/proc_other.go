//go:build !unix

package cli

import (
	"io"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// Without Unix signals, process groups and a subreaper (Windows): COMMAND
// is started directly, only an interrupt is handled, stopping the command
// kills it, and only COMMAND itself is covered by the lock.

func notifySignals(bool) []os.Signal        { return []os.Signal{os.Interrupt} }
func abortsWait(s os.Signal) bool           { return s == os.Interrupt }
func forwardable(os.Signal, bool) bool      { return false }
func isSuspend(os.Signal) bool              { return false }
func stopSelf()                             {}
func signalNumber(os.Signal) int            { return 2 }
func signalName(s os.Signal) string         { return s.String() }
func reapOrphans()                          {}
func (s *supervisor) signal(syscall.Signal) {}
func (s *supervisor) terminate()            { _ = s.cmd.Process.Kill() }
func (s *supervisor) kill()                 { _ = s.cmd.Process.Kill() }
func (s *supervisor) setDeadline(time.Time) {}

// The Unix numbers, for messages; never delivered.
const (
	sigTSTP = syscall.Signal(20)
	sigCONT = syscall.Signal(18)
	sigTTIN = syscall.Signal(21)
	sigTTOU = syscall.Signal(22)
)

func exitStatus(ps *os.ProcessState) int {
	if ps == nil {
		return ExitInternal
	}
	return ps.ExitCode()
}

// supervisor runs COMMAND directly.
type supervisor struct {
	cmd    *exec.Cmd
	events chan treeEvent
	pid    int
}

func startTree(spec supervisorSpec, stdin *os.File, stdout, stderr io.Writer) (*supervisor, error) {
	cmd := exec.Command(spec.Path)
	cmd.Args, cmd.Env = spec.Argv, spec.Env
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, stdout, stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &supervisor{cmd: cmd, events: make(chan treeEvent, 4), pid: cmd.Process.Pid}
	go func() {
		_ = cmd.Wait()
		s.events <- treeEvent{kind: "exit", status: exitStatus(cmd.ProcessState)}
		s.events <- treeEvent{kind: "done"}
		close(s.events)
	}()
	return s, nil
}
