//go:build unix

package clitest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/syncguard/syncguard-go/syncguard"
)

// Holder identities in status and ls.
func TestStatusAndLsShowIdentity(t *testing.T) {
	t.Parallel()
	d := dsn(t)
	db := openDB(t, d)
	b := backend(t, db, &syncguard.Config{Identity: "ops-host:4242"})
	k := key(t, "ident")
	r, err := b.Acquire(ctxT(t), k, time.Minute)
	if err != nil || !r.OK {
		t.Fatal(r, err)
	}
	defer b.Release(ctxT(t), r.LockID)
	res := sg(t, d, "status", k)
	wantCode(t, res, 0)
	if !strings.Contains(res.stdout, "holder    ops-host:4242 (lock#") {
		t.Errorf("status shows the holder's identity:\n%s", res)
	}
	res = sg(t, d, "--json", "status", k)
	if m := decode(t, res); m["identity"] != "ops-host:4242" {
		t.Errorf("status --json: identity %v", m["identity"])
	}
	res = sg(t, d, "ls", "--limit", "0")
	wantCode(t, res, 0)
	if !strings.Contains(res.stdout, "ops-host:4242") {
		t.Errorf("ls shows the holder's identity:\n%s", res)
	}
	// run stores host:pid:COMMAND by default.
	k2 := key(t, "run-ident")
	p := start(t, env(d), "run", "--key", k2, "--", "sh", "-c", "echo started; sleep 60")
	p.waitStdout(t, "started")
	res = sg(t, d, "status", k2)
	if !strings.Contains(res.stdout, fmt.Sprintf(":%d:sh (lock#", p.cmd.Process.Pid)) {
		t.Errorf("run's default identity is host:pid:COMMAND:\n%s", res)
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	p.wait(t, time.Minute)
}

// Three `syncguard elect` candidates: one leader at a time; the leader
// killed with kill -9 (its command too) is replaced at its lock's expiry
// with a higher term; a leader stopped with SIGTERM resigns and the next
// is elected at once; `leader` shows who leads.
func TestElectThreeCandidates(t *testing.T) {
	t.Parallel()
	d := dsn(t)
	k := key(t, "elect")
	dir := t.TempDir()
	script := `echo $$ > ` + dir + `/pid.$SYNCGUARD_FENCE_NUM; echo "leading term $SYNCGUARD_FENCE"; exec sleep 600`
	watch := start(t, env(d), "leader", "--watch", "--interval", "20ms", k)
	watch.waitStdout(t, "no leader")
	var cands []*proc
	for i := range 3 {
		cands = append(cands, start(t, env(d), "elect", "--key", k, "--ttl", "6s", "--grace", "1s",
			"--identity", fmt.Sprintf("cand-%d", i), "--", "sh", "-c", script))
	}
	// leaderOf waits until exactly one live candidate printed "leading term"
	// more times than before, and returns it and its term.
	seen := make([]int, 3)
	next := func(skip int) (int, string) {
		t.Helper()
		deadline := time.Now().Add(2 * time.Minute) // a bug's bound, not a timing assertion
		for time.Now().Before(deadline) {
			for i, p := range cands {
				if i == skip {
					continue
				}
				out := p.stdout.String()
				if n := strings.Count(out, "leading term "); n > seen[i] {
					seen[i] = n
					lines := strings.Split(strings.TrimSpace(out), "\n")
					return i, strings.TrimPrefix(lines[len(lines)-1], "leading term ")
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Fatalf("no candidate was elected")
		return 0, ""
	}
	first, term1 := next(-1)
	res := sg(t, d, "leader", k)
	wantCode(t, res, 0)
	if !strings.Contains(res.stdout, fmt.Sprintf("cand-%d", first)) || !strings.Contains(res.stdout, term1) {
		t.Errorf("leader shows cand-%d, term %s:\n%s", first, term1, res)
	}
	// kill -9 the leader and its command, as a crashed machine.
	n1, _ := strconv.ParseInt(term1, 10, 64)
	childPid := readPid(t, filepath.Join(dir, fmt.Sprintf("pid.%d", n1)))
	killedAt := time.Now()
	_ = cands[first].cmd.Process.Kill()
	_ = syscall.Kill(childPid, syscall.SIGKILL)
	second, term2 := next(first)
	if term2 <= term1 {
		t.Errorf("the follower's term %s must be above the crashed leader's %s", term2, term1)
	}
	// Taken over at the crashed lock's expiry: not before the TTL's last
	// extension could run out (ttl/3 after the last extend at the earliest).
	// The TTL leaves room for extends delayed by a loaded machine: with 2 s
	// a stalled extend lost the lease and a second candidate was elected.
	if since := time.Since(killedAt); since < 6*time.Second/3 {
		t.Errorf("taken over %v after the kill; the crashed leader's lock (ttl 6s) was live", since)
	}
	watch.waitStdout(t, fmt.Sprintf("leader cand-%d term %s", second, term2))
	// SIGTERM: the leader stops its command, resigns, and the third
	// candidate is elected at once (one hand-off, no expiry).
	resignAt := time.Now()
	_ = cands[second].cmd.Process.Signal(syscall.SIGTERM)
	r := cands[second].wait(t, time.Minute)
	wantCode(t, r, 0)
	third, term3 := next(second)
	if third == first || third == second || term3 <= term2 {
		t.Errorf("after the resignation: cand-%d term %s (before: cand-%d term %s)", third, term3, second, term2)
	}
	t.Logf("crash take-over: term %s -> %s; resign hand-over: %s -> %s in %v", term1, term2, term2, term3, time.Since(resignAt))
	res = sg(t, d, "--json", "leader", k)
	if m := decode(t, res); m["leader"] != fmt.Sprintf("cand-%d", third) || m["term"] != term3 {
		t.Errorf("leader --json: %v", m)
	}
	watch.waitStdout(t, fmt.Sprintf("leader cand-%d term %s", third, term3))
	_ = cands[third].cmd.Process.Signal(syscall.SIGTERM)
	cands[third].wait(t, time.Minute)
	// The watcher saw every term, in order, and "no leader" at the end.
	for !strings.HasSuffix(strings.TrimSpace(watch.stdout.String()), "no leader") {
		select {
		case <-watch.done:
			t.Fatalf("leader --watch exited: %s", watch.res)
		case <-time.After(20 * time.Millisecond):
		}
	}
	_ = watch.cmd.Process.Signal(syscall.SIGTERM)
	wr := watch.wait(t, time.Minute)
	wantCode(t, wr, 0)
	var events []string
	for _, line := range strings.Split(strings.TrimSpace(wr.stdout), "\n") {
		if i := strings.Index(line, " leader cand-"); i >= 0 {
			events = append(events, line[i+1:])
		} else if strings.HasSuffix(line, " no leader") {
			events = append(events, "no leader")
		}
	}
	// "no leader" may come between two terms (the crashed leader's lock
	// expired before the follower's attempt); it must come first and last.
	var terms []string
	for _, ev := range events {
		if ev != "no leader" {
			terms = append(terms, ev)
		}
	}
	want := []string{fmt.Sprintf("leader cand-%d term %s", first, term1), fmt.Sprintf("leader cand-%d term %s", second, term2),
		fmt.Sprintf("leader cand-%d term %s", third, term3)}
	if len(events) < 2 || events[0] != "no leader" || events[len(events)-1] != "no leader" || strings.Join(terms, "|") != strings.Join(want, "|") {
		t.Errorf("leader --watch: every change in order;\ngot  %q\nwant %q between \"no leader\"s", events, want)
	}
	res = sg(t, d, "leader", k)
	wantCode(t, res, 1)
	if !strings.Contains(res.stdout, "no leader") {
		t.Errorf("leader after the last resigned:\n%s", res)
	}
	_ = os.Remove(dir)
}

// What a leader's COMMAND started goes with it: `elect` runs COMMAND in a
// process group of its own, signals the group, and stops what COMMAND
// left running before it resigns.
func TestElectStopsWhatCommandStarted(t *testing.T) {
	t.Parallel()
	d := dsn(t)
	// elect without a terminal, as under systemd, even when the tests run
	// on one (with a terminal COMMAND stays in its foreground group).
	start := func(t *testing.T, environ []string, args ...string) *proc {
		t.Helper()
		p := &proc{cmd: exec.Command(bin, args...), done: make(chan struct{})}
		p.cmd.Env = environ
		p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
		p.cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		p.begin(t)
		return p
	}
	t.Run("SIGTERM to elect", func(t *testing.T) {
		k := key(t, "elect-tree-term")
		dir := t.TempDir()
		p := start(t, env(d), "elect", "--key", k, "--grace", "5s", "--", "sh", "-c",
			`sleep 600 >/dev/null 2>&1 & echo $! > `+dir+`/child; echo started; exec sleep 600`)
		p.waitStdout(t, "started")
		child := readPid(t, filepath.Join(dir, "child"))
		t.Cleanup(func() { _ = syscall.Kill(child, syscall.SIGKILL) })
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		wantCode(t, p.wait(t, time.Minute), 0)
		waitGone(t, "the leader's COMMAND's background child after SIGTERM to elect", child)
	})
	t.Run("COMMAND exits, its child stays", func(t *testing.T) {
		k := key(t, "elect-tree-exit")
		dir := t.TempDir()
		p := start(t, env(d), "elect", "--key", k, "--grace", "5s", "--recampaign", "1h", "--", "sh", "-c",
			`sleep 600 >/dev/null 2>&1 & echo $! > `+dir+`/child; echo started`)
		p.waitStdout(t, "started")
		child := readPid(t, filepath.Join(dir, "child"))
		t.Cleanup(func() { _ = syscall.Kill(child, syscall.SIGKILL) })
		waitGone(t, "what the leader's COMMAND left running when it exited", child)
		p.waitStderr(t, "stopping what is left of its process tree")
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		wantCode(t, p.wait(t, time.Minute), 0)
	})
}
