//go:build unix

package clitest

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestRunExitStatusPassthrough(t *testing.T) {
	t.Parallel()
	d := dsn(t)
	b := backend(t, openDB(t, d), nil)
	for _, c := range []struct {
		script string
		want   int
	}{
		{"exit 0", 0},
		{"exit 7", 7},
		{"exit 255", 255},
		{"kill -KILL $$", 128 + 9},
		{"kill -TERM $$", 128 + 15},
	} {
		k := key(t, c.script)
		r := sg(t, d, "run", "--key", k, "--", "sh", "-c", c.script)
		wantCode(t, r, c.want)
		if r.stderr != "" {
			t.Errorf("%q: syncguard printed on stderr without --verbose: %s", c.script, r)
		}
		assertFree(t, b, k)
	}
}

func TestRunFenceAndKeyInEnvironment(t *testing.T) {
	t.Parallel()
	d := dsn(t)
	k := key(t, "k")
	r1 := sg(t, d, "run", "--key", k, "--", "sh", "-c", `echo "$SYNCGUARD_FENCE $SYNCGUARD_KEY"`)
	wantCode(t, r1, 0)
	f1, k1, _ := strings.Cut(strings.TrimSpace(r1.stdout), " ")
	if len(f1) != 15 || k1 != k {
		t.Fatalf("child saw fence %q key %q, want a 15-digit fence and %q", f1, k1, k)
	}
	r2 := sg(t, d, "run", "--key", k, "--fence-env", "MY_FENCE", "--", "sh", "-c", `echo "$MY_FENCE"`)
	wantCode(t, r2, 0)
	if f2 := strings.TrimSpace(r2.stdout); len(f2) != 15 || f2 <= f1 {
		t.Fatalf("second fence %q must be greater than the first %q", f2, f1)
	}
}

func TestRunBusyTryOnce(t *testing.T) {
	t.Parallel()
	d := dsn(t)
	b, k, res := holdKey(t, d)
	marker := filepath.Join(t.TempDir(), "ran")
	r := sg(t, d, "run", "--key", k, "--wait", "0", "--", "touch", marker)
	wantCode(t, r, 75)
	wantOneLineError(t, r, "syncguard: run: AcquisitionTimeout: lock busy: ")
	if !strings.Contains(r.stderr, string(res.Fence)) || !strings.Contains(r.stderr, "--wait 0") {
		t.Errorf("the reason should name the holder's fence and --wait 0: %s", r)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the command ran although the lock was busy")
	}
	if r.elapsed > 45*time.Second { // a bug (waiting --timeout, retrying) would; load would not
		t.Errorf("try-once took %v", r.elapsed)
	}
	rq := sg(t, d, "run", "--key", k, "--wait", "0", "--quiet", "--", "true")
	wantCode(t, rq, 75)
	if rq.stderr != "" {
		t.Errorf("--quiet printed: %s", rq)
	}
	// The holder keeps its lock.
	if info, _ := b.LookupKey(ctxT(t), k); info == nil || info.Fence != res.Fence {
		t.Fatalf("holder lost its lock: %+v", info)
	}
}

func TestRunWaitTimeout(t *testing.T) {
	t.Parallel()
	d := dsn(t)
	_, k, _ := holdKey(t, d)
	r := sg(t, d, "run", "--key", k, "--wait", "1s", "--", "true")
	wantCode(t, r, 75)
	wantOneLineError(t, r, "syncguard: run: AcquisitionTimeout: lock busy: ")
	if r.elapsed < time.Second || r.elapsed > 45*time.Second {
		t.Errorf("--wait 1s gave up after %v", r.elapsed)
	}
}

func TestRunWaitsForRelease(t *testing.T) {
	t.Parallel()
	d := dsn(t)
	b := backend(t, openDB(t, d), nil)
	k := key(t, "k")
	res, err := b.Acquire(ctxT(t), k, time.Minute)
	if err != nil || !res.OK {
		t.Fatalf("acquire: %+v %v", res, err)
	}
	p := start(t, env(d), "run", "--key", k, "--wait", "1m", "--verbose", "--", "sh", "-c", `echo "$SYNCGUARD_FENCE"`)
	p.waitStderr(t, "is busy")
	if _, err := b.Release(ctxT(t), res.LockID); err != nil {
		t.Fatal(err)
	}
	r := p.wait(t, time.Minute)
	wantCode(t, r, 0)
	if f := strings.TrimSpace(r.stdout); f <= string(res.Fence) {
		t.Fatalf("waiter's fence %q not above the previous holder's %q", f, res.Fence)
	}
	for _, w := range []string{"is busy", "acquired", "released"} {
		if !strings.Contains(r.stderr, w) {
			t.Errorf("--verbose output lacks %q: %s", w, r)
		}
	}
}

