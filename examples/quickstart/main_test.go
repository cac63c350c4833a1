package main

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/syncguard/syncguard-go/syncguard"
	"github.com/syncguard/syncguard-go/tests/pgtest"
)

// mainEnv, set to 1, makes the test binary run the program's main instead
// of the tests: TestQuickStart runs the program, as it is, in a process of
// its own.
const mainEnv = "SYNCGUARD_QUICKSTART_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(mainEnv) == "1" {
		main()
		os.Exit(0)
	}
	pgtest.Main(m, pgtest.Options{})
}

// TestQuickStart runs the README's quick start against a fresh database:
// the first run writes the report (its row has no fence yet), the next
// with a greater fence, a run whose fence is older than the row's writes
// nothing and fails, and a run while another instance holds the lock
// gives up after its 5 s of retries and exits 0.
func TestQuickStart(t *testing.T) {
	srv := pgtest.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dsn, err := srv.CreateDatabase(ctx, "quickstart")
	if err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	program := func() (string, error) {
		cmd := exec.CommandContext(ctx, exe)
		cmd.Env = append(os.Environ(), mainEnv+"=1", "DATABASE_URL="+dsn)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	report := func() (fence string) {
		var f sql.NullString
		var built sql.NullTime
		if err := db.QueryRowContext(ctx, `SELECT fence, built_at FROM reports WHERE id = 'nightly'`).Scan(&f, &built); err != nil {
			t.Fatal(err)
		}
		if f.Valid != built.Valid {
			t.Fatalf("report row: fence %v, built_at %v", f, built)
		}
		return f.String
	}

	for _, want := range []string{"000000000000001", "000000000000002"} {
		if out, err := program(); err != nil {
			t.Fatalf("the quick start failed: %v\n%s", err, out)
		}
		if got := report(); got != want {
			t.Fatalf("after a run the report's fence is %q, want %q", got, want)
		}
	}

	// A newer holder wrote meanwhile: this run's write is refused.
	if _, err := db.ExecContext(ctx, `UPDATE reports SET fence = '000000000000900' WHERE id = 'nightly'`); err != nil {
		t.Fatal(err)
	}
	out, err := program()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 || !strings.Contains(out, "stale fence") {
		t.Fatalf("a run with an older fence than the row's: %v, want exit 1 with the stale fence\n%s", err, out)
	}
	if got := report(); got != "000000000000900" {
		t.Fatalf("a refused write changed the fence to %q", got)
	}

	// Another instance holds the lock.
	locks, err := syncguard.New(db, nil)
	if err != nil {
		t.Fatal(err)
	}
	held, err := locks.Acquire(ctx, "jobs:nightly-report", time.Hour)
	if err != nil || !held.OK {
		t.Fatalf("acquire: %+v, %v", held, err)
	}
	defer locks.Release(context.Background(), held.LockID)
	if out, err := program(); err != nil || !strings.Contains(out, "another instance held the lock") {
		t.Fatalf("a run while the lock is held: %v, want exit 0 and the message\n%s", err, out)
	}
	if got := report(); got != "000000000000900" {
		t.Fatalf("a run that did not get the lock changed the fence to %q", got)
	}
}

// TestREADMEShowsTheQuickStart: README.md's quick start is this program,
// byte for byte, so that it cannot drift from code that a test runs.
func TestREADMEShowsTheQuickStart(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := bytes.Cut(readme, []byte("\n## Quick start\n"))
	if !ok {
		t.Fatal(`README.md has no "## Quick start" section`)
	}
	_, block, ok := bytes.Cut(section, []byte("\n```go\n"))
	if !ok {
		t.Fatal("README.md's quick start has no ```go block")
	}
	block, _, ok = bytes.Cut(block, []byte("\n```\n"))
	if !ok {
		t.Fatal("README.md's quick start block is not closed")
	}
	if got, want := string(block)+"\n", string(src); got != want {
		t.Errorf("README.md's quick start differs from examples/quickstart/main.go; copy the file into the block.\nREADME:\n%s", got)
	}
}
