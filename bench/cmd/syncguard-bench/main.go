// Command syncguard-bench measures what syncguard adds to PostgreSQL's own
// cost, for both database/sql adapters (lib/pq and pgx/v5/stdlib), against
// baselines measured in the same run on the same pool: the durable floor
// (autocommitted single-row writes), the spec's reference transactions, and
// a SELECT 1 round trip.
//
// It uses the server named by SYNCGUARD_BENCH_DSN, or else starts a
// throwaway PostgreSQL with fsync on (internal/pgtest). Human-readable tables
// go to stdout, each followed by one JSON line (lines starting with '{')
// summarizing that workload; -json also writes the JSON lines to a file.
//
// See docs/performance.md for the method and the published results.
package main

import (
	"bufio"
	"context"
	"database/sql"
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
	"github.com/syncguard/syncguard-go/internal/pgtest"
	"github.com/syncguard/syncguard-go/internal/pgtest/tcpproxy"
	_ "github.com/syncguard/syncguard-go/pgxstd"
	_ "github.com/syncguard/syncguard-go/pq"
)

// EnvDSN names the variable with the server to benchmark against.
const EnvDSN = "SYNCGUARD_BENCH_DSN"

var sqlDriver = map[string]string{"pq": "postgres", "pgx": "pgx"}

type options struct {
	drivers     string
	pairs       int
	workers     int
	keys        int
	duration    time.Duration
	auxDuration time.Duration
	rounds      int
	storage     int
	rtOps       int
	allocOps    int
	walAttempts int
	anatomyOps  int
	hotAlt      int
	jsonPath    string
	mdPath      string
	workloads   string
}

