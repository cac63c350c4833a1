//go:build unix

// The conventions operators expect of `syncguard run` and the inspection
// commands (issue 16, items 3 and 5 to 14).
package clitest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/syncguard/syncguard-go/tests/pgtest"
)

// Item 3: every flag can be set in the environment; the command line wins;
// a bad value names the variable; --key has no variable (SYNCGUARD_KEY is
// what run gives its command).
func TestFlagsFromEnvironment(t *testing.T) {
	t.Parallel()
	d := dsn(t)
	_, held, _ := holdKey(t, d)

	r := start(t, env(d, "SYNCGUARD_BUSY_EXIT=9", "SYNCGUARD_WAIT=0"), "run", "--key", held, "--", "true").wait(t, time.Minute)
	wantCode(t, r, 9)
	if !strings.Contains(r.stderr, "not waiting (--wait 0)") {
		t.Errorf("SYNCGUARD_WAIT=0: %s", r)
	}
	r = start(t, env(d, "SYNCGUARD_WAIT=0", "SYNCGUARD_QUIET=1"), "run", "--key", held, "--", "true").wait(t, time.Minute)
	wantCode(t, r, 75)
	if r.stderr != "" {
		t.Errorf("SYNCGUARD_QUIET=1 printed: %s", r)
	}
	// The command line wins over the environment.
	r = start(t, env(d, "SYNCGUARD_WAIT=0", "SYNCGUARD_BUSY_EXIT=9"), "run", "--key", held, "-E", "8", "--", "true").wait(t, time.Minute)
	wantCode(t, r, 8)

	k := key(t, "k")
	r = start(t, env("", "SYNCGUARD_DSN="+d, "SYNCGUARD_FENCE_ENV=MY_FENCE"), "run", "--key", k, "--", "sh", "-c", `echo "$MY_FENCE $MY_FENCE_NUM"`).wait(t, time.Minute)
	wantCode(t, r, 0)
	if f := strings.Fields(r.stdout); len(f) != 2 || len(f[0]) != 15 {
		t.Errorf("SYNCGUARD_DSN and SYNCGUARD_FENCE_ENV: %s", r)
	}
	r = start(t, env(d, "SYNCGUARD_JSON=true"), "status", k).wait(t, time.Minute)
	wantCode(t, r, 1)
	if m := decode(t, r); m["held"] != false {
		t.Errorf("SYNCGUARD_JSON: %v", m)
	}
	r = start(t, env(d, "SYNCGUARD_TABLE=no_such_table"), "status", k).wait(t, time.Minute)
	wantCode(t, r, 70)
	r = start(t, env(d, "SYNCGUARD_TABLE=no_such_table"), "status", "--table", "syncguard_locks", k).wait(t, time.Minute)
	wantCode(t, r, 1)

	for _, c := range []struct{ variable, value string }{
		{"SYNCGUARD_TTL", "soon"},
		{"SYNCGUARD_TIMEOUT", "0"},
		{"SYNCGUARD_QUIET", "maybe"},
		{"SYNCGUARD_BUSY_EXIT", "300"},
		{"SYNCGUARD_NO_PREPARE", "perhaps"},
	} {
		r := start(t, env(d, c.variable+"="+c.value), "run", "--key", k, "--", "true").wait(t, time.Minute)
		wantCode(t, r, 64)
		wantOneLineError(t, r, "syncguard: ")
		if !strings.Contains(r.stderr, "$"+c.variable+"=") {
			t.Errorf("the error should name %s: %s", c.variable, r)
		}
	}
	// A job's own syncguard run does not inherit its parent's key.
	r = start(t, env(d, "SYNCGUARD_KEY="+k), "run", "-n").wait(t, time.Minute)
	wantCode(t, r, 64)
	if !strings.Contains(r.stderr, "no KEY given") {
		t.Errorf("SYNCGUARD_KEY must not set --key: %s", r)
	}
}

