package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/syncguard/syncguard-go/bench/sgbench"
	sgpq "github.com/syncguard/syncguard-go/pq"
	"github.com/syncguard/syncguard-go/tests/pgtest"
)

// Workload 7 (issue 29, waiting at fleet scale): see bench/sgbench/fleet.go.
// Not in the default set (-workloads): `make bench-fleet` runs it.

// FleetWorkloads are workload 7's names, for -workloads.
var FleetWorkloads = []string{"w7a", "w7b", "w7c", "w7d"}

// fleetMaxConnections is the throwaway server's max_connections when a
// workload 7 is selected: w7c's 1,000 Backends take 2,000 sessions.
const fleetMaxConnections = 2400

type fleetOptions struct {
	duration  time.Duration
	rounds    int
	foreign   string
	variants  string
	backends  string
	idleCases string
	idleDur   time.Duration
	idleWarm  time.Duration
	maxConns  int
}

func (f *fleetOptions) register() {
	flag.DurationVar(&f.duration, "w7-duration", 10*time.Second, "w7a, w7b: measured time per case (and variant), over -w7-rounds interleaved rounds")
	flag.IntVar(&f.rounds, "w7-rounds", 2, "w7a, w7b: interleaved rounds")
	flag.StringVar(&f.foreign, "w7a-foreign", "0,100,300,600", "w7a: foreign listening sessions per case (the first is the reference)")
	flag.StringVar(&f.variants, "w7a-variants", "syncguard,fallback,notifydb", "w7a: variants: syncguard, fallback (no LISTEN), notifydb (Config.NotifyDB on database "+sgbench.NotifyDatabase+")")
	flag.StringVar(&f.backends, "w7b-backends", "10,100,300", "w7b: waiting Backends on the hot keys per case (the first is the reference)")
	flag.StringVar(&f.idleCases, "w7c-cases", "100/10,1000/10,100/100,1000/1000", "w7c: waiters/Backends per case")
	flag.DurationVar(&f.idleDur, "w7c-duration", 20*time.Second, "w7c: measured time per case")
	flag.DurationVar(&f.idleWarm, "w7c-warm", 5*time.Second, "w7c: waiting before the measurement (and the baseline's length)")
	flag.IntVar(&f.maxConns, "max-connections", 0, fmt.Sprintf("the throwaway server's max_connections (0: %d when a workload 7 is selected, else 200)", fleetMaxConnections))
}

// serverMaxConnections is what the throwaway server is started with.
func (o options) serverMaxConnections(want map[string]bool) int {
	if o.fleet.maxConns > 0 {
		return o.fleet.maxConns
	}
	for _, w := range FleetWorkloads {
		if want[w] {
			return fleetMaxConnections
		}
	}
	return 0 // pgtest's default
}

func ints(flagName, s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 0 {
			return nil, fmt.Errorf("-%s: %q", flagName, f)
		}
		out = append(out, n)
	}
	return out, nil
}

// needSessions fails early when the server cannot take n more sessions.
func needSessions(ctx context.Context, admin *sql.DB, what string, n int) error {
	var maxc, used int
	if err := admin.QueryRowContext(ctx, `SELECT current_setting('max_connections')::int, (SELECT count(*) FROM pg_stat_activity)`).Scan(&maxc, &used); err != nil {
		return err
	}
	if used+n > maxc-5 {
		return fmt.Errorf("%s needs about %d sessions, the server has %d of max_connections %d in use (start it with more, or -max-connections for the throwaway)", what, n, used, maxc)
	}
	return nil
}

// openNotify opens a NotifyDB pool so that the core finds a listening
// dialect from its driver: lib/pq's through the adapter's connector.
func openNotify(d string) func(dsn string) (*sql.DB, error) {
	if d != "pq" {
		return nil // sql.Open
	}
	return func(dsn string) (*sql.DB, error) {
		c, err := sgpq.NewConnector(dsn)
		if err != nil {
			return nil, err
		}
		return sql.OpenDB(c), nil
	}
}

