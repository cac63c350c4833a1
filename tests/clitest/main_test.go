//go:build unix

// The tests build the syncguard binary once and drive it as a user would,
// against a throwaway PostgreSQL (tests/pgtest), or SYNCGUARD_TEST_DSN.
package clitest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"

	_ "github.com/syncguard/syncguard-go/pgxstd"
	"github.com/syncguard/syncguard-go/syncguard"
	"github.com/syncguard/syncguard-go/tests/pgtest"
)

// bin is the syncguard binary built by TestMain.
var bin string

const binDirPrefix = "syncguard-cli-test-"

func TestMain(m *testing.M) {
	dir, err := buildBinary()
	if err != nil {
		fmt.Fprintf(os.Stderr, "building syncguard: %v\n", err)
		os.Exit(1)
	}
	bin = filepath.Join(dir, "syncguard")
	// pgtest.Main exits the process, so dir cannot be removed afterwards;
	// buildBinary removes the directories of earlier runs that are gone.
	pgtest.Main(m, pgtest.Options{Fsync: true})
}

// buildBinary builds the command (with -race when the tests run with it)
// into a fresh temp directory named after this process, and removes those
// left by earlier test processes that no longer run.
func buildBinary() (string, error) {
	old, _ := filepath.Glob(filepath.Join(os.TempDir(), binDirPrefix+"*"))
	for _, d := range old {
		pidText, _, _ := strings.Cut(strings.TrimPrefix(filepath.Base(d), binDirPrefix), "-")
		if pid, err := strconv.Atoi(pidText); err == nil && syscall.Kill(pid, 0) == syscall.ESRCH {
			os.RemoveAll(d)
		}
	}
	dir, err := os.MkdirTemp("", fmt.Sprintf("%s%d-", binDirPrefix, os.Getpid()))
	if err != nil {
		return "", err
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	args := []string{"build", "-o", filepath.Join(dir, "syncguard")}
	if raceEnabled {
		args = append(args, "-race")
	}
	cmd := exec.Command(goTool, append(args, "github.com/syncguard/syncguard-go/cmd/syncguard")...)
	if out, err := cmd.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return "", fmt.Errorf("%v\n%s", err, out)
	}
	return dir, nil
}

var (
	dbOnce sync.Once
	dbDSN  string
	dbErr  error
)

// dsn returns the DSN of the tests' database, with the schema set up.
func dsn(t *testing.T) string {
	t.Helper()
	srv := pgtest.Require(t)
	dbOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if dbDSN, dbErr = srv.CreateDatabase(ctx, "syncguard_cli"); dbErr != nil {
			return
		}
		db, err := sql.Open("pgx", dbDSN)
		if err != nil {
			dbErr = err
			return
		}
		defer db.Close()
		dbErr = syncguard.SetupSchema(ctx, db, nil)
	})
	if dbErr != nil {
		t.Fatal(dbErr)
	}
	return dbDSN
}