// Item 5: the fence as a plain decimal for shell arithmetic, besides the
// zero-padded form (which bash reads as octal).
func TestRunFenceNumber(t *testing.T) {
	t.Parallel()
	d := dsn(t)
	b := backend(t, openDB(t, d), nil)
	k := key(t, "k")
	for range 8 { // the next fence is 9: "000000000000009" is not an octal number
		res, err := b.Acquire(ctxT(t), k, time.Minute)
		if err != nil || !res.OK {
			t.Fatal(res, err)
		}
		b.Release(ctxT(t), res.LockID)
	}
	r := sg(t, d, "run", "--key", k, "--", "sh", "-c", `echo "$SYNCGUARD_FENCE $SYNCGUARD_FENCE_NUM $((SYNCGUARD_FENCE_NUM + 1))"`)
	wantCode(t, r, 0)
	if got := strings.TrimSpace(r.stdout); got != "000000000000009 9 10" {
		t.Fatalf("fence variables: got %q, want %q", got, "000000000000009 9 10")
	}
	r = sg(t, d, "run", "--key", k, "--fence-env", "JOB_FENCE", "--", "sh", "-c", `echo "$JOB_FENCE $JOB_FENCE_NUM"`)
	wantCode(t, r, 0)
	if got := strings.TrimSpace(r.stdout); got != "000000000000010 10" {
		t.Fatalf("--fence-env JOB_FENCE: got %q", got)
	}
	// A nested run gives its command its own fence, not its parent's.
	k2 := key(t, "nested")
	r = sg(t, d, "run", "--key", k, "--", bin, "run", "--key", k2, "--", "sh", "-c", `echo "$SYNCGUARD_KEY $SYNCGUARD_FENCE_NUM"`)
	wantCode(t, r, 0)
	if got := strings.TrimSpace(r.stdout); got != k2+" 1" {
		t.Fatalf("nested run: got %q, want %q", got, k2+" 1")
	}
}

// Item 6: a transient outage while the command runs prints one warning
// and one recovery line however many extends fail; nothing with -q.
func TestRunQuietOnTransientOutage(t *testing.T) {
	t.Parallel()
	d := dsn(t)
	for _, quiet := range []bool{false, true} {
		t.Run(fmt.Sprintf("quiet=%v", quiet), func(t *testing.T) {
			t.Parallel()
			px, viaProxy := startProxy(t, d)
			k := key(t, "k")
			dir := t.TempDir()
			args := []string{"run", "--key", k, "--ttl", "30", "--timeout", "1"}
			if quiet {
				args = append(args, "-q")
			}
			args = append(args, "--", "sh", "-c", fmt.Sprintf(`echo started > %[1]s/started; while [ ! -e %[1]s/go ]; do sleep 0.05; done`, dir))
			p := start(t, env(viaProxy), args...)
			waitFile(t, filepath.Join(dir, "started"), time.Minute)
			before := px.dropped.Load()
			px.setDark(true)
			if !quiet {
				p.waitStderr(t, "warning: cannot extend the lock")
			}
			// At least three failed attempts: the first extend, then two
			// retries (each dropped attempt counts once or more).
			px.waitDropped(t, before, 6)
			px.setDark(false)
			if !quiet {
				p.waitStderr(t, "again after")
			} else {
				// Wait until an extend went through the proxy again.
				var exp0 int64
				db := openDB(t, d)
				db.QueryRowContext(ctxT(t), `SELECT expires_at_ms FROM syncguard_locks WHERE user_key = $1`, k).Scan(&exp0)
				deadline := time.Now().Add(2 * time.Minute)
				for {
					var exp int64
					db.QueryRowContext(ctxT(t), `SELECT expires_at_ms FROM syncguard_locks WHERE user_key = $1`, k).Scan(&exp)
					if exp != exp0 {
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("no extend after the outage within 2m: %s", p.stderr.String())
					}
					time.Sleep(50 * time.Millisecond)
				}
			}
			if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
			r := p.wait(t, 2*time.Minute)
			wantCode(t, r, 0)
			if quiet {
				if r.stderr != "" {
					t.Errorf("-q printed on a transient outage: %s", r)
				}
				return
			}
			lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
			if len(lines) != 2 || !strings.Contains(lines[0], "warning: cannot extend") || !strings.Contains(lines[1], "again after") {
				t.Errorf("want exactly one warning and one recovery line: %s", r)
			}
			for _, l := range lines {
				if len(l) > 300 {
					t.Errorf("line of %d characters: %q", len(l), l)
				}
			}
		})
	}
}

