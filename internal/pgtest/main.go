package pgtest

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"testing"
	"time"
)

// startTimeout bounds Start in Main; generous for a first docker pull.
const startTimeout = 5 * time.Minute

var (
	current    *Server
	skipReason = "pgtest.Main was not called from TestMain"
)

func inCI() bool { return os.Getenv("CI") == "true" }

// Main is for TestMain: it starts a server (opts), stores it for Get, runs
// m.Run, stops the server, and exits.
//
// When no database can be found: if env CI == "true" it prints the reasons
// and exits 1 (integration tests must never be silently skipped in CI);
// otherwise it runs m.Run with Get returning nil, so that tests skip (see
// Require) with the printed reason.
func Main(m *testing.M, opts Options) {
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	srv, err := Start(ctx, opts)
	cancel()
	if err != nil {
		skipReason = err.Error()
		if inCI() {
			fmt.Fprintf(os.Stderr, "pgtest: CI=true and no PostgreSQL for the integration tests:\n%v\n", err)
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
// it when CI=true) with the reason.
func Require(t testing.TB) *Server {
	t.Helper()
	if s := Get(); s != nil {
		return s
	}
	if inCI() {
		t.Fatalf("CI=true and no PostgreSQL: %s", SkipReason())
	}
	t.Skip(SkipReason())
	return nil
}
