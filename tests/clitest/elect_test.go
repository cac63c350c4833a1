//go:build linux

package clitest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Two leaders' COMMANDs never run at the same moment, whatever signal
// reaches the leader's syncguard elect (issue 26). The evidence is ordering,
// not timing: every COMMAND, and the child it leaves in the background,
// holds an exclusive flock(1) on one file for as long as it lives; a
// COMMAND that starts while any process of an earlier leader's tree is
// alive finds the lock taken and records "overlap".

// exclusiveScript is such a COMMAND; body runs after the lock is taken
// (with the term's pid file written and "leading term N" printed).
func exclusiveScript(dir, body string) string {
	return `exec 9>>` + dir + `/lock
flock -n 9 || echo "term $SYNCGUARD_FENCE_NUM overlapped a process of an earlier term" >> ` + dir + `/overlap
sleep 600 >/dev/null 2>&1 &
echo $! > ` + dir + `/child.$SYNCGUARD_FENCE_NUM
echo $$ > ` + dir + `/pid.$SYNCGUARD_FENCE_NUM
echo "leading term $SYNCGUARD_FENCE_NUM"
` + body
}

// startDetached starts syncguard without a controlling terminal, as
// systemd does (COMMAND then runs in a process group of its own).
func startDetached(t *testing.T, environ []string, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(bin, args...), done: make(chan struct{})}
	p.cmd.Env = environ
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	p.begin(t)
	return p
}