// Item 7: when the release waits for a database that does not answer, a
// SIGINT ends syncguard promptly (not after --timeout), saying that the
// lock expires by its TTL.
func TestRunSignalEndsHungRelease(t *testing.T) {
	t.Parallel()
	d := dsn(t)
	px, viaProxy := startProxy(t, d)
	k := key(t, "k")
	dir := t.TempDir()
	p := start(t, env(viaProxy), "run", "--key", k, "--timeout", "10m", "--", "sh", "-c",
		fmt.Sprintf(`echo started > %[1]s/started; while :; do sleep 0.05; done`, dir))
	waitFile(t, filepath.Join(dir, "started"), time.Minute)
	px.setDark(true)
	// The first SIGINT is forwarded and ends the command; syncguard then
	// releases, which hangs (a bug would wait --timeout 10m); a later one
	// ends that.
	go func() {
		for {
			select {
			case <-p.done:
				return
			case <-time.After(300 * time.Millisecond):
				p.cmd.Process.Signal(syscall.SIGINT)
			}
		}
	}()
	r := p.wait(t, 2*time.Minute)
	wantCode(t, r, 130)
	if !strings.Contains(r.stderr, "while releasing the lock") || !strings.Contains(r.stderr, "expires by itself") {
		t.Errorf("the message should say the release was abandoned and the lock expires: %s", r)
	}
}

// Item 8: a command that does not exist exits 127, one that cannot be
// executed 126, before any lock is taken.
func TestRunCommandNotFound(t *testing.T) {
	t.Parallel()
	d := dsn(t)
	k := key(t, "k")
	noexec := filepath.Join(t.TempDir(), "script")
	if err := os.WriteFile(noexec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		cmd  string
		want int
		code string
	}{
		{"syncguard-test-no-such-command", 127, "CommandNotFound"},
		{"/opt/syncguard-test/no/such/command", 127, "CommandNotFound"},
		{"./no-such-command", 127, "CommandNotFound"},
		{noexec, 126, "CommandNotExecutable"},
		{"/", 126, "CommandNotExecutable"},
	} {
		r := sg(t, d, "run", "--key", k, "--", c.cmd)
		if r.code != c.want {
			t.Errorf("%s: want exit %d, got %s", c.cmd, c.want, r)
			continue
		}
		wantOneLineError(t, r, "syncguard: run: "+c.code+": ")
	}
	// No lock was taken for any of them: the key was never acquired.
	r := sg(t, d, "status", "--json", k)
	if m := decode(t, r); m["lastFence"] != nil {
		t.Errorf("a fence was handed out for a command that cannot run: %v", m)
	}
}

// Item 9: every duration flag is checked the same way, on the command line
// and in the environment, before any I/O: nonsense is exit 64.
func TestDurationValidation(t *testing.T) {
	t.Parallel()
	srv := pgtest.Require(t)
	refused := srv.RefusedDSN() // a usage error must come before any I/O (69)
	for _, args := range [][]string{
		{"--ttl", "0"}, {"--ttl", "-1s"}, {"--ttl", "999ms"}, {"--ttl", "25h"}, {"--ttl", "soon"}, {"--ttl", "forever"},
		{"--wait", "-1s"}, {"--wait", "-1"}, {"--wait", "2562047h47m16s"}, {"--wait", "9000h"}, {"--wait", "1e3"}, {"-w", "x"},
		{"--grace", "-1s"}, {"--grace", "25h"}, {"--grace", "forever"},
		{"--timeout", "0"}, {"--timeout", "-5s"}, {"--timeout", "2h"}, {"--timeout", "forever"},
		{"--busy-exit", "256"}, {"-E", "-1"},
	} {
		full := append(append([]string{"--dsn", refused, "run", "--key", "k"}, args...), "--", "true")
		r := sg(t, "", full...)
		if r.code != 64 {
			t.Errorf("%q: want exit 64, got %s", args, r)
			continue
		}
		wantOneLineError(t, r, "syncguard: run: InvalidArgument: ")
	}
	// --timeout before the command name is the same flag, checked alike.
	r := sg(t, "", "--timeout", "0", "--dsn", refused, "status", "k")
	wantCode(t, r, 64)
	r = start(t, env(refused, "SYNCGUARD_GRACE=-3"), "run", "--key", "k", "--", "true").wait(t, time.Minute)
	wantCode(t, r, 64)
	// Valid forms reach the database (refused: 69).
	for _, args := range [][]string{
		{"--ttl", "10"}, {"--ttl", "1.5"}, {"--ttl", "90s"}, {"-w", "0.5"}, {"--grace", "0"}, {"--timeout", "0.5"},
	} {
		full := append(append([]string{"--dsn", refused, "run", "--key", "k", "-n"}, args...), "--", "true")
		if r := sg(t, "", full...); r.code != 69 {
			t.Errorf("%q should be accepted: %s", args, r)
		}
	}
}

