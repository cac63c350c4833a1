// Command syncguard-bench measures what syncguard adds to PostgreSQL's own
// cost, for both database/sql adapters (lib/pq and pgx/v5/stdlib), against
// baselines measured in the same run on the same pool: the durable floor
// (autocommitted single-row writes), the spec's reference transactions, and
// a SELECT 1 round trip.
//
// It uses the server named by SYNCGUARD_BENCH_DSN, or else starts a
// throwaway PostgreSQL with fsync on (tests/pgtest). Human-readable tables
// go to stdout, each followed by one JSON line (lines starting with '{')
// summarizing that workload; -json also writes the JSON lines to a file.
//
// See docs/performance.md for the method and the published results.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
	_ "github.com/lib/pq"

	"github.com/syncguard/syncguard-go/bench/sgbench"
	"github.com/syncguard/syncguard-go/driver"
	"github.com/syncguard/syncguard-go/pgxstd"
	sgpq "github.com/syncguard/syncguard-go/pq"
	"github.com/syncguard/syncguard-go/tests/pgtest/tcpproxy"
)

// EnvDSN names the variable with the server to benchmark against.
const EnvDSN = "SYNCGUARD_BENCH_DSN"

var sqlDriver = map[string]string{"pq": "postgres", "pgx": "pgx"}

type options struct {
	drivers       string
	pairs         int
	workers       int
	keys          int
	duration      time.Duration
	auxDuration   time.Duration
	rounds        int
	storage       int
	rtOps         int
	allocOps      int
	walAttempts   int
	anatomyOps    int
	freshSessions int
	hotAlt        int
	jsonPath      string
	mdPath        string
	workloads     string
	w6Duration    time.Duration
	w6Rounds      int
	w6cIters      int
	w6dKeys       int
	w6dRounds     int
	w6Variants    string
	w6cChild      string
	w6Bouncer     bool
	w6eDuration   time.Duration
	w6eDelays     string
	w6eShapes     string
	scaleProcs    string
	scaleDur      time.Duration
	scaleOwn      int
	scaleHot      int
	procChild     bool
	fleet         fleetOptions
}

// listenDialect returns the adapter's dialect that can LISTEN.
func listenDialect(d, dsn string) driver.Dialect {
	if d == "pq" {
		return sgpq.ListenDialect(dsn)
	}
	return pgxstd.Dialect
}

