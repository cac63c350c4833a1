//go:build linux

// Process-tree behaviour of `syncguard run` (issue 16, items 1, 2, 4):
// what the lock covers, and how the tree is stopped. Linux only: the child
// subreaper and /proc are what make the whole tree visible.
package clitest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/syncguard/syncguard-go/syncguard"
)

// Item 2: the lock is held until every descendant has exited, including a
// background job the command left behind, and one that made itself a
// session leader (a daemon).
func TestRunHoldsLockUntilWholeTreeExits(t *testing.T) {
	t.Parallel()
	d := dsn(t)
	b := backend(t, openDB(t, d), nil)
	k := key(t, "k")
	dir := t.TempDir()
	script := fmt.Sprintf(`cd %s
(while [ ! -e go ]; do sleep 0.05; done; echo done > bg-done) &
setsid sh -c 'while [ ! -e go ]; do sleep 0.05; done; echo done > daemon-done' &
echo started > started`, dir)
	p := start(t, env(d), "run", "--key", k, "-v", "--", "sh", "-c", script)
	// The command itself exits at once; syncguard says it holds on.
	p.waitStderr(t, "exited with status 0; holding the lock until its ")
	waitFile(t, filepath.Join(dir, "started"), time.Minute)

	if r := sg(t, d, "run", "--key", k, "-n", "--", "true"); r.code != 75 {
		t.Fatalf("the lock must stay held while background processes of the command run: %s", r)
	}
	if r := sg(t, d, "status", k); r.code != 0 {
		t.Fatalf("status should say held (exit 0): %s", r)
	}
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	r := p.wait(t, 2*time.Minute)
	wantCode(t, r, 0)
	// Released only after both left-behind processes finished.
	for _, f := range []string{"bg-done", "daemon-done"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("syncguard exited before %s: %v", f, err)
		}
	}
	assertFree(t, b, k)
}

// Item 2: kill -9 of syncguard takes the whole tree down: the command, a
// background child, and a grandchild in a session of its own. The lock
// itself then expires by its TTL.
func TestRunKill9TakesTreeDown(t *testing.T) {
	t.Parallel()
	d := dsn(t)
	k := key(t, "k")
	dir := t.TempDir()
	script := fmt.Sprintf(`cd %s
trap '' TERM HUP
(trap '' TERM HUP; while :; do sleep 0.05; done) &
echo $! > bg
setsid sh -c 'trap "" TERM HUP; echo $$ > daemon; while :; do sleep 0.05; done' &
echo $$ > cmd
wait`, dir)
	p := start(t, env(d), "run", "--key", k, "--", "sh", "-c", script)
	pids := []int{readPid(t, filepath.Join(dir, "cmd")), readPid(t, filepath.Join(dir, "bg")), readPid(t, filepath.Join(dir, "daemon"))}
	supervisors := childrenOf(p.cmd.Process.Pid)
	if len(supervisors) != 1 {
		t.Fatalf("want one supervisor process under syncguard, got %v", supervisors)
	}
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	wantCode(t, p.wait(t, time.Minute), -1) // killed
	waitGone(t, "after kill -9 of syncguard", append(pids, supervisors...)...)
}