// freshDB creates an empty database of its own for t and returns its
// name and DSN.
func freshDB(t *testing.T, prefix string) (string, string) {
	t.Helper()
	srv := pgtest.Require(t)
	name := fmt.Sprintf("%s_%d_%d", prefix, os.Getpid(), uniq())
	d, err := srv.CreateDatabase(ctxT(t), name)
	if err != nil {
		t.Fatal(err)
	}
	return name, d
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func openDB(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func backend(t *testing.T, db *sql.DB, cfg *syncguard.Config) *syncguard.Backend {
	t.Helper()
	b, err := syncguard.New(db, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

var seq atomic.Int64

// uniq is unique in this test process, so that tests also pass with -count.
func uniq() int64 { return seq.Add(1) }

// key returns a key unique to this run of the test.
func key(t *testing.T, suffix string) string {
	return fmt.Sprintf("cli-test:%s:%s:%d", t.Name(), suffix, uniq())
}

// env is the environment of the binary: no PG* or DATABASE_URL from the
// developer's shell, and DATABASE_URL set to dsn unless dsn is empty.
func env(dsn string, extra ...string) []string {
	var out []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "PG") || strings.HasPrefix(kv, "DATABASE_URL=") || strings.HasPrefix(kv, "SYNCGUARD_") {
			continue
		}
		out = append(out, kv)
	}
	if dsn != "" {
		out = append(out, "DATABASE_URL="+dsn)
	}
	return append(append(out, noExitSleep()), extra...)
}

// noExitSleep is GORACE for the binaries the tests run: a -race binary
// that exits 0 first sleeps GORACE's atexit_sleep_ms, 1 s by default (to
// let other goroutines report races), so every run (syncguard and its
// supervisor) cost 2 s of waiting. Races found are still reported, and
// fail the exit status, without the sleep.
func noExitSleep() string {
	g := os.Getenv("GORACE")
	if strings.Contains(g, "atexit_sleep_ms") {
		return "GORACE=" + g
	}
	return "GORACE=" + strings.TrimSpace(g+" atexit_sleep_ms=0")
}

type result struct {
	code           int
	stdout, stderr string
	elapsed        time.Duration
}

func (r result) String() string {
	return fmt.Sprintf("exit %d after %v\nstdout:\n%s\nstderr:\n%s", r.code, r.elapsed.Round(time.Millisecond), r.stdout, r.stderr)
}

// proc is a started syncguard process.
type proc struct {
	cmd            *exec.Cmd
	stdout, stderr pgtest.Buffer
	start          time.Time
	done           chan struct{}
	res            result
}

// waitOutput waits until the process's stderr (or stdout) contains want,
// and fails when it exits without.
func (p *proc) waitStderr(t *testing.T, want string) {
	t.Helper()
	p.waitFor(t, want, &p.stderr)
}

func (p *proc) waitStdout(t *testing.T, want string) {
	t.Helper()
	p.waitFor(t, want, &p.stdout)
}

func (p *proc) waitFor(t *testing.T, want string, b *pgtest.Buffer) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !strings.Contains(b.String(), want) {
		select {
		case <-p.done:
			if strings.Contains(b.String(), want) {
				return
			}
			t.Fatalf("syncguard exited without printing %q\n%s", want, p.res)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("syncguard did not print %q within 2m\nstdout:\n%s\nstderr:\n%s", want, p.stdout.String(), b.String())
		}
	}
}

func start(t *testing.T, environ []string, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(bin, args...), done: make(chan struct{})}
	p.cmd.Env = environ
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	p.begin(t)
	return p
}

// begin starts p.cmd and waits for it in the background; the test's
// cleanup kills it if it still runs.
func (p *proc) begin(t *testing.T) {
	t.Helper()
	p.start = time.Now()
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		err := p.cmd.Wait()
		p.res = result{code: p.cmd.ProcessState.ExitCode(), stdout: p.stdout.String(), stderr: p.stderr.String(), elapsed: time.Since(p.start)}
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			p.res.code = -1
			p.res.stderr += "\n(wait: " + err.Error() + ")"
		}
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Signal(syscall.SIGCONT)
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
}

func (p *proc) wait(t *testing.T, timeout time.Duration) result {
	t.Helper()
	select {
	case <-p.done:
		return p.res
	case <-time.After(timeout):
		_ = p.cmd.Process.Signal(syscall.SIGQUIT)
		<-p.done
		t.Fatalf("syncguard did not exit within %v\n%s", timeout, p.res)
		return result{}
	}
}

// sg runs syncguard with DATABASE_URL=dsn and waits for it.
func sg(t *testing.T, dsn string, args ...string) result {
	t.Helper()
	return start(t, env(dsn), args...).wait(t, time.Minute)
}

