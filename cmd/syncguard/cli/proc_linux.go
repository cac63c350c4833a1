package cli

import (
	"bytes"
	"os"
	"strconv"
	"syscall"
	"time"
	"unsafe"
)

// treeTracking: on Linux the supervisor is a child subreaper and finds
// every descendant in /proc, so the lock covers the whole process tree.
const treeTracking = true

// wContinued makes wait4 report continued children.
const wContinued = syscall.WCONTINUED

const prSetChildSubreaper = 36 // PR_SET_CHILD_SUBREAPER, linux/prctl.h

// becomeSubreaper makes orphaned descendants of the calling process its
// children (instead of init's), so that it can wait for them and find them.
func becomeSubreaper() error {
	if _, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0); e != 0 {
		return e
	}
	return nil
}

// setPdeathsig makes Linux kill the command if its parent (the
// supervisor) dies without stopping it.
func setPdeathsig(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }

// readProc reads /proc/PID/stat.
func readProc(pid int) (procInfo, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procInfo{}, false
	}
	// pid (comm) state ppid pgrp session tty_nr tpgid ...; comm may hold
	// spaces and parentheses, so parse after the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procInfo{}, false
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 6 {
		return procInfo{}, false
	}
	n := func(i int) int { v, _ := strconv.Atoi(string(f[i])); return v }
	return procInfo{pid: pid, state: f[0][0], ppid: n(1), pgrp: n(2), tty: n(4), tpgid: n(5)}, true
}

// procState returns the state letter of process pid (T: stopped).
func procState(pid int) (byte, bool) {
	p, ok := readProc(pid)
	return p.state, ok
}

// procAvailable reports whether /proc can be read (it may be missing in
// a container); without it the tree is COMMAND's process group.
func procAvailable() bool {
	_, err := os.Stat("/proc/self/stat")
	return err == nil
}

// descendants returns the live (not zombie) descendants of root, found by
// their parent links in /proc.
func descendants(root int) []procInfo {
	entries, _ := os.ReadDir("/proc")
	children := map[int][]procInfo{}
	for _, e := range entries {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			if p, ok := readProc(pid); ok {
				children[p.ppid] = append(children[p.ppid], p)
			}
		}
	}
	var out []procInfo
	queue := []int{root}
	seen := map[int]bool{root: true}
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		for _, c := range children[pid] {
			if seen[c.pid] {
				continue
			}
			seen[c.pid] = true
			queue = append(queue, c.pid)
			if c.state != 'Z' && c.state != 'X' {
				out = append(out, c)
			}
		}
	}
	return out
}

// hasControllingTTY reports whether this process has a controlling
// terminal (only then can its descendants stop on SIGTTIN or SIGTTOU).
func hasControllingTTY() bool {
	p, ok := readProc(os.Getpid())
	return ok && p.tty != 0
}

// monoNow reads CLOCK_MONOTONIC, which the runtime's monotonic clock
// uses too, so that two processes agree on instants.
func monoNow() int64 {
	var ts syscall.Timespec
	if _, _, e := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, 1 /* CLOCK_MONOTONIC */, uintptr(unsafe.Pointer(&ts)), 0); e != 0 {
		return 0
	}
	return ts.Nano()
}

// encodeDeadline turns t into a value the supervisor process reads with
// decodeDeadline: an absolute CLOCK_MONOTONIC instant, exact across
// processes.
func encodeDeadline(t time.Time) int64 { return monoNow() + int64(time.Until(t)) }

func decodeDeadline(v int64) time.Duration { return time.Duration(v - monoNow()) }