func main() {
	var o options
	flag.StringVar(&o.drivers, "drivers", "pq,pgx", "comma-separated adapters to run: pq, pgx")
	flag.IntVar(&o.pairs, "pairs", 2000, "workload 1: acquire+release pairs per variant")
	flag.IntVar(&o.workers, "workers", 8, "workers of workloads 2-5, and the pool size of every workload")
	flag.IntVar(&o.keys, "keys", 100, "workload 2: key space; workload 5: held locks")
	flag.DurationVar(&o.duration, "duration", 5*time.Second, "workloads 2 and 3: measured time per variant; w44: per phase")
	flag.DurationVar(&o.auxDuration, "aux-duration", 2*time.Second, "workloads 4 and 5: measured time per variant")
	flag.IntVar(&o.rounds, "rounds", 5, "split each variant's share into this many rounds, interleaved with the other variants")
	flag.IntVar(&o.storage, "storage-locks", 100000, "live locks for the storage measurement (0 skips it)")
	flag.IntVar(&o.rtOps, "rt-ops", 100, "operations per kind in the round-trip count")
	flag.IntVar(&o.allocOps, "alloc-ops", 300, "operations per kind in the allocation count")
	flag.IntVar(&o.walAttempts, "wal-attempts", 300, "failed attempts in the WAL probe")
	flag.IntVar(&o.anatomyOps, "anatomy-ops", 1000, "iterations of the anatomy (cost breakdown) measurement")
	flag.IntVar(&o.freshSessions, "fresh-sessions", 40, "fresh: new connections per variant")
	flag.IntVar(&o.hotAlt, "hot-workers-alt", 2, "workload 3 again with this many workers (as many as the cores), for 2/5 of -duration; 0 skips")
	flag.StringVar(&o.jsonPath, "json", "", "also write the JSON summary lines to this file")
	flag.StringVar(&o.mdPath, "markdown", "", "also write the results as Markdown tables to this file")
	flag.StringVar(&o.workloads, "workloads", "w1,w2,w3,w4,w5,wal,anatomy,fresh,allocs,rt,storage,w6a,w6b,w6c,w6d,w6e,w6scale", "what to run (also w7a,w7b,w7c,w7d: waiting at fleet scale, make bench-fleet; w44: short waits; etcd: beside etcd 3.4)")
	flag.DurationVar(&o.w6Duration, "w6-duration", 10*time.Second, "workloads 6a and 6b: measured time per variant")
	flag.IntVar(&o.w6Rounds, "w6-rounds", 5, "workloads 6a and 6b: interleaved rounds")
	flag.IntVar(&o.w6cIters, "w6c-iterations", 100, "workload 6c: hand-offs per variant")
	flag.IntVar(&o.w6dKeys, "w6d-keys", 10, "workload 6d: crashed holders (keys) per round")
	flag.IntVar(&o.w6dRounds, "w6d-rounds", 2, "workload 6d: rounds")
	flag.StringVar(&o.w6Variants, "w6-variants", strings.Join(sgbench.WaitVariants, ","), "workload 6: the lockers to compare")
	flag.StringVar(&o.w6cChild, "w6c-child", "", "internal: run as the waiter process of workload 6c with this variant")
	flag.BoolVar(&o.w6Bouncer, "w6-pgbouncer", true, "workloads 6a and 6b also through PgBouncer in transaction mode (throwaway server only)")
	flag.DurationVar(&o.w6eDuration, "w6e-duration", 8*time.Second, "workload 6e: measured time per shape and delay")
	flag.StringVar(&o.w6eDelays, "w6e-delays", "5ms,10ms", "workload 6e: the far processes' added latency, each way")
	flag.StringVar(&o.w6eShapes, "w6e-shapes", "", "workload 6e: shapes name:workers-per-process:hold:pause,... (default W6a's and W6b's: w6a:2:10ms:20ms,w6b:1:50ms:50ms)")
	flag.StringVar(&o.scaleProcs, "scale-procs", "5,50", "w6scale: the process counts to compare (the first and last are compared)")
	flag.DurationVar(&o.scaleDur, "scale-duration", 10*time.Second, "w6scale: measured time per process count")
	flag.IntVar(&o.scaleOwn, "scale-own-keys", sgbench.DefaultScaleShape.OwnKeys, "w6scale: contended keys of its own per process (0: the hot key only)")
	flag.IntVar(&o.scaleHot, "scale-hot-workers", sgbench.DefaultScaleShape.HotWorkers, "w6scale: workers per process on the shared hot key (0: own keys only)")
	o.fleet.register()
	flag.BoolVar(&o.procChild, "w6-proc", false, "internal: run as a child process of workload 6e or w6scale (the job on stdin)")
	flag.Parse()
	if o.procChild {
		if err := runProcChild(); err != nil {
			fmt.Fprintln(os.Stderr, "syncguard-bench child:", err)
			os.Exit(1)
		}
		return
	}
	if o.w6cChild != "" {
		if err := runChild(o.w6cChild); err != nil {
			fmt.Fprintln(os.Stderr, "syncguard-bench child:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "syncguard-bench:", err)
		os.Exit(1)
	}
}

func run(o options) error {
	if o.rounds < 1 || o.workers < 1 || o.keys < 1 || o.pairs < o.rounds {
		return errors.New("rounds, workers and keys must be >= 1 and pairs >= rounds")
	}
	want := map[string]bool{}
	for _, w := range strings.Split(o.workloads, ",") {
		want[strings.TrimSpace(w)] = true
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	var jsonOut io.Writer = io.Discard
	if o.jsonPath != "" {
		f, err := os.Create(o.jsonPath)
		if err != nil {
			return err
		}
		defer f.Close()
		jsonOut = f
	}
	var results []any
	emit := func(v any) {
		results = append(results, v)
		b, err := json.Marshal(v)
		if err != nil {
			panic(err)
		}
		fmt.Fprintf(out, "%s\n", b)
		fmt.Fprintf(jsonOut, "%s\n", b)
		out.Flush()
	}

	if err := setupTrace(); err != nil { // etcd.go
		return err
	}
	dsn, host, port, cleanup, err := server(ctx, o.serverMaxConnections(want))
	if err != nil {
		return err
	}
	defer cleanup()

	begin := time.Now()
	envInfo, err := describe(ctx, dsn)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "syncguard-bench: %s, %d CPUs; PostgreSQL %s (%s); fsync=%s synchronous_commit=%s wal_sync_method=%s full_page_writes=%s shared_buffers=%s\n",
		envInfo["cpu"], runtime.NumCPU(), envInfo["server_version"], envInfo["server_kind"], envInfo["fsync"], envInfo["synchronous_commit"],
		envInfo["wal_sync_method"], envInfo["full_page_writes"], envInfo["shared_buffers"])
	fmt.Fprintf(out, "load average at start: %s (other processes on this machine skew absolute numbers; the ratios are measured interleaved in one run)\n", loadavg())
	if envInfo["fsync"] != "on" || envInfo["synchronous_commit"] != "on" {
		fmt.Fprintln(out, "WARNING: fsync or synchronous_commit is off: the durable floor is not durable, ratios to it are meaningless")
	}
	emit(map[string]any{"bench": "syncguard", "workload": "environment", "info": envInfo, "go": runtime.Version(),
		"params": map[string]any{"pairs": o.pairs, "workers": o.workers, "keys": o.keys, "duration_s": o.duration.Seconds(),
			"aux_duration_s": o.auxDuration.Seconds(), "rounds": o.rounds}})
	out.Flush()

	var allTargets []map[string]any
	addTargets := func(driver string, ts []sgbench.Target) {
		for _, t := range ts {
			allTargets = append(allTargets, map[string]any{"driver": driver, "name": t.Name, "value": t.Value, "goal": t.Goal, "met": t.Met})
		}
	}
	// show prints a driver's result, emits it and collects its targets.
	show := func(driver string, r any) {
		sgbench.Print(out, r)
		emit(r)
		addTargets(driver, sgbench.TargetsOf(r))
	}
	drivers := strings.Split(o.drivers, ",")
	for di, d := range drivers {
		d = strings.TrimSpace(d)
		name, ok := sqlDriver[d]
		if !ok {
			return fmt.Errorf("unknown driver %q (want pq or pgx)", d)
		}
		progress("[%s] starting (%.0fs elapsed)", d, time.Since(begin).Seconds())
		if err := runDriver(ctx, o, want, d, name, dsn, host, port, show); err != nil {
			return fmt.Errorf("%s: %w", d, err)
		}
		if di == 0 && want["storage"] && o.storage > 0 {
			db, err := openPool(name, dsn, 2)
			if err != nil {
				return err
			}
			progress("[%s] storage: %d live locks", d, o.storage)
			s, err := sgbench.Storage(ctx, d, db, o.storage, 2)
			db.Close()
			if err != nil {
				return fmt.Errorf("storage: %w", err)
			}
			show(d, s)
		}
	}
	if want["etcd"] {
		if err := runEtcd(ctx, drivers, dsn, show); err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "\n== targets (all drivers)\n")
	met := 0
	for _, t := range allTargets {
		if t["met"].(bool) {
			met++
		}
		sgbench.PrintTargets(out, []sgbench.Target{{Name: fmt.Sprintf("[%s] %s", t["driver"], t["name"]), Value: t["value"].(float64), Goal: t["goal"].(string), Met: t["met"].(bool)}})
	}
	fmt.Fprintf(out, "   load average at end: %s\n", loadavg())
	emit(map[string]any{"bench": "syncguard", "workload": "targets", "met": met, "total": len(allTargets), "targets": allTargets,
		"seconds": time.Since(begin).Seconds(), "loadavg_end": loadavg()})
	if o.mdPath != "" {
		f, err := os.Create(o.mdPath)
		if err != nil {
			return err
		}
		sgbench.Markdown(f, results)
		if err := f.Close(); err != nil {
			return err
		}
	}
	progress("done in %.0fs", time.Since(begin).Seconds())
	return nil
}

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "syncguard-bench: "+format+"\n", args...)
}