// Items 1 and 2: when the lock is lost (here: the database becomes
// unreachable), the command and its whole tree are SIGKILLed before any
// other host can take the lock, whatever --grace says, although every
// process ignores SIGTERM; run says that it shortened --grace.
func TestRunGraceEndsBeforeLockExpiry(t *testing.T) {
	t.Parallel()
	d := dsn(t)
	b := backend(t, openDB(t, d), nil)
	px, viaProxy := startProxy(t, d)
	k := key(t, "k")
	dir := t.TempDir()
	script := fmt.Sprintf(`cd %s
trap '' TERM
(trap '' TERM; while :; do sleep 0.05; done) &
echo $! > bg
setsid sh -c 'trap "" TERM; echo $$ > daemon; while :; do sleep 0.05; done' &
echo $$ > cmd
while :; do sleep 0.05; done`, dir)
	p := start(t, env(viaProxy), "run", "--key", k, "--ttl", "3s", "--grace", "1h", "--timeout", "1s", "--", "sh", "-c", script)
	pids := []int{readPid(t, filepath.Join(dir, "cmd")), readPid(t, filepath.Join(dir, "bg")), readPid(t, filepath.Join(dir, "daemon"))}
	px.setDark(true)

	// Another host takes the key the moment the server lets it: by then
	// no process of the tree may run.
	takeOverAfterTree(t, b, k, pids, "of the old holder's tree")
	r := p.wait(t, 2*time.Minute) // with --grace 1h unclipped, this would take an hour
	wantCode(t, r, 76)
	for _, w := range []string{"LockLost: lost the lock on", "--grace 1h shortened"} {
		if !strings.Contains(r.stderr, w) {
			t.Errorf("stderr lacks %q: %s", w, r)
		}
	}
}

// Item 2: on a lost lock, processes outside the command's process group
// that ignore SIGTERM are SIGKILLed after --grace too, and syncguard exits
// only once they are gone.
func TestRunLostLockStopsWholeTree(t *testing.T) {
	t.Parallel()
	d := dsn(t)
	db := openDB(t, d)
	k := key(t, "k")
	dir := t.TempDir()
	script := fmt.Sprintf(`cd %s
trap 'echo term > cmd-term; exit 0' TERM
setsid sh -c 'trap "" TERM; echo $$ > daemon; while :; do sleep 0.05; done' &
echo ready > ready
while :; do sleep 0.05; done`, dir)
	p := start(t, env(d), "run", "--key", k, "--ttl", "3s", "--grace", "500ms", "--", "sh", "-c", script)
	waitFile(t, filepath.Join(dir, "ready"), time.Minute)
	daemon := readPid(t, filepath.Join(dir, "daemon"))
	if _, err := db.ExecContext(ctxT(t), `DELETE FROM syncguard_locks WHERE user_key = $1`, k); err != nil {
		t.Fatal(err)
	}
	r := p.wait(t, 2*time.Minute)
	wantCode(t, r, 76)
	waitFile(t, filepath.Join(dir, "cmd-term"), time.Second) // the command got SIGTERM
	if alive(daemon) {
		t.Fatalf("syncguard exited while process %d of the tree (outside its process group, ignoring SIGTERM) still runs: %s", daemon, r)
	}
	if !strings.Contains(r.stderr, "sending SIGKILL") {
		t.Errorf("no SIGKILL notice: %s", r)
	}
}

// Items 1 and 2: should syncguard itself be stopped (SIGSTOP) while its
// command runs, the supervisor still kills the tree at the lock's last
// confirmed expiry, before another host can take the lock.
func TestRunDeadMansSwitch(t *testing.T) {
	t.Parallel()
	d := dsn(t)
	b := backend(t, openDB(t, d), nil)
	k := key(t, "k")
	dir := t.TempDir()
	script := fmt.Sprintf(`cd %s
(while :; do sleep 0.05; done) &
echo $! > bg
echo $$ > cmd
while :; do sleep 0.05; done`, dir)
	p := start(t, env(d), "run", "--key", k, "--ttl", "2s", "--", "sh", "-c", script)
	pids := []int{readPid(t, filepath.Join(dir, "cmd")), readPid(t, filepath.Join(dir, "bg"))}
	if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	takeOverAfterTree(t, b, k, pids, "of the tree (syncguard stopped)")
	p.cmd.Process.Signal(syscall.SIGCONT)
	r := p.wait(t, 2*time.Minute)
	wantCode(t, r, 76)
	if !strings.Contains(r.stderr, "LockLost") {
		t.Errorf("no LockLost message: %s", r)
	}
}