// runFleet runs workload 7 for one driver.
func runFleet(ctx context.Context, o options, want map[string]bool, we *sgbench.WaitEnv, show func(any)) error {
	f := o.fleet
	if !want["w7a"] && !want["w7b"] && !want["w7c"] && !want["w7d"] {
		return nil
	}
	if f.rounds < 1 {
		return errors.New("-w7-rounds must be >= 1")
	}
	admin, err := openPool(we.SQLDriver, we.DSN, 2)
	if err != nil {
		return err
	}
	defer admin.Close()
	if want["w7a"] || want["w7d"] {
		if err := sgbench.CreateDatabase(ctx, admin, sgbench.NotifyDatabase); err != nil {
			return fmt.Errorf("creating database %s: %w", sgbench.NotifyDatabase, err)
		}
	}
	notifyDSN, err := sgbench.DSNWithDatabase(we.DSN, sgbench.NotifyDatabase)
	if err != nil {
		return err
	}
	if !sgbench.HasNotifyDB() {
		progress("[%s] this syncguard has no Config.NotifyDB: its variants are skipped", we.Driver)
	}
	if want["w7a"] {
		counts, err := ints("w7a-foreign", f.foreign)
		if err != nil {
			return err
		}
		var variants []string
		for _, v := range strings.Split(f.variants, ",") {
			switch strings.TrimSpace(v) {
			case "syncguard":
				variants = append(variants, sgbench.VarNotify)
			case "fallback":
				variants = append(variants, sgbench.VarFallback)
			case "notifydb":
				variants = append(variants, sgbench.VarNotifyDB)
			default:
				return fmt.Errorf("-w7a-variants: %q", v)
			}
		}
		if err := needSessions(ctx, admin, "w7a", counts[len(counts)-1]+len(variants)*4*3+10); err != nil {
			return err
		}
		e := *we
		e.NotifyDSN, e.NotifyDialect, e.OpenNotify = notifyDSN, listenDialect(we.Driver, notifyDSN), openNotify(we.Driver)
		progress("[%s] w7a (foreign listeners %v x %d variants x %v)", we.Driver, counts, len(variants), f.duration)
		r, err := e.ForeignListeners(ctx, admin, sgbench.ForeignParams{Counts: counts, Backends: 4, Hold: 10 * time.Millisecond, Pause: 10 * time.Millisecond,
			Duration: f.duration, Rounds: f.rounds, Variants: variants})
		if err != nil {
			return fmt.Errorf("w7a: %w", err)
		}
		show(r)
	}
	if want["w7b"] {
		counts, err := ints("w7b-backends", f.backends)
		if err != nil {
			return err
		}
		if err := needSessions(ctx, admin, "w7b", (counts[len(counts)-1]+3)*3+10); err != nil {
			return err
		}
		progress("[%s] w7b (waiting Backends %v x %v)", we.Driver, counts, f.duration)
		// Each segment opens its Backends anew (closing their LISTEN
		// connections), so each prepares its statements again on up to 600
		// connections, five plans each before the generic one: 6 s of warm-up
		// keep that out of the window.
		r, err := we.OwnWaiters(ctx, admin, sgbench.OwnWaitersParams{Counts: counts, HotKeys: 3, HotHold: 10 * time.Millisecond,
			Probe: 3, ProbeHold: 10 * time.Millisecond, ProbePause: 20 * time.Millisecond, Duration: f.duration, Rounds: f.rounds, Warm: 6 * time.Second})
		if err != nil {
			return fmt.Errorf("w7b: %w", err)
		}
		show(r)
	}
	if want["w7c"] {
		var cases []sgbench.IdleCase
		need := 0
		for _, s := range strings.Split(f.idleCases, ",") {
			a, b, ok := strings.Cut(strings.TrimSpace(s), "/")
			n, err1 := strconv.Atoi(a)
			m, err2 := strconv.Atoi(b)
			if !ok || err1 != nil || err2 != nil || n < 1 || m < 1 || m > n {
				return fmt.Errorf("-w7c-cases: %q (want waiters/backends)", s)
			}
			cases = append(cases, sgbench.IdleCase{Waiters: n, Backends: m})
			per := 3 // a pool of 2 and a LISTEN connection
			if m == n {
				per = 2 // a pool of 1
			}
			need = max(need, per*m+10)
		}
		if err := needSessions(ctx, admin, "w7c", need); err != nil {
			return err
		}
		progress("[%s] w7c (%s, %v each)", we.Driver, f.idleCases, f.idleDur)
		r, err := we.IdleWaiting(ctx, admin, sgbench.IdleParams{Cases: cases, Baseline: f.idleWarm, Warm: f.idleWarm, Duration: f.idleDur})
		if err != nil {
			return fmt.Errorf("w7c: %w", err)
		}
		show(r)
	}
	if want["w7d"] {
		if err := runW7d(ctx, o, we, show); err != nil {
			return fmt.Errorf("w7d: %w", err)
		}
	}
	return nil
}