// Item 10: flock-style short forms: -n, -w SECS, bare seconds, --wait
// forever, and a chosen busy exit status (-E).
func TestRunWaitForms(t *testing.T) {
	t.Parallel()
	d := dsn(t)
	b, k, res := holdKey(t, d)

	r := sg(t, d, "run", "--key", k, "-n", "--", "true")
	wantCode(t, r, 75)
	wantOneLineError(t, r, "syncguard: run: AcquisitionTimeout: lock busy: ")
	r = sg(t, d, "run", "--key", k, "-w", "1", "--", "true")
	wantCode(t, r, 75)
	if !strings.Contains(r.stderr, "(--wait 1s)") || r.elapsed < time.Second {
		t.Errorf("-w 1 should wait a second: %s", r)
	}
	r = sg(t, d, "run", "--key", k, "-n", "-E", "3", "--", "true")
	wantCode(t, r, 3)
	r = sg(t, d, "run", "--key", k, "-n", "--busy-exit", "0", "-q", "--", "true")
	wantCode(t, r, 0)
	if r.stderr != "" {
		t.Errorf("--busy-exit 0 -q printed: %s", r)
	}

	// --wait forever waits until the holder lets go.
	marker := filepath.Join(t.TempDir(), "ran")
	p := start(t, env(d), "run", "--key", k, "--wait", "forever", "-v", "--", "touch", marker)
	p.waitStderr(t, "without limit (--wait forever)")
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the command ran while the lock was held")
	}
	if _, err := b.Release(ctxT(t), res.LockID); err != nil {
		t.Fatal(err)
	}
	wantCode(t, p.wait(t, 2*time.Minute), 0)
	if _, err := os.Stat(marker); err != nil {
		t.Fatal("the command did not run after the release")
	}
}

// Item 11: run never writes to stdout, which is its command's, even with
// --json.
func TestRunStdoutIsTheCommands(t *testing.T) {
	t.Parallel()
	d := dsn(t)
	_, held, _ := holdKey(t, d)
	r := sg(t, d, "--json", "run", "--key", held, "-n", "--", "true")
	wantCode(t, r, 75)
	if r.stdout != "" {
		t.Errorf("run --json printed on stdout when busy: %s", r)
	}
	wantOneLineError(t, r, "syncguard: run: AcquisitionTimeout: ")
	r = sg(t, d, "run", "--json", "--key", key(t, "k"), "-v", "--", "echo", "only this")
	wantCode(t, r, 0)
	if r.stdout != "only this\n" {
		t.Errorf("stdout should be the command's alone: %q", r.stdout)
	}
}

