package pgtest

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"testing"
	"time"

	"github.com/syncguard/syncguard-go/conformance"
)

// startTimeout bounds Start in Main; generous for a first docker pull.
const startTimeout = 5 * time.Minute

var (
	current    *Server
	skipReason = "pgtest.Main was not called from TestMain"
)

// InCI reports whether this is a CI job, by conformance.InCI's rule (CI=true,
// CI=1, GITHUB_ACTIONS, GITLAB_CI, JENKINS_URL, ...; CI=false says it is
// not), and the variable that says so. In a CI job a missing database or
// PgBouncer fails the tests instead of skipping them.
func InCI() (marker string, ok bool) { return conformance.InCI() }

// Main is for TestMain: it starts a server (opts), stores it for Get, runs
// m.Run, stops the server, and exits.
//
// When no database can be found: in a CI job (InCI) it prints the reasons
// and exits 1 (integration tests must never be silently skipped in CI);
// otherwise it runs m.Run with Get returning nil, so that tests skip (see
// Require) with the printed reason.
func Main(m *testing.M, opts Options) {
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	srv, err := Start(ctx, opts)
	cancel()
	if err != nil {
		skipReason = err.Error()
		if marker, ok := InCI(); ok {
			fmt.Fprintf(os.Stderr, "pgtest: a CI job (%s) and no PostgreSQL for the integration tests:\n%v\n", marker, err)
			os.Exit(1)
		}
		fmt.Fprintf(os.Stderr, "pgtest: integration tests will be skipped:\n%v\n", err)
		os.Exit(m.Run())
	}
	current, skipReason = srv, ""

	// Stop the server on ^C or SIGTERM too. (A go test timeout panics the
	// process and leaves a local cluster behind in the temp dir.)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() {
		s := <-sig
		fmt.Fprintf(os.Stderr, "pgtest: %v: stopping PostgreSQL\n", s)
		_ = srv.Stop()
		os.Exit(1)
	}()

	code := m.Run()
	signal.Stop(sig)
	if err := srv.Stop(); err != nil {
		fmt.Fprintf(os.Stderr, "pgtest: %v\n", err)
	}
	os.Exit(code)
}

// Get returns the server Main started, or nil if none.
func Get() *Server { return current }

// SkipReason says why Get returns nil ("" when it does not).
func SkipReason() string { return skipReason }

// Require returns Get(), or, when there is no server, skips the test (fails
// it in a CI job, see InCI) with the reason.
func Require(t testing.TB) *Server {
	t.Helper()
	if s := Get(); s != nil {
		return s
	}
	if marker, ok := InCI(); ok {
		t.Fatalf("a CI job (%s) and no PostgreSQL: %s", marker, SkipReason())
	}
	t.Skip(SkipReason())
	return nil
}