func TestRunForwardsSignals(t *testing.T) {
	t.Parallel()
	d := dsn(t)
	b := backend(t, openDB(t, d), nil)
	k := key(t, "k")
	dir := t.TempDir()
	script := fmt.Sprintf(`trap 'echo usr1 >> %[1]s/usr1' USR1
trap 'echo term > %[1]s/term; exit 3' TERM
echo ready > %[1]s/ready
while :; do sleep 0.05; done`, dir)
	p := start(t, env(d), "run", "--key", k, "--", "sh", "-c", script)
	waitFile(t, filepath.Join(dir, "ready"), 20*time.Second)
	p.cmd.Process.Signal(syscall.SIGUSR1)
	waitFile(t, filepath.Join(dir, "usr1"), 10*time.Second)
	p.cmd.Process.Signal(syscall.SIGTERM)
	r := p.wait(t, 20*time.Second)
	wantCode(t, r, 3)
	if got := waitFile(t, filepath.Join(dir, "term"), time.Second); strings.TrimSpace(got) != "term" {
		t.Fatalf("term file: %q", got)
	}
	assertFree(t, b, k)
}

func TestRunInterruptWhileWaiting(t *testing.T) {
	t.Parallel()
	d := dsn(t)
	_, k, _ := holdKey(t, d)
	marker := filepath.Join(t.TempDir(), "ran")
	p := start(t, env(d), "run", "--key", k, "--wait", "1m", "-v", "--", "touch", marker)
	p.waitStderr(t, "is busy") // waiting, with its signal handlers installed
	p.cmd.Process.Signal(syscall.SIGINT)
	r := p.wait(t, time.Minute)
	wantCode(t, r, 130)
	if !strings.Contains(r.stderr, "syncguard: run: Aborted: got SIGINT while waiting") {
		t.Errorf("no Aborted message: %s", r)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the command ran")
	}
}

func TestRunLockLostStopsCommand(t *testing.T) {
	t.Parallel()
	d := dsn(t)
	db := openDB(t, d)
	dir := t.TempDir()

	t.Run("SIGTERM", func(t *testing.T) {
		t.Parallel()
		k := key(t, "k")
		script := fmt.Sprintf(`trap 'echo term > %[1]s/term1; exit 0' TERM
echo ready > %[1]s/ready1
while :; do sleep 0.05; done`, dir)
		p := start(t, env(d), "run", "--key", k, "--ttl", "2s", "--grace", "5s", "--", "sh", "-c", script)
		waitFile(t, filepath.Join(dir, "ready1"), 20*time.Second)
		if _, err := db.ExecContext(ctxT(t), `DELETE FROM syncguard_locks WHERE user_key = $1`, k); err != nil {
			t.Fatal(err)
		}
		r := p.wait(t, time.Minute) // the command never ends on its own
		wantCode(t, r, 76)
		if !strings.Contains(r.stderr, "syncguard: run: LockLost: lost the lock on") {
			t.Errorf("no LockLost message: %s", r)
		}
		waitFile(t, filepath.Join(dir, "term1"), time.Second)
	})
	t.Run("SIGKILL after grace", func(t *testing.T) {
		t.Parallel()
		k := key(t, "k")
		// The command ignores SIGTERM, and so does a background child of it.
		script := fmt.Sprintf(`trap '' TERM
(trap '' TERM; while :; do sleep 0.05; done) &
echo $! > %[1]s/bgpid
echo ready > %[1]s/ready2
while :; do sleep 0.05; done`, dir)
		p := start(t, env(d), "run", "--key", k, "--ttl", "2s", "--grace", "700ms", "--", "sh", "-c", script)
		waitFile(t, filepath.Join(dir, "ready2"), 20*time.Second)
		bg, _ := strconv.Atoi(strings.TrimSpace(waitFile(t, filepath.Join(dir, "bgpid"), time.Second)))
		if _, err := db.ExecContext(ctxT(t), `DELETE FROM syncguard_locks WHERE user_key = $1`, k); err != nil {
			t.Fatal(err)
		}
		r := p.wait(t, 20*time.Second)
		wantCode(t, r, 76)
		if !strings.Contains(r.stderr, "sending SIGKILL") {
			t.Errorf("no SIGKILL notice: %s", r)
		}
		// The background member of the command's process group is gone too.
		deadline := time.Now().Add(5 * time.Second)
		for syscall.Kill(bg, 0) == nil {
			if time.Now().After(deadline) {
				t.Fatalf("background process %d of the command survived the lost lock", bg)
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
}

func TestRunReleasesOnCrashAndExecFailure(t *testing.T) {
	t.Parallel()
	d := dsn(t)
	b := backend(t, openDB(t, d), nil)

	k := key(t, "crash")
	r := sg(t, d, "run", "--key", k, "--ttl", "1m", "--", "sh", "-c", "kill -SEGV $$")
	wantCode(t, r, 128+int(syscall.SIGSEGV))
	assertFree(t, b, k) // released at once, not after the 1m TTL

	k = key(t, "notfound")
	r = sg(t, d, "run", "--key", k, "--ttl", "1m", "--", "syncguard-test-no-such-command")
	wantCode(t, r, 127)
	wantOneLineError(t, r, "syncguard: run: CommandNotFound: ")
	assertFree(t, b, k)

	k = key(t, "noexec")
	r = sg(t, d, "run", "--key", k, "--ttl", "1m", "--", "/etc/hostname")
	wantCode(t, r, 126)
	assertFree(t, b, k)
}