// Item 4: a command that reads the terminal from the process group run
// gives it stops on SIGTTIN; run notices, stops the tree and names
// --foreground (exit 128+SIGTTIN), instead of extending the lease forever.
// With --foreground the same command reads the terminal.
func TestRunCommandStoppedOnTerminal(t *testing.T) {
	t.Parallel()
	d := dsn(t)
	b := backend(t, openDB(t, d), nil)
	for _, c := range []struct{ name, script string }{
		{"command reads", `read x; echo "got $x"`},
		{"grandchild reads", `head -n 1; true`}, // sh forks head: only /proc sees it stop
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			k := key(t, "k")
			tty := openPTY(t)
			p := startOnTTY(t, tty, env(d), "run", "--key", k, "--", "sh", "-c", c.script)
			r := p.wait(t, 2*time.Minute)
			out := tty.out.String()
			if r.code != 128+int(syscall.SIGTTIN) {
				t.Fatalf("want exit %d, got %d; terminal output:\n%s", 128+int(syscall.SIGTTIN), r.code, out)
			}
			if !strings.Contains(out, "Stopped:") || !strings.Contains(out, "--foreground") {
				t.Errorf("the message should say the command stopped and name --foreground:\n%s", out)
			}
			assertFree(t, b, k)
		})
	}
	t.Run("--foreground", func(t *testing.T) {
		t.Parallel()
		k := key(t, "k")
		tty := openPTY(t)
		p := startOnTTY(t, tty, env(d), "run", "--key", k, "--foreground", "--", "sh", "-c", `read x; echo "got $x"`)
		if _, err := tty.master.Write([]byte("hello\n")); err != nil {
			t.Fatal(err)
		}
		r := p.wait(t, 2*time.Minute)
		if r.code != 0 || !strings.Contains(tty.out.String(), "got hello") {
			t.Fatalf("--foreground: exit %d, terminal output:\n%s", r.code, tty.out.String())
		}
	})
}

// Item 2, a limit documented in docs/cli-run.md: should the supervisor itself
// be SIGKILLed, syncguard (a subreaper too) kills and reaps what is left
// of the tree, releases the lock and exits 70.
func TestRunSupervisorKilled(t *testing.T) {
	t.Parallel()
	d := dsn(t)
	b := backend(t, openDB(t, d), nil)
	k := key(t, "k")
	dir := t.TempDir()
	script := fmt.Sprintf(`cd %s
trap '' TERM
(trap '' TERM; while :; do sleep 0.05; done) &
echo $! > bg
echo $$ > cmd
while :; do sleep 0.05; done`, dir)
	p := start(t, env(d), "run", "--key", k, "--", "sh", "-c", script)
	pids := []int{readPid(t, filepath.Join(dir, "cmd")), readPid(t, filepath.Join(dir, "bg"))}
	supervisors := childrenOf(p.cmd.Process.Pid)
	if len(supervisors) != 1 {
		t.Fatalf("want one supervisor process under syncguard, got %v", supervisors)
	}
	if err := syscall.Kill(supervisors[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	r := p.wait(t, 2*time.Minute)
	wantCode(t, r, 70)
	wantOneLineError(t, r, "syncguard: run: Internal: the supervisor of sh died")
	for _, pid := range pids {
		if alive(pid) {
			t.Errorf("process %d of the tree outlived syncguard", pid)
		}
	}
	assertFree(t, b, k)
}

// takeOverAfterTree takes k with another holder the moment the server lets
// it, and fails t for each process of pids that still runs then (whose
// names the tree in the message).
func takeOverAfterTree(t *testing.T, b *syncguard.Backend, k string, pids []int, whose string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err := takeOver(ctx, t, b, k, func() {
		for _, pid := range pids {
			if alive(pid) {
				t.Errorf("process %d %s still runs when another holder got the lock", pid, whose)
			}
		}
	})
	if err != nil {
		t.Fatalf("the key never became free: %v", err)
	}
}
