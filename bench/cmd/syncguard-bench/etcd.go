package main

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/syncguard/syncguard-go/bench/sgbench"
	"github.com/syncguard/syncguard-go/pgxstd"
	sgpq "github.com/syncguard/syncguard-go/pq"
)

// The etcd workload (-workloads etcd): syncguard beside etcd 3.4's
// concurrency.Mutex and Election (sgbench/etcd.go), and the -trace option.

// envTrace passes -trace to the child processes.
const envTrace = "SYNCGUARD_BENCH_TRACE"

var etcdFlags struct {
	bin       string
	duration  time.Duration
	rounds    int
	handOffs  int
	crashes   int
	tracePath string
}

func init() {
	flag.StringVar(&etcdFlags.bin, "etcd-bin", "etcd", "etcd workload: the etcd server binary (Debian's etcd-server, 3.4)")
	flag.DurationVar(&etcdFlags.duration, "etcd-duration", sgbench.DefaultEtcdParams.Duration, "etcd workload: measured time per shape, system and round")
	flag.IntVar(&etcdFlags.rounds, "etcd-rounds", sgbench.DefaultEtcdParams.Rounds, "etcd workload: interleaved rounds")
	flag.IntVar(&etcdFlags.handOffs, "etcd-handoffs", sgbench.DefaultEtcdParams.HandOffs, "etcd workload: hand-offs per system")
	flag.IntVar(&etcdFlags.crashes, "etcd-crashes", sgbench.DefaultEtcdParams.Crashes, "etcd workload: crash takeovers per system")
	flag.StringVar(&etcdFlags.tracePath, "trace", "", "record each attempt of the syncguard waiters of the child processes (W6e, w6scale, etcd) as JSON lines in this file (see sgbench/trace.go)")
}

// childWaitEnv is the WaitEnv of a child process for driver: "pgx", "pq"
// (sql.Open, sgpq.ListenDialect) or "pqc" (lib/pq opened with
// sgpq.NewConnector; syncguard finds the dialect from the driver).
func childWaitEnv(d, dsn string) (*sgbench.WaitEnv, error) {
	var we *sgbench.WaitEnv
	switch d {
	case "pqc":
		we = &sgbench.WaitEnv{Driver: "pq", SQLDriver: "postgres", DSN: dsn, OpenDB: func(dsn string) (*sql.DB, error) {
			c, err := sgpq.NewConnector(dsn)
			if err != nil {
				return nil, err
			}
			return sql.OpenDB(c), nil
		}}
	case "pgx":
		we = &sgbench.WaitEnv{Driver: d, SQLDriver: "pgx", DSN: dsn, Dialect: pgxstd.Dialect}
	case "pq":
		we = &sgbench.WaitEnv{Driver: d, SQLDriver: "postgres", DSN: dsn, Dialect: listenDialect(d, dsn)}
	case "etcd":
		return nil, nil
	default:
		return nil, fmt.Errorf("unknown driver %q", d)
	}
	if p := os.Getenv(envTrace); p != "" {
		we.Trace = sgbench.NewTracer(p)
	}
	return we, nil
}

// serveProcJob is a -w6-proc child: W6e's and w6scale's (ServeProc), or
// the etcd workload's (ServePeer).
func serveProcJob(ctx context.Context, job sgbench.ProcJob, in *bufio.Reader) error {
	we, err := childWaitEnv(job.Driver, job.DSN)
	if err != nil {
		return err
	}
	if sgbench.IsPeerJob(job) {
		err = sgbench.ServePeer(ctx, we, job, in, os.Stdout)
	} else {
		err = sgbench.ServeProc(ctx, we, job, in, os.Stdout)
	}
	if we != nil && we.Trace != nil {
		if ferr := we.Trace.Flush(); err == nil {
			err = ferr
		}
	}
	return err
}

// setupTrace truncates the -trace file and names it to the children.
func setupTrace() error {
	if etcdFlags.tracePath == "" {
		return nil
	}
	if err := os.WriteFile(etcdFlags.tracePath, nil, 0o644); err != nil {
		return err
	}
	return os.Setenv(envTrace, etcdFlags.tracePath)
}

// runEtcd runs the etcd workload against the PostgreSQL at dsn for each
// of drivers.
func runEtcd(ctx context.Context, drivers []string, dsn string, show func(driver string, r any)) error {
	db, err := openPool("pgx", dsn, 2)
	if err != nil {
		return err
	}
	defer db.Close()
	if err := sgbench.SetupTables(ctx, db); err != nil {
		return err
	}
	defer sgbench.DropTables(context.WithoutCancel(ctx), db, sgbench.SGTable, sgbench.SGFenceTable, sgbench.RefTable, sgbench.RefFenceTable, sgbench.FloorTable) //nolint:errcheck
	progress("etcd: starting %s", etcdFlags.bin)
	srv, err := sgbench.StartEtcd(ctx, etcdFlags.bin)
	if err != nil {
		return err
	}
	defer srv.Stop()
	systems := []sgbench.EtcdSystem{{Name: "etcd", Driver: "etcd", DSN: srv.Endpoint}}
	for _, d := range drivers {
		name, cd := "syncguard (pgx)", "pgx"
		switch strings.TrimSpace(d) {
		case "pgx":
		case "pq":
			name, cd = "syncguard (lib/pq, connector)", "pqc"
		default:
			return fmt.Errorf("unknown driver %q", d)
		}
		we, err := childWaitEnv(cd, dsn)
		if err != nil {
			return err
		}
		we.Trace = nil // the parent's holders and leaders are not traced
		systems = append(systems, sgbench.EtcdSystem{Name: name, Driver: cd, DSN: dsn, Env: we})
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	p := sgbench.DefaultEtcdParams
	p.Duration, p.Rounds, p.HandOffs, p.Crashes = etcdFlags.duration, etcdFlags.rounds, etcdFlags.handOffs, etcdFlags.crashes
	if etcdFlags.tracePath != "" {
		tr := sgbench.NewTracer(etcdFlags.tracePath)
		defer tr.Flush() //nolint:errcheck
		p.Sample = func(key string, start, end time.Time) {
			tr.SampleQueue(ctx, db, sgbench.SGTable, key, 10*time.Millisecond, start.Add(-time.Second), end)
		}
	}
	progress("etcd: %d systems x %d shapes x %d rounds x %v, then hand-off, sequential, resign, crash", len(systems), len(sgbench.FairShapes), p.Rounds, p.Duration)
	r, err := sgbench.EtcdCompare(ctx, func(job sgbench.ProcJob) (*sgbench.Child, func(), error) { return spawnKillable(ctx, exe, job) },
		systems, p, fmt.Sprintf("etcd-%d", time.Now().UnixNano()), srv.Version(ctx))
	if err != nil {
		return fmt.Errorf("etcd: %w", err)
	}
	show("etcd", r)
	return nil
}

// spawnKillable is spawnProc that also returns a SIGKILL of the child.
func spawnKillable(ctx context.Context, exe string, job sgbench.ProcJob) (*sgbench.Child, func(), error) {
	cmd := exec.CommandContext(ctx, exe, "-w6-proc")
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, nil, err
	}
	outp, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, err
	}
	b, err := json.Marshal(job)
	if err != nil {
		return nil, nil, err
	}
	if _, err := fmt.Fprintf(in, "%s\n", b); err != nil {
		return nil, nil, err
	}
	kill := func() { cmd.Process.Signal(syscall.SIGKILL) } //nolint:errcheck
	return &sgbench.Child{In: in, Out: bufio.NewReader(outp), Close: cmd.Wait}, kill, nil
}