// W7d's variants.
const (
	w7dDirect   = "W6a direct (syncguard)"
	w7dPolling  = "through PgBouncer (polling fallback)"
	w7dNotifyDB = "through PgBouncer, NotifyDB direct"
	w7dPqListen = "through PgBouncer, pq ListenDialect(direct DSN)"
)

// runW7d runs W6a's shape through PgBouncer in transaction mode with
// Config.NotifyDB on a direct pool, against W6a direct and through
// PgBouncer without it (polling), interleaved. With lib/pq also the way
// available before issue 29: sgpq.ListenDialect given the direct DSN.
func runW7d(ctx context.Context, o options, we *sgbench.WaitEnv, show func(any)) error {
	if throwaway == nil {
		progress("[%s] w7d needs the throwaway server (PgBouncer): skipped", we.Driver)
		return nil
	}
	b, err := throwaway.StartPgBouncer(ctx, pgtest.PgBouncerOptions{PoolMode: "transaction", DefaultPoolSize: 40})
	if errors.Is(err, pgtest.ErrNoPgBouncer) {
		progress("no PgBouncer installed: skipping w7d")
		return nil
	}
	if err != nil {
		return err
	}
	defer b.Stop()
	params := "&default_query_exec_mode=exec"
	if we.Driver == "pq" {
		params = "&binary_parameters=yes"
	}
	direct := *we
	bw := *we
	bw.DSN, bw.Via = b.DSN+params, "pgbouncer"
	bw.Dialect = listenDialect(we.Driver, bw.DSN)
	nb := bw
	nb.NotifyDSN, nb.NotifyDialect, nb.OpenNotify = we.DSN, listenDialect(we.Driver, we.DSN), openNotify(we.Driver)
	routes := map[string]sgbench.Route{
		w7dDirect:   {Base: sgbench.VarNotify, Env: &direct},
		w7dPolling:  {Base: sgbench.VarNotify, Env: &bw},
		w7dNotifyDB: {Base: sgbench.VarNotifyDB, Env: &nb},
	}
	variants := []string{w7dDirect, w7dPolling}
	if sgbench.HasNotifyDB() {
		variants = append(variants, w7dNotifyDB)
	}
	if we.Driver == "pq" {
		pl := bw
		pl.Dialect = sgpq.ListenDialect(we.DSN)
		routes[w7dPqListen] = sgbench.Route{Base: sgbench.VarNotify, Env: &pl}
		variants = append(variants, w7dPqListen)
	}
	e := *we
	e.Routes = routes
	p := contentionParams[0] // W6a
	p.Name, p.Duration, p.Rounds = "w7d", o.w6Duration, o.w6Rounds
	progress("[%s] w7d (%d variants x %v)", we.Driver, len(variants), o.w6Duration)
	r, err := e.Contention(ctx, p, variants)
	if err != nil {
		return err
	}
	r.Title += "; through PgBouncer in transaction mode unless direct"
	r.Params["notifydb_available"] = sgbench.HasNotifyDB()
	var dir *sgbench.WaitRow
	for i := range r.Rows {
		if r.Rows[i].Variant == w7dDirect {
			dir = &r.Rows[i]
		}
	}
	for _, x := range r.Rows {
		if dir != nil && (x.Variant == w7dNotifyDB || x.Variant == w7dPqListen) {
			r.Targets = append(r.Targets, sgbench.Target{Name: fmt.Sprintf("w7d utilization %%, %s vs direct", x.Variant), Value: x.Utilization,
				Goal: fmt.Sprintf(">= %.1f (direct's - 10 points)", dir.Utilization-10), Met: x.Utilization >= dir.Utilization-10 && x.Timeouts+x.Errors == 0})
		}
	}
	show(r)
	return nil
}
