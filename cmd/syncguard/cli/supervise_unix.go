//go:build unix

package cli

// `syncguard run` and `elect` start COMMAND through a supervisor, a second
// copy of the binary (re-executed, see supervisorEnv) that is a child
// subreaper on Linux, so that it waits for and signals COMMAND's whole tree
// (docs/cli-run.md, "The lock covers the whole process tree"). It takes orders
// over one pipe (sig N, term, kill, deadline T) and reports events over
// another (pid, execerr, exit, stop, deadman, done). When syncguard dies
// the order pipe reaches end of file and it SIGKILLs the tree; it does so
// too at the lock's last confirmed expiry (a dead man's switch).

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// supervisorEnv marks the re-executed binary as a supervisor. Package cli
// checks it in init, so that programs embedding cli.Main (which re-execute
// themselves) get the same behaviour without routing anything.
const supervisorEnv = "SYNCGUARD_INTERNAL_SUPERVISOR"

// supervisorProtocol is the value of supervisorEnv: a binary of another
// version refuses to serve (an upgrade in place between re-executions is
// not possible on Linux, which re-executes /proc/self/exe).
const supervisorProtocol = "1"

func init() {
	if v, ok := os.LookupEnv(supervisorEnv); ok {
		if v != supervisorProtocol {
			fmt.Fprintf(os.Stderr, "syncguard: run: supervisor protocol %q, want %q\n", v, supervisorProtocol)
			os.Exit(ExitInternal)
		}
		os.Exit(superviseMain())
	}
}

// supervisor is syncguard's handle on the supervisor process.
type supervisor struct {
	cmd    *exec.Cmd
	mu     sync.Mutex // serializes orders
	ctl    *os.File
	events chan treeEvent
	pid    int // COMMAND's pid
}

// startTree starts the supervisor, which starts COMMAND. It returns once
// COMMAND runs, or with COMMAND's exec error (*os.PathError).
func startTree(spec supervisorSpec, stdin *os.File, stdout, stderr io.Writer) (*supervisor, error) {
	exe, err := os.Executable()
	if runtime.GOOS == "linux" {
		exe, err = "/proc/self/exe", nil // this very binary, even if its file was replaced since
	}
	if err != nil {
		return nil, err
	}
	ctlR, ctlW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	evtR, evtW, err := os.Pipe()
	if err != nil {
		ctlR.Close()
		ctlW.Close()
		return nil, err
	}
	cmd := exec.Command(exe)
	cmd.Args = []string{"syncguard-supervisor"}
	cmd.Env = append(withoutEnv(os.Environ(), supervisorEnv), supervisorEnv+"="+supervisorProtocol)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, stdout, stderr
	cmd.ExtraFiles = []*os.File{ctlR, evtW} // fds 3 and 4
	err = cmd.Start()
	ctlR.Close()
	evtW.Close()
	if err != nil {
		ctlW.Close()
		evtR.Close()
		return nil, err
	}
	s := &supervisor{cmd: cmd, ctl: ctlW, events: make(chan treeEvent, 16)}
	b, _ := json.Marshal(spec)
	// A large environment can exceed the pipe's buffer: write while the
	// supervisor reads.
	go s.send(string(b))

	lines := bufio.NewScanner(evtR)
	lines.Buffer(make([]byte, 0, 4096), 1<<20)
	first, ok := "", lines.Scan()
	if ok {
		first = lines.Text()
	}
	verb, arg, _ := strings.Cut(first, " ")
	n, _ := strconv.Atoi(arg)
	if verb == "pid" {
		s.pid = n
		go s.read(lines, evtR)
		return s, nil
	}
	evtR.Close()
	ctlW.Close()
	werr := cmd.Wait()
	if verb == "execerr" {
		return nil, &os.PathError{Op: "exec", Path: spec.Path, Err: syscall.Errno(n)}
	}
	return nil, fmt.Errorf("the supervisor process failed to start %s (%q, %v)", spec.Path, first, werr)
}

// read turns the supervisor's reports into events; when they end, it
// waits for the process and sends "gone" if "done" did not come.
func (s *supervisor) read(lines *bufio.Scanner, r *os.File) {
	done := false
	for lines.Scan() {
		verb, rest, _ := strings.Cut(lines.Text(), " ")
		var n []int // the numbers after the verb, then two zeros
		for _, w := range append(strings.Fields(rest), "0", "0") {
			v, _ := strconv.Atoi(w)
			n = append(n, v)
		}
		switch verb {
		case "exit":
			s.events <- treeEvent{kind: "exit", status: n[0], left: n[1 : len(n)-2]}
		case "stop":
			s.events <- treeEvent{kind: "stop", pid: n[0], sig: n[1]}
		case "deadman":
			s.events <- treeEvent{kind: "deadman"}
		case "done":
			done = true
		}
	}
	r.Close()
	err := s.cmd.Wait()
	s.mu.Lock()
	s.ctl.Close()
	s.ctl = nil
	s.mu.Unlock()
	ev := treeEvent{kind: "done"}
	if !done {
		ev = treeEvent{kind: "gone", status: exitStatus(s.cmd.ProcessState)}
		if err != nil {
			ev.err = err.Error()
		}
	}
	s.events <- ev
	close(s.events)
}