// Item 13: advisory lock ids are JSON strings (64-bit ids survive jq and
// JavaScript), and session locks are told from transaction locks.
func TestAdvisoryLsIDsAndScope(t *testing.T) {
	t.Parallel()
	_, d := freshDB(t, "cli_advisory_ids")
	db := openDB(t, d)
	ctx := ctxT(t)
	const big = "9007199254740993" // 2^53 + 1: a float64 rounds it to ...992
	session, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer session.Close()
	if _, err := session.ExecContext(ctx, `SELECT pg_advisory_lock(`+big+`)`); err != nil {
		t.Fatal(err)
	}
	defer session.ExecContext(context.Background(), `SELECT pg_advisory_unlock_all()`)
	txConn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer txConn.Close()
	tx, err := txConn.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock(77)`); err != nil {
		t.Fatal(err)
	}
	reg := filepath.Join(t.TempDir(), "registry.md")
	os.WriteFile(reg, []byte("| Lock ID | Component | Purpose | Lock Type |\n|---|---|---|---|\n| `77` | Billing | Month close | Transaction (`pg_advisory_xact_lock`) |\n"), 0o644)

	scopes := func(args ...string) map[string]string {
		t.Helper()
		r := sg(t, d, append([]string{"advisory", "ls", "--json"}, args...)...)
		wantCode(t, r, 0)
		if strings.Contains(r.stdout, `"id": `+big) || strings.Contains(r.stdout, "9007199254740992") {
			t.Errorf("a 64-bit id printed as a JSON number: %s", r)
		}
		out := map[string]string{}
		for _, l := range decode(t, r)["locks"].([]any) {
			m := l.(map[string]any)
			id, _ := m["id"].(string)
			out[id], _ = m["scope"].(string)
		}
		return out
	}
	got := scopes()
	if got[big] != "session" || got["77"] != "unknown" {
		t.Errorf("scopes without a registry: %v (want %s session, 77 unknown)", got, big)
	}
	got = scopes("--registry", reg)
	if got["77"] != "transaction" {
		t.Errorf("a registry's Transaction lock type: %v", got)
	}
	r := sg(t, d, "advisory", "ls")
	if !strings.Contains(r.stdout, "SCOPE") || !strings.Contains(r.stdout, big) {
		t.Errorf("advisory ls table: %s", r)
	}
}

// Item 14: version and --version print the module version, the library
// version and the Go version.
func TestVersionOutput(t *testing.T) {
	t.Parallel()
	r := sg(t, "", "version")
	wantCode(t, r, 0)
	// Built in the workspace: the version is (devel); a go-installed
	// binary prints its module version (see cli's TestReadBuildInfo).
	want := "syncguard (devel) (library (devel), " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH + ")\n"
	if r.stdout != want {
		t.Errorf("version:\n got %q\nwant %q", r.stdout, want)
	}
	r2 := sg(t, "", "--version")
	wantCode(t, r2, 0)
	if r2.stdout != r.stdout {
		t.Errorf("--version %q differs from version %q", r2.stdout, r.stdout)
	}
	m := decode(t, sg(t, "", "version", "--json"))
	if m["goVersion"] != runtime.Version() || m["module"] != "github.com/syncguard/syncguard-go/cmd/syncguard" || m["version"] != "(devel)" {
		t.Errorf("version --json: %v", m)
	}
}

// flock(1) conventions (issue 23, item 9): KEY as the first argument,
// bundled one-letter flags, and -c 'COMMAND LINE' through /bin/sh -c.
func TestRunFlockConventions(t *testing.T) {
	t.Parallel()
	d := dsn(t)

	// KEY positional; flags before and after it.
	k := key(t, "free")
	r := sg(t, d, "run", k, "--", "sh", "-c", `printf %s "$SYNCGUARD_KEY"`)
	wantCode(t, r, 0)
	if r.stdout != k {
		t.Errorf("run KEY -- COMMAND: want the key %q on stdout, got %s", k, r)
	}
	r = sg(t, d, "run", "-q", k, "--ttl", "10", "sh", "-c", "exit 5")
	wantCode(t, r, 5)

	// -c: a command line for /bin/sh -c, with the lock's environment.
	r = sg(t, d, "run", k, "-c", `test -n "$SYNCGUARD_FENCE_NUM" && echo "$SYNCGUARD_KEY" | tr a-z A-Z; exit 7`)
	wantCode(t, r, 7)
	if strings.TrimSpace(r.stdout) != strings.ToUpper(k) {
		t.Errorf("-c: want %q on stdout, got %s", strings.ToUpper(k), r)
	}
	r = sg(t, d, "run", "--key", k, "-c", "true", "extra")
	wantCode(t, r, 64)
	wantOneLineError(t, r, "syncguard: run: InvalidArgument: -c/--command and COMMAND")

	// Bundled flags against a busy key: -nq is -n -q, -nE3 is -n -E 3.
	_, busy, _ := holdKey(t, d)
	for _, args := range [][]string{
		{"run", "-nq", busy, "--", "true"},
		{"run", busy, "-nq", "--", "true"},
		{"run", "-qn", busy, "-c", "true"},
	} {
		r := sg(t, d, args...)
		wantCode(t, r, 75)
		if r.stderr != "" {
			t.Errorf("%q: -q should silence the busy message: %s", args, r)
		}
	}
	r = sg(t, d, "run", "-nE3", busy, "true")
	wantCode(t, r, 3)
	r = sg(t, d, "run", "-qw0.2", busy, "true")
	wantCode(t, r, 75)

	// The old form still works, and COMMAND's own flags are never split.
	r = sg(t, d, "run", "--key", k, "--", "sh", "-c", `printf %s "$1"`, "sh", "-nq")
	wantCode(t, r, 0)
	if r.stdout != "-nq" {
		t.Errorf("COMMAND's -nq must reach it as is: %s", r)
	}
	// No KEY at all.
	r = sg(t, d, "run", "-n")
	wantCode(t, r, 64)
	wantOneLineError(t, r, "syncguard: run: InvalidArgument: no KEY given")
}
