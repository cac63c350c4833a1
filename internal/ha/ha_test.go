package ha

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"
)

// startFormation starts a formation for t, or skips t where
// pg_auto_failover is not installed; with CI=true a missing installation
// fails instead (.ci/run installs it).
func startFormation(t *testing.T, ctx context.Context, opts Options) *Formation {
	t.Helper()
	if err := Available(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true and no pg_auto_failover: %v", err)
		}
		t.Skipf("no pg_auto_failover: %v", err)
	}
	opts.Logf = t.Logf
	var f *Formation
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		if f, err = Start(ctx, opts); err == nil || errors.Is(err, ErrUnavailable) || ctx.Err() != nil {
			break
		}
		if !strings.Contains(err.Error(), "already in use") && !strings.Contains(err.Error(), "could not create any TCP/IP sockets") {
			break
		}
		t.Logf("port taken, retrying: %v", err)
	}
	if err != nil {
		t.Fatalf("starting the formation: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			evs, _ := f.Events(context.Background(), 40)
			t.Logf("monitor events:\n%s", strings.Join(evs, "\n"))
			t.Logf("logs:%s", f.LogTails(40))
		}
		if err := f.Stop(); err != nil {
			t.Errorf("stopping the formation: %v", err)
		}
	})
	return f
}

// full reports whether the long form was asked for (make ha).
func full() bool { return os.Getenv("SYNCGUARD_HA") == "full" }

// TestFailover runs the failover check on a pg_auto_failover formation
// with a synchronous standby. By default (make test) it is the short form:
// one kill -9 of the primary's postmaster under load on both adapters.
// With SYNCGUARD_HA=full (make ha) it is the long form: three postmaster
// kills, one whole-node kill and a planned switchover.
func TestFailover(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	f := startFormation(t, ctx, Options{})
	faults := []FaultKind{KillPostmaster}
	if full() {
		faults = []FaultKind{KillPostmaster, KillPostmaster, KillNode, KillPostmaster, Switchover}
	}
	rep, err := Run(ctx, f, RunOptions{Faults: faults, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("failover report:\n%s", rep.Summary())
	for _, v := range rep.Violations {
		t.Errorf("%s", v)
	}
	for _, a := range []string{"pq", "pgx"} {
		if rep.Acquires(a) == 0 {
			t.Errorf("%s acquired nothing: the load did not run", a)
		}
		for i, fr := range rep.Faults {
			if fr.FirstAcquire[a] < 0 {
				t.Errorf("fault %d: %s never acquired after it", i+1, a)
			}
		}
	}
	if rep.Pairs == 0 {
		t.Errorf("no hand-offs between holders were checked: the load did not contend")
	}
	if rep.SentinelChecks == 0 {
		t.Errorf("no sentinel lock was verified after a failover")
	}
}