func main() {
	var o options
	flag.StringVar(&o.drivers, "drivers", "pq,pgx", "comma-separated adapters to run: pq, pgx")
	flag.IntVar(&o.pairs, "pairs", 2000, "workload 1: acquire+release pairs per variant")
	flag.IntVar(&o.workers, "workers", 8, "workers of workloads 2-5, and the pool size of every workload")
	flag.IntVar(&o.keys, "keys", 100, "workload 2: key space; workload 5: held locks")
	flag.DurationVar(&o.duration, "duration", 5*time.Second, "workloads 2 and 3: measured time per variant")
	flag.DurationVar(&o.auxDuration, "aux-duration", 2*time.Second, "workloads 4 and 5: measured time per variant")
	flag.IntVar(&o.rounds, "rounds", 5, "split each variant's share into this many rounds, interleaved with the other variants")
	flag.IntVar(&o.storage, "storage-locks", 100000, "live locks for the storage measurement (0 skips it)")
	flag.IntVar(&o.rtOps, "rt-ops", 100, "operations per kind in the round-trip count")
	flag.IntVar(&o.allocOps, "alloc-ops", 300, "operations per kind in the allocation count")
	flag.IntVar(&o.walAttempts, "wal-attempts", 300, "failed attempts in the WAL probe")
	flag.IntVar(&o.anatomyOps, "anatomy-ops", 1000, "iterations of the anatomy (cost breakdown) measurement")
	flag.IntVar(&o.hotAlt, "hot-workers-alt", 2, "workload 3 again with this many workers (as many as the cores), for 2/5 of -duration; 0 skips")
	flag.StringVar(&o.jsonPath, "json", "", "also write the JSON summary lines to this file")
	flag.StringVar(&o.mdPath, "markdown", "", "also write the results as Markdown tables to this file")
	flag.StringVar(&o.workloads, "workloads", "w1,w2,w3,w4,w5,wal,anatomy,allocs,rt,storage", "what to run")
	flag.Parse()
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

	dsn, host, port, cleanup, err := server(ctx)
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
	drivers := strings.Split(o.drivers, ",")
	for di, d := range drivers {
		d = strings.TrimSpace(d)
		name, ok := sqlDriver[d]
		if !ok {
			return fmt.Errorf("unknown driver %q (want pq or pgx)", d)
		}
		progress("[%s] starting (%.0fs elapsed)", d, time.Since(begin).Seconds())
		if err := runDriver(ctx, o, want, d, name, dsn, host, port, out, emit, addTargets); err != nil {
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
			sgbench.PrintStorage(out, s)
			emit(s)
			addTargets(d, s.Targets)
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

// server returns the DSN to benchmark, its host and port, and a cleanup.
func server(ctx context.Context) (dsn, host string, port int, cleanup func(), err error) {
	if d := os.Getenv(EnvDSN); d != "" {
		h, p, err := hostPort(d)
		if err != nil {
			return "", "", 0, nil, fmt.Errorf("%s: %w", EnvDSN, err)
		}
		return d, h, p, func() {}, nil
	}
	// A test DSN (often a fsync=off server) must not stand in for the
	// durable server the benchmark asks for.
	os.Unsetenv(pgtest.EnvDSN)
	progress("starting a throwaway PostgreSQL (fsync on)")
	sctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	srv, err := pgtest.Start(sctx, pgtest.Options{Fsync: true})
	if err != nil {
		return "", "", 0, nil, err
	}
	return srv.DSN, srv.Host, srv.Port, func() {
		if err := srv.Stop(); err != nil {
			progress("stopping PostgreSQL: %v", err)
		}
	}, nil
}

// hostPort extracts host and port from a URL or keyword/value DSN.
func hostPort(dsn string) (string, int, error) {
	host, port := "localhost", 5432
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		rest := strings.SplitN(strings.SplitN(dsn, "://", 2)[1], "/", 2)[0]
		if i := strings.LastIndexByte(rest, '@'); i >= 0 {
			rest = rest[i+1:]
		}
		if h, p, err := net.SplitHostPort(rest); err == nil {
			n, err := strconv.Atoi(p)
			if err != nil {
				return "", 0, err
			}
			return h, n, nil
		}
		if rest != "" {
			host = rest
		}
		return host, port, nil
	}
	for _, f := range strings.Fields(dsn) {
		k, v, _ := strings.Cut(f, "=")
		v = strings.Trim(v, "'")
		switch k {
		case "host":
			host = v
		case "port":
			n, err := strconv.Atoi(v)
			if err != nil {
				return "", 0, err
			}
			port = n
		}
	}
	return host, port, nil
}

func openPool(driverName, dsn string, size int) (*sql.DB, error) {
	db, err := sql.Open(driverName, dsn)
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(size)
	db.SetMaxIdleConns(size) // the default (2) would close and reopen connections under load
	db.SetConnMaxIdleTime(0)
	db.SetConnMaxLifetime(0)
	return db, nil
}

func describe(ctx context.Context, dsn string) (map[string]string, error) {
	db, err := openPool("pgx", dsn, 1)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	info := map[string]string{"cpu": cpuModel(), "cpus": strconv.Itoa(runtime.NumCPU()), "loadavg_start": loadavg()}
	for _, s := range []string{"server_version", "fsync", "synchronous_commit", "wal_sync_method", "full_page_writes", "shared_buffers", "max_connections", "wal_level", "commit_delay"} {
		var v string
		if err := db.QueryRowContext(ctx, "SHOW "+s).Scan(&v); err != nil {
			return nil, fmt.Errorf("SHOW %s: %w", s, err)
		}
		info[s] = v
	}
	info["server_kind"] = "throwaway (internal/pgtest)"
	if os.Getenv(EnvDSN) != "" {
		info["server_kind"] = EnvDSN
	}
	return info, nil
}

// loadavg returns the 1, 5 and 15 minute load averages from /proc/loadavg.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return runtime.GOARCH
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return runtime.GOARCH
}

func runDriver(ctx context.Context, o options, want map[string]bool, d, name, dsn, host string, port int,
	out io.Writer, emit func(any), addTargets func(string, []sgbench.Target)) error {
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
	sg, err := sgbench.NewSG(db)
	if err != nil {
		return err
	}
	ref, err := sgbench.NewReference(ctx, db)
	if err != nil {
		return err
	}
	defer ref.Close()
	floor, err := sgbench.NewFloor(ctx, db)
	if err != nil {
		return err
	}
	defer floor.Close()
	env := &sgbench.Env{
		Cfg: sgbench.Config{Driver: d, Workers: o.workers, Keys: o.keys, Pairs: o.pairs, Duration: o.duration,
			AuxDuration: o.auxDuration, Rounds: o.rounds, TTL: 30 * time.Second, ExtendLocks: 16,
			RunID: fmt.Sprintf("%s-%d", d, time.Now().UnixNano())},
		DB: db, Admin: admin, SG: sg, Ref: ref, Floor: floor,
	}
	for _, w := range []struct {
		name string
		fn   func(context.Context) (*sgbench.WorkloadResult, error)
	}{{"w1", env.W1}, {"w2", env.W2}, {"w3", env.W3}, {"w4", env.W4}, {"w5", env.W5}} {
		if !want[w.name] {
			continue
		}
		progress("[%s] %s", d, w.name)
		r, err := w.fn(ctx)
		if err != nil {
			return fmt.Errorf("%s: %w", w.name, err)
		}
		sgbench.PrintWorkload(out, r)
		emit(r)
		addTargets(d, r.Targets)
	}
	if want["w3"] && o.hotAlt > 0 && o.hotAlt != o.workers {
		progress("[%s] w3 with %d workers", d, o.hotAlt)
		alt := *env
		alt.Cfg.Workers = o.hotAlt
		alt.Cfg.Duration = o.duration * 2 / 5
		r, err := alt.W3(ctx)
		if err != nil {
			return fmt.Errorf("w3 (%d workers): %w", o.hotAlt, err)
		}
		sgbench.PrintWorkload(out, r)
		emit(r)
		addTargets(d, r.Targets)
	}
	if want["wal"] {
		progress("[%s] failed-attempt WAL probe", d)
		r, err := env.FailedAttemptWAL(ctx, o.walAttempts)
		if err != nil {
			return fmt.Errorf("wal probe: %w", err)
		}
		sgbench.PrintWAL(out, r)
		emit(r)
		addTargets(d, r.Targets)
	}
	if want["anatomy"] {
		progress("[%s] anatomy", d)
		r, err := sgbench.Anatomy(ctx, d, name, dsn, o.anatomyOps)
		if err != nil {
			return fmt.Errorf("anatomy: %w", err)
		}
		sgbench.PrintAnatomy(out, r)
		emit(r)
	}
	if want["allocs"] {
		progress("[%s] allocations", d)
		r, err := env.Allocs(ctx, o.allocOps)
		if err != nil {
			return fmt.Errorf("allocs: %w", err)
		}
		sgbench.PrintAllocs(out, r)
		emit(r)
		addTargets(d, r.Targets)
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
		sgbench.PrintRoundTrips(out, r)
		emit(r)
		addTargets(d, r.Targets)
	}
	return nil
}
