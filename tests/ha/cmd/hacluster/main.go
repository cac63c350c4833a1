// Command hacluster starts a pg_auto_failover formation (a monitor and two
// PostgreSQL nodes on free local ports, as the postgres user when run as
// root), prints how to reach it, and stops it on ^C or SIGTERM:
//
//	cd tests/ha && go run ./cmd/hacluster [-async] [-default-timeouts]
//
// It is the formation the tests use (docs/ha.md), for trying failovers by
// hand: kill -9 the primary's postmaster (its pid is the first line of
// PGDATA/postmaster.pid) or its whole process group, or run
// `pg_autoctl perform switchover` with the environment it prints.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/syncguard/syncguard-go/tests/ha"
)

func main() {
	async := flag.Bool("async", false, "asynchronous replication (replication-quorum false on both nodes)")
	defaults := flag.Bool("default-timeouts", false, "pg_auto_failover's default timeouts instead of the tests' tuned ones")
	flag.Parse()
	opts := ha.Options{Async: *async, Logf: func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }}
	if *defaults {
		opts.Timeouts = ha.DefaultTimeouts
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	f, err := ha.Start(ctx, opts)
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "hacluster:", err)
		os.Exit(1)
	}
	fmt.Printf("formation in %s\n", f.Dir)
	fmt.Printf("timeouts: %s\n", f.Timeouts)
	fmt.Printf("monitor:  %s\n", f.MonitorURI())
	for _, n := range f.Nodes {
		fmt.Printf("%s:    port %d, PGDATA %s\n", n.Name, n.Port, n.PGData)
	}
	fmt.Printf("clients:  %s\n", f.DSN("syncguard"))
	fmt.Printf("pg_autoctl environment: HOME=%s XDG_CONFIG_HOME=%s/config XDG_DATA_HOME=%s/share (run as postgres)\n", f.Dir, f.Dir, f.Dir)
	fmt.Println("^C stops and removes it")
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	<-sig
	if err := f.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "hacluster:", err)
		os.Exit(1)
	}
}