func runDriver(ctx context.Context, o options, want map[string]bool, d, name, dsn, host string, port int,
	show func(driver string, r any)) error {
	db, err := openPool(name, dsn, o.workers)
	if err != nil {
		return err
	}
	defer db.Close()
	admin, err := openPool(name, dsn, 1)
	if err != nil {
		return err
	}
	defer admin.Close()
	if err := sgbench.SetupTables(ctx, db); err != nil {
		return fmt.Errorf("setup: %w", err)
	}
	defer sgbench.DropTables(context.WithoutCancel(ctx), db, sgbench.SGTable, sgbench.SGFenceTable, sgbench.RefTable, sgbench.RefFenceTable, sgbench.FloorTable) //nolint:errcheck
	lk, err := sgbench.NewLockers(ctx, db)
	if err != nil {
		return err
	}
	defer lk.Close()
	env := &sgbench.Env{
		Cfg: sgbench.Config{Driver: d, Workers: o.workers, Keys: o.keys, Pairs: o.pairs, Duration: o.duration,
			AuxDuration: o.auxDuration, Rounds: o.rounds, TTL: 30 * time.Second, ExtendLocks: 16,
			RunID: fmt.Sprintf("%s-%d", d, time.Now().UnixNano())},
		DB: db, Admin: admin, Lockers: lk,
	}
	// step runs one measurement (progress names it, errors say what)
	// and shows its result.
	step := func(doing, what string, run func() (any, error)) error {
		progress("[%s] %s", d, doing)
		r, err := run()
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		show(d, r)
		return nil
	}
	for _, w := range []struct {
		name string
		fn   func(context.Context) (*sgbench.WorkloadResult, error)
	}{{"w1", env.W1}, {"w2", env.W2}, {"w3", env.W3}, {"w4", env.W4}, {"w5", env.W5}} {
		if !want[w.name] {
			continue
		}
		if err := step(w.name, w.name, func() (any, error) { return w.fn(ctx) }); err != nil {
			return err
		}
	}
	if want["w3"] && o.hotAlt > 0 && o.hotAlt != o.workers {
		alt := *env
		alt.Cfg.Workers = o.hotAlt
		alt.Cfg.Duration = o.duration * 2 / 5
		if err := step(fmt.Sprintf("w3 with %d workers", o.hotAlt), fmt.Sprintf("w3 (%d workers)", o.hotAlt),
			func() (any, error) { return alt.W3(ctx) }); err != nil {
			return err
		}
	}
	if want["wal"] {
		if err := step("failed-attempt WAL probe", "wal probe", func() (any, error) { return env.FailedAttemptWAL(ctx, o.walAttempts) }); err != nil {
			return err
		}
	}
	if want["anatomy"] {
		if err := step("anatomy", "anatomy", func() (any, error) { return sgbench.Anatomy(ctx, d, name, dsn, o.anatomyOps) }); err != nil {
			return err
		}
	}
	if want["fresh"] {
		if err := step("fresh sessions", "fresh", func() (any, error) { return sgbench.FreshSessions(ctx, d, name, dsn, o.freshSessions) }); err != nil {
			return err
		}
	}
	if want["allocs"] {
		if err := step("allocations", "allocs", func() (any, error) { return env.Allocs(ctx, o.allocOps) }); err != nil {
			return err
		}
	}
	if want["rt"] {
		progress("[%s] round trips", d)
		p, err := tcpproxy.New(net.JoinHostPort(host, strconv.Itoa(port)))
		if err != nil {
			return err
		}
		defer p.Close()
		pdsn, err := sgbench.ProxyDSN(dsn, p.Port())
		if err != nil {
			return err
		}
		pdb, err := openPool(name, pdsn, 1)
		if err != nil {
			return err
		}
		r, err := sgbench.RoundTrips(ctx, d, pdb, p, o.rtOps)
		pdb.Close()
		if err != nil {
			return fmt.Errorf("round trips: %w", err)
		}
		show(d, r)
	}
	if want["k-sem"] {
		if err := step("k-sem", "k-sem", func() (any, error) {
			return sgbench.SemaphoreUtil(ctx, d, name, dsn, listenDialect(d, dsn), sgbench.DefaultSemUtil)
		}); err != nil {
			return err
		}
	}
	if want["w44"] {
		if err := step("w44 short waits", "w44", func() (any, error) { return sgbench.ShortWaits(ctx, d, dsn, o.duration) }); err != nil {
			return err
		}
	}
	if want["w41-locks"] {
		if err := step("w41-locks held advisory ids", "w41-locks", func() (any, error) { return sgbench.W41Locks(ctx, d, dsn, o.duration) }); err != nil {
			return err
		}
	}
	return runWaiting(ctx, o, want, d, name, dsn, env.Cfg.RunID, func(r any) { show(d, r) })
}