func (s *supervisor) send(line string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ctl != nil {
		_, _ = io.WriteString(s.ctl, line+"\n")
	}
}

// signal forwards sig to the process tree.
func (s *supervisor) signal(sig syscall.Signal) { s.send("sig " + strconv.Itoa(int(sig))) }

// terminate sends SIGTERM and SIGCONT to the tree.
func (s *supervisor) terminate() { s.send("term") }

// kill SIGKILLs the tree until no process of it is left; syncguard SIGKILLs
// what it finds below the supervisor too, and a stopped supervisor (which
// reads no orders), so that nothing outlives the lock.
func (s *supervisor) kill() {
	s.send("kill")
	spid := s.cmd.Process.Pid
	for _, p := range descendants(spid) {
		_ = syscall.Kill(p.pid, syscall.SIGKILL)
	}
	if p, ok := procState(spid); ok && (p == 'T' || p == 't') {
		_ = syscall.Kill(spid, syscall.SIGKILL)
	}
}

// setDeadline moves the dead man's switch to t.
func (s *supervisor) setDeadline(t time.Time) {
	s.send("deadline " + strconv.FormatInt(encodeDeadline(t), 10))
}

// ---- the supervisor process ----

// shim is the state of the supervisor process. Everything runs on one
// goroutine, locked to the thread that started COMMAND (Pdeathsig is tied
// to that thread), so reaping and signalling never race.
type shim struct {
	spec    supervisorSpec
	evt     *os.File
	cmdPid  int
	pgid    int  // COMMAND's process group when it has its own, else 0
	reaped  bool // COMMAND has been waited for
	noKids  bool // wait4 said ECHILD: no child left
	killing bool
	// suspended is true between a forwarded SIGTSTP/SIGSTOP and SIGCONT:
	// stops seen then are not reported.
	suspended bool
	stopSeen  map[int]int  // pid -> consecutive /proc scans that saw it stopped
	reported  map[int]bool // stops reported and not yet continued
}

func superviseMain() int {
	runtime.LockOSThread()
	ctl, evt := os.NewFile(3, "orders"), os.NewFile(4, "events")
	syscall.CloseOnExec(3)
	syscall.CloseOnExec(4)
	_ = becomeSubreaper()

	lines := bufio.NewScanner(ctl)
	lines.Buffer(make([]byte, 0, 64*1024), 64<<20)
	if !lines.Scan() {
		return ExitInternal // syncguard is gone
	}
	sh := &shim{evt: evt, stopSeen: map[int]int{}, reported: map[int]bool{}}
	if err := json.Unmarshal(lines.Bytes(), &sh.spec); err != nil {
		fmt.Fprintf(os.Stderr, "syncguard: run: supervisor: bad spec: %v\n", err)
		return ExitInternal
	}

	// Signals sent to the supervisor itself (it shares syncguard's process
	// group: ^C, ^Z, a shutdown that signals every process) are not acted
	// on: syncguard forwards what COMMAND must get. Caught, not ignored,
	// so that COMMAND starts with the default handlers; a signal syncguard
	// was started with ignored (nohup, a background job of a
	// non-interactive shell) stays ignored for the whole tree.
	caught := slices.DeleteFunc([]os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT,
		syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU}, signal.Ignored)
	discard := make(chan os.Signal, 16)
	signal.Notify(discard, caught...)
	sigchld := make(chan os.Signal, 1)
	signal.Notify(sigchld, syscall.SIGCHLD)

	attr := &syscall.SysProcAttr{Setpgid: !sh.spec.Foreground}
	setPdeathsig(attr)
	pid, err := syscall.ForkExec(sh.spec.Path, sh.spec.Argv, &syscall.ProcAttr{
		Env: sh.spec.Env, Files: []uintptr{0, 1, 2}, Sys: attr,
	})
	if err != nil {
		var errno syscall.Errno
		if !errors.As(err, &errno) {
			errno = syscall.EINVAL
		}
		sh.report("execerr %d", int(errno))
		return ExitCannotExec
	}
	sh.cmdPid = pid
	if !sh.spec.Foreground {
		sh.pgid = pid
	}
	sh.report("pid %d", pid)

	orders := make(chan string)
	go func() {
		defer close(orders)
		for lines.Scan() {
			orders <- lines.Text()
		}
	}()

	deadman := time.NewTimer(decodeDeadline(sh.spec.Deadline))
	defer deadman.Stop()
	tick := time.NewTimer(0)
	defer tick.Stop()
	for {
		sh.reap()
		if sh.done() {
			sh.report("done")
			return 0
		}
		select {
		case <-sigchld:
		case <-discard:
		case o, ok := <-orders:
			if !ok {
				// syncguard is gone (killed, even with SIGKILL): nothing
				// holds the lock any more.
				orders = nil
				sh.killing = true
				continue
			}
			sh.order(o, deadman)
		case <-deadman.C:
			sh.report("deadman")
			sh.killing = true
		case <-tick.C:
			if sh.spec.TTY && !sh.killing {
				sh.scanStops()
			}
		}
		if sh.killing {
			sh.signalTree(syscall.SIGKILL)
		}
		tick.Reset(sh.interval())
	}
}

