package ha

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/syncguard/syncguard-go/cmd/syncguard/cli"
	"github.com/syncguard/syncguard-go/conformance"
	"github.com/syncguard/syncguard-go/doctor"
	"github.com/syncguard/syncguard-go/internal/replication"
	"github.com/syncguard/syncguard-go/syncguard"
	"github.com/syncguard/syncguard-go/tests/pgtest"
)

// TestMain doubles as the syncguard CLI (for the doctor checks) when
// SYNCGUARD_HA_RUN_CLI=1, so no binary has to be built.
func TestMain(m *testing.M) {
	if os.Getenv("SYNCGUARD_HA_RUN_CLI") == "1" {
		os.Exit(cli.Main(os.Args[1:]))
	}
	os.Exit(m.Run())
}

// startFormation starts a formation for t, or skips t where
// pg_auto_failover is not installed; in a CI job (conformance.InCI) a missing installation
// fails instead (.ci/run installs it).
func startFormation(t *testing.T, ctx context.Context, opts Options) *Formation {
	t.Helper()
	if err := Available(); err != nil {
		if marker, ok := conformance.InCI(); ok {
			t.Fatalf("a CI job (%s) and no pg_auto_failover: %v", marker, err)
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

// fullPlan is the long form's schedule: the postmaster killed three times
// (each a failover or, when its keeper wins the race, a restart in place),
// the whole primary node killed twice (always a failover), and a planned
// switchover.
var fullPlan = []FaultKind{KillPostmaster, KillNode, KillPostmaster, KillNode, KillPostmaster, Switchover}

// TestFailover runs the failover check on a pg_auto_failover formation
// with a synchronous standby. A long suite: it runs with SYNCGUARD_LONG=1
// (make check) and skips otherwise. By default it is the short form:
// one kill -9 of the primary node (keeper, postmaster and backends: always
// a failover) under load on both adapters, about 40 s. With
// SYNCGUARD_HA=full (make ha) it runs fullPlan, then (subtest
// Asynchronous) the same schedule on a formation with asynchronous
// replication.
func TestFailover(t *testing.T) {
	pgtest.Long(t, "failovers on a pg_auto_failover formation")
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	f := startFormation(t, ctx, Options{})
	faults := []FaultKind{KillNode}
	if full() {
		faults = fullPlan
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
	for i, fr := range rep.Faults {
		if fr.Kind != KillPostmaster && fr.InPlace {
			t.Errorf("fault %d (%s): no failover", i+1, fr.Kind)
		}
	}
	if rep.Pairs == 0 {
		t.Errorf("no hand-offs between holders were checked: the load did not contend")
	}
	if rep.SentinelChecks == 0 {
		t.Errorf("no sentinel lock was verified after a failover")
	}
	checkKindsRan(t, rep)

	primary, err := f.WaitStable(ctx, 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	standby := f.Other(primary)
	t.Run("ReadOnlyStandby", func(t *testing.T) { testReadOnlyStandby(t, ctx, f, standby) })
	t.Run("StalledStandby", func(t *testing.T) { testStalledStandby(t, ctx, f, standby) })
	t.Run("ReplicationChecks", func(t *testing.T) { testReplicationChecks(t, ctx, f, standby) })
	if full() {
		if err := f.Stop(); err != nil {
			t.Error(err)
		}
		t.Run("Asynchronous", testAsynchronous)
	}
}

// testReadOnlyStandby: an acquire sent to a standby (as a client still
// connected to a demoted primary, or one without target_session_attrs,
// would) fails with SQLSTATE 25006 classified as retryable, with a message
// that says why.
func testReadOnlyStandby(t *testing.T, ctx context.Context, f *Formation, standby *Node) {
	for _, drv := range []struct{ adapter, driver string }{{"pq", "postgres"}, {"pgx", "pgx"}} {
		db, err := sql.Open(drv.driver, f.NodeDSN(standby, "ha-standby-"+drv.adapter))
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		b, err := syncguard.New(db, nil)
		if err != nil {
			t.Fatal(err)
		}
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		res, err := b.Acquire(cctx, "ha-readonly", time.Second)
		cancel()
		var se *syncguard.Error
		switch {
		case err == nil:
			t.Errorf("%s: acquire on the standby %s succeeded: %+v", drv.adapter, standby.Name, res)
		case !errors.As(err, &se):
			t.Errorf("%s: untyped error: %v", drv.adapter, err)
		case se.SQLState != "25006" || se.Code != syncguard.ErrServiceUnavailable || !se.Retryable():
			t.Errorf("%s: got %v (code %s, SQLSTATE %q), want ServiceUnavailable with SQLSTATE 25006", drv.adapter, err, se.Code, se.SQLState)
		case !strings.Contains(se.Msg, "standby") || !strings.Contains(se.Msg, "retryable"):
			t.Errorf("%s: the 25006 message must say the server is a standby and that the error is retryable: %q", drv.adapter, se.Msg)
		default:
			t.Logf("%s: %v", drv.adapter, err)
		}
	}
}

// testStalledStandby: while the synchronous standby acknowledges nothing,
// an acquire or extend whose context ends is never reported as done, on
// either adapter. lib/pq answers the context's end with a cancel request,
// and PostgreSQL answers a cancelled wait for synchronous replication with
// success for a commit only the primary has; the library must not pass that
// success on (a failover would lose the lock and its fence).
func testStalledStandby(t *testing.T, ctx context.Context, f *Formation, standby *Node) {
	type pool struct {
		name string
		b    *syncguard.Backend
	}
	var pools []pool
	for _, name := range []string{"pq", "pgx"} {
		db, err := f.OpenPool(name, "ha-stalled-"+name)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		b, err := syncguard.New(db, nil)
		if err != nil {
			t.Fatal(err)
		}
		pools = append(pools, pool{name, b})
	}
	// Locks to extend, taken while replication runs.
	held := map[string]string{}
	for _, p := range pools {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		res, err := p.b.Acquire(cctx, "ha-stalled-extend-"+p.name, time.Minute)
		cancel()
		if err != nil || !res.OK {
			t.Fatalf("%s: acquire before the stall: %+v, %v", p.name, res, err)
		}
		held[p.name] = res.LockID
	}
	resume, err := f.StallStandby(standby)
	if err != nil {
		t.Fatal(err)
	}
	defer resume()
	for _, p := range pools {
		cctx, cancel := context.WithTimeout(ctx, 700*time.Millisecond)
		res, err := p.b.Acquire(cctx, "ha-stalled-"+p.name, time.Minute)
		cancel()
		if err == nil || res.OK {
			t.Errorf("%s: acquire while the synchronous standby is stalled reported %+v, %v: a commit the standby does not have", p.name, res, err)
		} else if c := syncguard.CodeOf(err); c != syncguard.ErrNetworkTimeout {
			t.Errorf("%s: acquire while the standby is stalled: %v, want NetworkTimeout", p.name, err)
		}
		cctx, cancel = context.WithTimeout(ctx, 700*time.Millisecond)
		x, err := p.b.Extend(cctx, held[p.name], 2*time.Minute)
		cancel()
		if err == nil || x.OK {
			t.Errorf("%s: extend while the synchronous standby is stalled reported %+v, %v", p.name, x, err)
		}
	}
}

// testReplicationChecks: replication.Read/Findings, `syncguard doctor`
// and doctor.Check on the synchronous formation, on its
// standby, and after the standby is made asynchronous.
func testReplicationChecks(t *testing.T, ctx context.Context, f *Formation, standby *Node) {
	db, err := sql.Open("pgx", f.DSN("ha-checks"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	findings := func() []replication.Finding {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		st, err := replication.Read(cctx, db)
		if err != nil {
			t.Fatal(err)
		}
		return st.Findings()
	}
	expect := func(what string, fs []replication.Finding, check string, sev replication.Severity, mention string) {
		t.Helper()
		for _, f := range fs {
			if f.Check == check {
				if f.Severity != sev || !strings.Contains(f.Detail+" "+f.Fix, mention) {
					t.Errorf("%s: %s is %s (%s; fix: %s), want %s mentioning %q", what, check, f.Severity, f.Detail, f.Fix, sev, mention)
				}
				return
			}
		}
		t.Errorf("%s: no %s finding in %+v", what, check, fs)
	}
	standbyName := "pgautofailover_standby_" + strings.TrimPrefix(standby.Name, "node")

	sync := findings()
	expect("synchronous formation", sync, replication.CheckStandbys, replication.OK, standbyName)
	expect("synchronous formation", sync, replication.CheckCommit, replication.OK, "synchronous_commit = on")
	doc := runDoctor(t, f.DSN("ha-doctor"))
	expectDoctor(t, "doctor on the synchronous formation", doc, replication.CheckStandbys, "ok", standbyName)
	expectDoctor(t, "doctor on the standby", runDoctor(t, f.NodeDSN(standby, "ha-doctor")), "primary", "fail", "target_session_attrs=read-write")

	if err := f.SetReplicationQuorum(ctx, standby, false); err != nil {
		t.Fatal(err)
	}
	var async []replication.Finding
	err = f.waitFor(ctx, "synchronous_standby_names cleared", time.Minute, func(ctx context.Context) (bool, error) {
		async = findings()
		for _, f := range async {
			if f.Check == replication.CheckStandbys {
				return f.Severity != replication.OK, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("%v (findings %+v)", err, async)
	}
	expect("asynchronous standby", async, replication.CheckStandbys, replication.Warn, "synchronous_standby_names")
	expectDoctor(t, "doctor with an asynchronous standby", runDoctor(t, f.DSN("ha-doctor")), replication.CheckStandbys, "warn", "synchronous_standby_names")
	// The library's own check, as a smoke test after a deployment runs it.
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	rep, err := doctor.Check(cctx, db, nil)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	var lib []doctorCheck
	for _, f := range rep.Findings {
		lib = append(lib, doctorCheck{f.Check, f.Status, f.Detail, f.Fix})
	}
	expectDoctor(t, "doctor.Check with an asynchronous standby", lib, replication.CheckStandbys, "warn", "synchronous_standby_names")
}

type doctorCheck struct{ Check, Status, Detail, Fix string }

// runDoctor runs `syncguard doctor --json` (this test binary as the CLI).
func runDoctor(t *testing.T, dsn string) []doctorCheck {
	t.Helper()
	cmd := exec.Command(os.Args[0], "doctor", "--json", "--dsn", dsn)
	cmd.Env = append(os.Environ(), "SYNCGUARD_HA_RUN_CLI=1")
	out, err := cmd.Output()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("doctor: %v", err)
	}
	var rep struct{ Checks []doctorCheck }
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("doctor output: %v\n%s", err, out)
	}
	return rep.Checks
}

func expectDoctor(t *testing.T, what string, checks []doctorCheck, check, status, mention string) {
	t.Helper()
	for _, c := range checks {
		if c.Check == check {
			if c.Status != status || !strings.Contains(c.Detail+" "+c.Fix, mention) {
				t.Errorf("%s: %s is %s (%s; fix: %s), want %s mentioning %q", what, check, c.Status, c.Detail, c.Fix, status, mention)
			} else {
				t.Logf("%s: %s %s: %s", what, c.Status, c.Check, c.Detail)
			}
			return
		}
	}
	t.Errorf("%s: no %q check in %+v", what, check, checks)
}

// testAsynchronous is the same run with asynchronous replication: it
// shows which guarantees break when the commit that acknowledges an acquire
// does not wait for the standby. Only the long form (make ha) runs it; it
// reports the breakage and fails only if the run itself could not be made.
func testAsynchronous(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	f := startFormation(t, ctx, Options{Async: true})
	rep, err := Run(ctx, f, RunOptions{Faults: fullPlan, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("failover report (asynchronous replication: the guarantees below are NOT expected to hold):\n%s", rep.Summary())
	for _, v := range rep.Violations {
		t.Logf("expected with async replication:\n%s", v)
	}
}