func waitFile(t *testing.T, path string, timeout time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if b, err := os.ReadFile(path); err == nil && len(b) > 0 {
			return string(b)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not appear within %v", path, timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func wantCode(t *testing.T, r result, code int) {
	t.Helper()
	if r.code != code {
		t.Fatalf("want exit %d, got %s", code, r)
	}
}

// wantOneLineError checks the error format: one line on stderr,
// "syncguard: CMD: CODE: ...".
func wantOneLineError(t *testing.T, r result, prefix string) {
	t.Helper()
	lines := strings.Split(strings.TrimRight(r.stderr, "\n"), "\n")
	if len(lines) != 1 || !strings.HasPrefix(lines[0], prefix) {
		t.Fatalf("want one stderr line starting %q, got %s", prefix, r)
	}
}

func assertFree(t *testing.T, b *syncguard.Backend, key string) {
	t.Helper()
	held, err := b.IsLocked(ctxT(t), key)
	if err != nil {
		t.Fatal(err)
	}
	if held {
		t.Fatalf("%q is still held: the lock was not released", key)
	}
}

func TestUsageErrors(t *testing.T) {
	t.Parallel()
	d := dsn(t)
	for _, args := range [][]string{
		{},
		{"frobnicate"},
		{"run", "--", "true"},
		{"run", "--key", "k"},
		{"run", "--key", "k", "--ttl", "10ms", "--", "true"},
		{"run", "--key", "k", "--wait", "-1s", "--", "true"},
		{"run", "--key", "k", "--bogus", "--", "true"},
		{"run", "--key", "k", "--fence-env", "A=B", "--", "true"},
		{"run", "--key", "k", "--table", "no-such-name!", "--", "true"},
		{"status"},
		{"status", "a", "b"},
		{"status", ""},
		{"ls", "extra"},
		{"advisory"},
	} {
		r := sg(t, d, args...)
		if r.code != 64 {
			t.Errorf("%q: want exit 64, got %s", args, r)
			continue
		}
		if len(args) > 0 && !strings.HasPrefix(r.stderr, "syncguard: ") || strings.Count(strings.TrimSpace(r.stderr), "\n") > 0 && len(args) > 0 {
			t.Errorf("%q: want a one-line error, got %s", args, r)
		}
	}
	for _, h := range [][]string{{"-h"}, {"--help"}, {"help"}} {
		r := sg(t, d, h...)
		wantCode(t, r, 0)
		if !strings.Contains(r.stdout, "syncguard run KEY") {
			t.Errorf("%q: no usage on stdout: %s", h, r)
		}
	}
	r := sg(t, d, "help", "run")
	wantCode(t, r, 0)
	if !strings.Contains(r.stdout, "--fence-env") {
		t.Errorf("help run lacks its flags: %s", r)
	}
}

func TestUnavailable(t *testing.T) {
	t.Parallel()
	srv := pgtest.Require(t)
	r := sg(t, "", "--dsn", srv.RefusedDSN(), "status", "some-key")
	wantCode(t, r, 69)
	wantOneLineError(t, r, "syncguard: status: ServiceUnavailable: ")
	r = sg(t, "", "run", "--dsn", srv.RefusedDSN(), "--key", "k", "--wait", "0", "--", "true")
	wantCode(t, r, 69)
	wantOneLineError(t, r, "syncguard: run: ServiceUnavailable: ")
}

func TestPGEnvironment(t *testing.T) {
	t.Parallel()
	srv := pgtest.Require(t)
	if srv.Kind == pgtest.KindEnv {
		t.Skip("the PG* form of SYNCGUARD_TEST_DSN is not known")
	}
	dsn(t) // creates the database syncguard_cli with the schema
	p := start(t, env("", "PGHOST="+srv.Host, "PGPORT="+strconv.Itoa(srv.Port), "PGUSER=postgres",
		"PGDATABASE=syncguard_cli", "PGSSLMODE=disable"), "status", "--json", key(t, "k"))
	r := p.wait(t, time.Minute)
	wantCode(t, r, 1) // free
	if m := decode(t, r); m["held"] != false {
		t.Errorf("status: %v", m)
	}
}

func TestStatus(t *testing.T) {
	t.Parallel()
	d := dsn(t)
	b := backend(t, openDB(t, d), nil)
	k := key(t, "k")

	r := sg(t, d, "status", k)
	wantCode(t, r, 1) // free
	if !strings.Contains(r.stdout, "free") || !strings.Contains(r.stdout, "never acquired") {
		t.Errorf("status of a new key: %s", r)
	}
	res, err := b.Acquire(ctxT(t), k, time.Minute)
	if err != nil || !res.OK {
		t.Fatalf("acquire: %+v %v", res, err)
	}
	r = sg(t, d, "status", k)
	wantCode(t, r, 0)
	hash := syncguard.HashKey(res.LockID)
	for _, w := range []string{"held", string(res.Fence), "lock#" + hash, "in "} {
		if !strings.Contains(r.stdout, w) {
			t.Errorf("status lacks %q: %s", w, r)
		}
	}
	if strings.Contains(r.stdout, res.LockID) {
		t.Errorf("status shows the raw lockId without --raw: %s", r)
	}
	r = sg(t, d, "status", k, "--raw")
	if !strings.Contains(r.stdout, res.LockID) || !strings.Contains(r.stdout, "sensitive") {
		t.Errorf("status --raw: %s", r)
	}
	b.Release(ctxT(t), res.LockID)
	r = sg(t, d, "status", k)
	wantCode(t, r, 1)
	if !strings.Contains(r.stdout, "free") || !strings.Contains(r.stdout, string(res.Fence)) {
		t.Errorf("status after release should show the last fence: %s", r)
	}
}

func TestMissingSchema(t *testing.T) {
	t.Parallel()
	_, d := freshDB(t, "cli_noschema")
	r := sg(t, d, "status", "k")
	wantCode(t, r, 70)
	wantOneLineError(t, r, "syncguard: status: Internal: lock table missing: run 'syncguard setup' first")
	// The command's own way, not the Go API's.
	for _, goAPI := range []string{"SetupSchema", "SchemaSQL"} {
		if strings.Contains(r.stderr, goAPI) {
			t.Errorf("the error names the Go API (%s) to a user of the command: %s", goAPI, r)
		}
	}
	r = sg(t, d, "run", "--key", "k", "--", "true")
	wantCode(t, r, 70)
}

// A server that accepts connections and never answers: --timeout bounds
// every command, and run holds nothing.
func TestSilentServer(t *testing.T) {
	t.Parallel()
	pgtest.Require(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	silent := fmt.Sprintf("postgres://postgres@%s/postgres?sslmode=disable", l.Addr())
	marker := filepath.Join(t.TempDir(), "ran")
	for _, args := range [][]string{
		// Attempts that --timeout ends (before --wait does) make an outage;
		// one that the end of --wait cuts would be "no answer yet" (75).
		{"run", "--key", "k", "--wait", "3s", "--", "touch", marker},
		{"status", "k"},
		{"ls"},
	} {
		r := sg(t, "", append([]string{"--dsn", silent, "--timeout", "1s"}, args...)...)
		wantCode(t, r, 69)
		if r.elapsed > 45*time.Second { // without the bound it would hang
			t.Errorf("%q took %v with --timeout 1s", args, r.elapsed)
		}
		wantFinalError(t, r, "syncguard: "+args[0]+": ")
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the command ran")
	}
}

// holdKey takes a fresh key for the test's duration, as another holder
// would, and releases it when the test ends.
func holdKey(t *testing.T, d string) (*syncguard.Backend, string, syncguard.AcquireResult) {
	t.Helper()
	b := backend(t, openDB(t, d), nil)
	k := key(t, "k")
	res, err := b.Acquire(ctxT(t), k, time.Minute)
	if err != nil || !res.OK {
		t.Fatalf("acquire: %+v %v", res, err)
	}
	t.Cleanup(func() { b.Release(context.Background(), res.LockID) })
	return b, k, res
}