// interval is how often the loop looks at the tree without being woken.
func (sh *shim) interval() time.Duration {
	switch {
	case sh.killing:
		return 10 * time.Millisecond
	case sh.reaped && !treeTracking:
		return 100 * time.Millisecond // polling for an empty process group
	case sh.spec.TTY:
		return 500 * time.Millisecond
	default:
		return 5 * time.Second // reaping does not depend on it (SIGCHLD wakes the loop)
	}
}

func (sh *shim) report(format string, args ...any) { _, _ = fmt.Fprintf(sh.evt, format+"\n", args...) }

func (sh *shim) order(o string, deadman *time.Timer) {
	verb, arg, _ := strings.Cut(o, " ")
	n, err := strconv.ParseInt(arg, 10, 64)
	switch verb {
	case "sig":
		sig := syscall.Signal(n)
		switch sig {
		case syscall.SIGTSTP, syscall.SIGSTOP:
			sh.suspended = true
		case syscall.SIGCONT:
			sh.suspended = false
			clear(sh.stopSeen)
			clear(sh.reported)
		}
		sh.signalTree(sig)
	case "term":
		sh.signalTree(syscall.SIGTERM)
		sh.signalTree(syscall.SIGCONT)
		sh.suspended = false
	case "kill":
		sh.killing = true
	case "deadline":
		if err == nil {
			deadman.Reset(decodeDeadline(n))
		}
	}
}

// reap waits for every child that changed state.
func (sh *shim) reap() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG|syscall.WUNTRACED|wContinued, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if errors.Is(err, syscall.ECHILD) {
			sh.noKids = true
			return
		}
		if err != nil || pid <= 0 {
			return
		}
		switch {
		case ws.Continued():
			delete(sh.reported, pid)
		case ws.Stopped():
			if !sh.suspended && !sh.reported[pid] {
				sh.reported[pid] = true
				sh.report("stop %d %d", pid, int(ws.StopSignal()))
			}
		case pid == sh.cmdPid:
			sh.reaped = true
			status := ws.ExitStatus()
			if ws.Signaled() {
				status = 128 + int(ws.Signal())
			}
			var left []string
			for _, p := range descendants(os.Getpid()) {
				left = append(left, strconv.Itoa(p.pid))
			}
			sh.report("exit %d %s", status, strings.Join(left, " "))
		}
	}
}

// done reports whether COMMAND and every descendant have exited: with
// tree tracking, when the supervisor has no child left; otherwise when
// COMMAND has exited and its process group is empty.
func (sh *shim) done() bool {
	switch {
	case !sh.reaped:
		return false
	case treeTracking:
		return sh.noKids
	}
	return sh.pgid == 0 || errors.Is(syscall.Kill(-sh.pgid, 0), syscall.ESRCH)
}

// signalTree sends sig to COMMAND's process group and to every descendant
// outside it (Linux), or in foreground mode to every descendant (or
// COMMAND alone without tree tracking).
func (sh *shim) signalTree(sig syscall.Signal) {
	procs := descendants(os.Getpid())
	group := false
	if sh.pgid != 0 {
		// The group id stays COMMAND's pid while a member lives, or while
		// COMMAND is not reaped; after that, only signal a group that a
		// descendant is seen in, so that a reused id is never signalled.
		group = !sh.reaped || !treeTracking || !procAvailable()
		for _, p := range procs {
			group = group || p.pgrp == sh.pgid
		}
		if group {
			_ = syscall.Kill(-sh.pgid, sig)
		}
	}
	for _, p := range procs {
		if group && p.pgrp == sh.pgid {
			continue
		}
		_ = syscall.Kill(p.pid, sig)
	}
	if !treeTracking && sh.pgid == 0 && !sh.reaped {
		_ = syscall.Kill(sh.cmdPid, sig)
	}
}

// scanStops finds descendants stopped (SIGTTIN, SIGTTOU) in a background
// process group of their terminal, deeper than the children wait4 reports:
// seen stopped twice in a row.
func (sh *shim) scanStops() {
	if sh.suspended {
		return
	}
	seen := map[int]bool{}
	for _, p := range descendants(os.Getpid()) {
		if p.state != 'T' || p.tty == 0 || p.tpgid == p.pgrp {
			continue
		}
		seen[p.pid] = true
		sh.stopSeen[p.pid]++
		if sh.stopSeen[p.pid] >= 2 && !sh.reported[p.pid] {
			sh.reported[p.pid] = true
			sh.report("stop %d 0", p.pid)
		}
	}
	for pid := range sh.stopSeen {
		if !seen[pid] {
			delete(sh.stopSeen, pid)
			delete(sh.reported, pid)
		}
	}
}