// leaderTerm waits until p's COMMAND leads and returns its term.
func leaderTerm(t *testing.T, p *proc, nth int) string {
	t.Helper()
	for {
		p.waitStdout(t, "leading term ")
		lines := strings.Split(strings.TrimSpace(p.stdout.String()), "\n")
		if len(lines) >= nth {
			return strings.TrimPrefix(lines[nth-1], "leading term ")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// noOverlap fails the test if a COMMAND recorded an overlap.
func noOverlap(t *testing.T, dir string) {
	t.Helper()
	if b, err := os.ReadFile(filepath.Join(dir, "overlap")); err == nil {
		t.Errorf("two leaders' processes ran at the same moment:\n%s", b)
	}
}

// treeOf returns the pids of term's COMMAND and of the child it left.
func treeOf(t *testing.T, dir, term string) []int {
	t.Helper()
	return []int{readPid(t, filepath.Join(dir, "pid."+term)), readPid(t, filepath.Join(dir, "child."+term))}
}

func electPair(t *testing.T, name, body string) (a, b *proc, dir, termA string) {
	t.Helper()
	if _, err := exec.LookPath("flock"); err != nil {
		t.Skip("no flock(1)")
	}
	d := dsn(t)
	k := key(t, name)
	dir = t.TempDir()
	script := exclusiveScript(dir, body)
	a = startDetached(t, env(d), "elect", "--key", k, "--ttl", "2s", "--grace", "5s", "--identity", "a", "--", "sh", "-c", script)
	termA = leaderTerm(t, a, 1)
	b = startDetached(t, env(d), "elect", "--key", k, "--ttl", "2s", "--grace", "5s", "--identity", "b", "--", "sh", "-c", script)
	return a, b, dir, termA
}

// kill -9 of the leader's syncguard: its supervisor kills the tree at once
// (the order pipe's end), long before the lock expires and the next
// candidate's COMMAND starts. Before the supervisor, the COMMAND ran on
// beside the next leader's.
func TestElectKill9TakesTreeDown(t *testing.T) {
	t.Parallel()
	a, b, dir, termA := electPair(t, "elect-kill9", "exec sleep 600")
	treeA := treeOf(t, dir, termA)
	_ = a.cmd.Process.Kill()
	termB := leaderTerm(t, b, 1)
	noOverlap(t, dir)
	waitGone(t, "the killed leader's tree", treeA...)
	if nb, _ := strconv.Atoi(termB); nb <= mustAtoi(t, termA) {
		t.Errorf("the next term %s must be above %s", termB, termA)
	}
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	wantCode(t, b.wait(t, time.Minute), 0)
	waitGone(t, "the second leader's tree after SIGTERM", treeOf(t, dir, termB)...)
}

// kill -STOP of the leader's syncguard: it can neither extend nor stop
// COMMAND; the supervisor's dead man's switch kills the tree at the lock's
// last confirmed expiry, while syncguard is still stopped, before the next
// candidate can take the key. Continued, syncguard says so and campaigns
// again.
func TestElectStoppedLeaderDeadMansSwitch(t *testing.T) {
	t.Parallel()
	a, b, dir, termA := electPair(t, "elect-stop", "exec sleep 600")
	treeA := treeOf(t, dir, termA)
	if err := syscall.Kill(a.cmd.Process.Pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(a.cmd.Process.Pid, syscall.SIGCONT) })
	termB := leaderTerm(t, b, 1)
	noOverlap(t, dir)
	waitGone(t, "the stopped leader's tree", treeA...)
	if st := procStateOf(a.cmd.Process.Pid); st != 'T' {
		t.Errorf("the stopped leader's syncguard is in state %q: the tree must have been killed by its supervisor, not by syncguard", st)
	}
	_ = syscall.Kill(a.cmd.Process.Pid, syscall.SIGCONT)
	a.waitStderr(t, "reached its last confirmed expiry")
	t.Logf("the stopped leader, continued:\n%s", a.stderr.String())
	// Both stop on SIGTERM: a (campaigning again) at once, b after its tree.
	_ = a.cmd.Process.Signal(syscall.SIGTERM)
	wantCode(t, a.wait(t, time.Minute), 0)
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	wantCode(t, b.wait(t, time.Minute), 0)
	waitGone(t, "the second leader's tree after SIGTERM", treeOf(t, dir, termB)...)
	noOverlap(t, dir)
}

// SIGTERM to the leader's syncguard while its COMMAND takes a while to
// stop: the term is resigned (and the next candidate elected) only after
// the whole tree is gone. Before, the resignation came at once, and the
// next leader's COMMAND started while this one was still stopping.
func TestElectSigtermResignsAfterTheTree(t *testing.T) {
	t.Parallel()
	a, b, dir, termA := electPair(t, "elect-term", `trap 'sleep 1; exit 0' TERM
while :; do sleep 0.1; done`)
	treeA := treeOf(t, dir, termA)
	_ = a.cmd.Process.Signal(syscall.SIGTERM)
	termB := leaderTerm(t, b, 1)
	noOverlap(t, dir)
	wantCode(t, a.wait(t, time.Minute), 0)
	waitGone(t, "the resigned leader's tree", treeA...)
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	wantCode(t, b.wait(t, time.Minute), 0)
	waitGone(t, "the second leader's tree after SIGTERM", treeOf(t, dir, termB)...)
}

// procStateOf returns the state letter of pid from /proc (0 if gone).
func procStateOf(pid int) byte {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return 0
	}
	return s[i+2]
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("%q is not a number", s)
	}
	return n
}

// With a terminal, COMMAND stays in its foreground process group under the
// supervisor: it reads the terminal, and ^C reaches it and stops elect,
// which resigns and exits 0.
func TestElectOnTerminal(t *testing.T) {
	t.Parallel()
	tty := openPTY(t)
	d := dsn(t)
	k := key(t, "elect-tty")
	p := startOnTTY(t, tty, env(d), "elect", "--key", k, "--ttl", "5s", "--", "sh", "-c", `echo leading; read x; echo "got $x"; exec sleep 600`)
	deadline := time.Now().Add(2 * time.Minute)
	waitOut := func(want string) {
		t.Helper()
		for !strings.Contains(tty.out.String(), want) {
			if time.Now().After(deadline) {
				t.Fatalf("no %q on the terminal within 2m:\n%s", want, tty.out.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitOut("leading")
	if _, err := tty.master.Write([]byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	waitOut("got hello")
	if _, err := tty.master.Write([]byte{3}); err != nil { // ^C
		t.Fatal(err)
	}
	wantCode(t, p.wait(t, time.Minute), 0)
	if r := sg(t, d, "leader", k); r.code != 1 {
		t.Errorf("after ^C elect resigned: want no leader, got %s", r)
	}
}
