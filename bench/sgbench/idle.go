package sgbench

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/syncguard/syncguard-go/syncguard"
)

// w7c, the cost of waiting while nothing changes hands: each waiter waits
// in Lock (no acquisition timeout) for a key of its own that a holder
// keeps for the whole measurement (TTL 10 min, never extended).

// IdleCase is one w7c case: Waiters waiters spread evenly over Backends
// Backends (simulated processes: a pool and a Backend each).
type IdleCase struct {
	Waiters, Backends int
}

// IdleParams sizes w7c.
type IdleParams struct {
	Cases    []IdleCase
	Baseline time.Duration // keys held, no waiters
	Warm     time.Duration // waiters waiting, not measured
	Duration time.Duration // measured
}

// IdleRow is one case.
type IdleRow struct {
	Waiters             int     `json:"waiters"`
	Backends            int     `json:"backends"`
	Layout              string  `json:"layout"`
	Seconds             float64 `json:"seconds"`
	BaselineCommitsPerS float64 `json:"baseline_commits_per_s"`
	CommitsPerS         float64 `json:"commits_per_s"` // xact_commit growth minus the baseline's
	CommitsPerWaiterS   float64 `json:"commits_per_waiter_s"`
	CommitRatio         float64 `json:"commits_ratio"` // to the first case of the same layout
	WaiterWritesPerS    float64 `json:"waiter_row_writes_per_s"`
	WaiterWritesRatio   float64 `json:"waiter_row_writes_ratio"`
	ServerCPUMsPerS     float64 `json:"server_cpu_ms_per_s"`
	Sessions            int     `json:"client_sessions"` // client backends in the server at the window's end
	// ListeningAfterS: from the waiters' start until every Backend's
	// notifications were active (the startup, not measured).
	ListeningAfterS float64 `json:"listening_after_s"`
	// LISTEN connections at the window's end: the client sessions beyond
	// those there before the case and the pools' open connections.
	Listening  int    `json:"listen_connections"`
	Acquired   int    `json:"acquired"` // waiters that got their key: none should
	Errors     int    `json:"errors"`
	FirstError string `json:"first_error,omitempty"`
}

func (IdleRow) layout() (string, []string, string) {
	return "w7c: idle waiting cost, each waiter on a held key of its own",
		[]string{"waiters", "layout", "commits/s (net)", "× first", "per waiter/s", "waiter-row writes/s", "× first", "baseline commits/s", "server CPU ms/s", "client sessions (LISTEN)", "all listening after s", "acquired", "errors"}, "rl"
}

func (x IdleRow) cells() []string {
	return []string{fmt.Sprint(x.Waiters), x.Layout, fmt.Sprintf("%.0f", x.CommitsPerS), fmt.Sprintf("%.2f", x.CommitRatio),
		fmt.Sprintf("%.2f", x.CommitsPerWaiterS), fmt.Sprintf("%.0f", x.WaiterWritesPerS), fmt.Sprintf("%.2f", x.WaiterWritesRatio),
		fmt.Sprintf("%.1f", x.BaselineCommitsPerS), fmt.Sprintf("%.0f", x.ServerCPUMsPerS), fmt.Sprintf("%d (%d)", x.Sessions, x.Listening), fmt.Sprintf("%.0f", x.ListeningAfterS), fmt.Sprint(x.Acquired), fmt.Sprint(x.Errors)}
}

func (c IdleCase) layout() string {
	if c.Backends == c.Waiters {
		return "a Backend per waiter"
	}
	return fmt.Sprintf("%d Backends", c.Backends)
}

// idleCounters are the database's committed transactions and the waiters
// table's inserted + updated rows (pg_stat_database, pg_stat_user_tables).
type idleCounters struct {
	at             time.Time
	commits, wrote int64
	cpu            map[int]int64
}

func readIdleCounters(ctx context.Context, admin *sql.DB, waiters string, probe *ServerProbe) (idleCounters, error) {
	c := idleCounters{at: time.Now(), cpu: probe.Sample()}
	err := admin.QueryRowContext(ctx, `SELECT (SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()),
		(SELECT coalesce(sum(n_tup_ins + n_tup_upd), 0) FROM pg_stat_user_tables WHERE relname = $1)`, waiters).Scan(&c.commits, &c.wrote)
	return c, err
}

// IdleWaiting runs w7c. admin is a pool for the measurements; the lock
// table is the benchmark's (SGTable, its waiters table SGTable_waiters).
func (w *WaitEnv) IdleWaiting(ctx context.Context, admin *sql.DB, p IdleParams) (*FleetResult[IdleRow], error) {
	probe := NewServerProbe(ctx, admin)
	res := &FleetResult[IdleRow]{Bench: "syncguard", Driver: w.Driver, Workload: "w7c",
		Method: fmt.Sprintf("one holder Backend takes a key per waiter (TTL 10 min); each waiter calls Lock(its key, no acquisition timeout) on one of the case's Backends (a pool and a Backend each, as separate processes; waiters spread evenly); "+
			"the pools' connections opened and %v for the statistics to settle; once every Backend's notifications are active, %v of waiting (warm-up) and the statistics' settling again, %v measured: commits = growth of pg_stat_database.xact_commit minus the growth with the keys held and no waiters (%v, just before); "+
			"waiter-row writes = growth of n_tup_ins + n_tup_upd of the waiters table (pg_stat_user_tables); ratios to the first case of the same layout",
			statsSettle, p.Warm, p.Duration, p.Baseline),
		Params: map[string]any{"warm_s": p.Warm.Seconds(), "seconds": p.Duration.Seconds(), "baseline_s": p.Baseline.Seconds(), "variant": VarNotify,
			"waiters_table": SGTable + "_waiters", "server_cpu_measured": probe != nil, "stats_settle_s": statsSettle.Seconds()}}
	first := map[string]*IdleRow{}
	for ci, c := range p.Cases {
		row, err := w.idleCase(ctx, admin, probe, p, c, ci)
		if err != nil {
			return nil, fmt.Errorf("%d waiters on %d Backends: %w", c.Waiters, c.Backends, err)
		}
		if f := first[row.Layout]; f != nil {
			row.CommitRatio = ratio(row.CommitsPerS, f.CommitsPerS)
			row.WaiterWritesRatio = ratio(row.WaiterWritesPerS, f.WaiterWritesPerS)
		} else {
			row.CommitRatio, row.WaiterWritesRatio = 1, 1
			first[row.Layout] = &row
		}
		res.Rows = append(res.Rows, row)
		if row.Waiters >= 1000 {
			res.Targets = append(res.Targets, Target{Name: fmt.Sprintf("w7c: %d idle waiters (%s), committed statements/s", row.Waiters, row.Layout),
				Value: row.CommitsPerS, Goal: "<= 200", Met: row.CommitsPerS <= 200 && row.Errors == 0})
		}
	}
	return res, nil
}

func (w *WaitEnv) idleCase(ctx context.Context, admin *sql.DB, probe *ServerProbe, p IdleParams, c IdleCase, ci int) (IdleRow, error) {
	row := IdleRow{Waiters: c.Waiters, Backends: c.Backends, Layout: c.layout(), Seconds: p.Duration.Seconds()}
	before, err := countSessions(ctx, admin)
	if err != nil {
		return row, err
	}
	holder, err := w.OpenProc(ctx, VarNotify, 4)
	if err != nil {
		return row, err
	}
	defer holder.close()
	keys := make([]string, c.Waiters)
	ids := make([]string, c.Waiters)
	if err := parallel(4, c.Waiters, func(i int) error {
		keys[i] = fmt.Sprintf("%s:w7c:%d:%d", w.RunID, ci, i)
		r, err := holder.sg.Acquire(ctx, keys[i], 10*time.Minute)
		if err == nil && !r.OK {
			err = fmt.Errorf("holder: %s", r.Reason)
		}
		ids[i] = r.LockID
		return err
	}); err != nil {
		return row, err
	}
	defer parallel(4, c.Waiters, func(i int) error { //nolint:errcheck // clean-up
		_, err := holder.sg.Release(context.WithoutCancel(ctx), ids[i])
		return err
	})
	pool := 1
	if c.Backends < c.Waiters {
		pool = 2
	}
	procs, err := w.openProcs(ctx, VarNotify, c.Backends, pool)
	if err != nil {
		return row, err
	}
	defer closeAll(procs)
	for _, pr := range procs { // open the pools' connections before the baseline
		if err := pr.db.PingContext(ctx); err != nil {
			return row, err
		}
	}
	// Let the server's statistics settle: a backend that goes idle less
	// than a second after its last report reports the rest after 10 s
	// (PostgreSQL 15's PGSTAT_IDLE_INTERVAL), which would put the pools'
	// first statements into the baseline.
	time.Sleep(statsSettle)
	table := SGTable + "_waiters"
	b0, err := readIdleCounters(ctx, admin, table, probe)
	if err != nil {
		return row, err
	}
	time.Sleep(p.Baseline)
	b1, err := readIdleCounters(ctx, admin, table, probe)
	if err != nil {
		return row, err
	}
	row.BaselineCommitsPerS = float64(b1.commits-b0.commits) / b1.at.Sub(b0.at).Seconds()

	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var mu sync.Mutex
	var wg sync.WaitGroup
	opts := &syncguard.LockOptions{TTL: 30 * time.Second, Acquisition: syncguard.AcquisitionOptions{Timeout: -1}}
	for i := range c.Waiters {
		pr := procs[i%len(procs)]
		wg.Go(func() {
			l, err := syncguard.Lock(wctx, pr.locker, keys[i], opts)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				row.Acquired++
				l.Close()
			case wctx.Err() != nil:
			default:
				row.Errors++
				if row.FirstError == "" {
					row.FirstError = err.Error()
				}
			}
		})
	}
	// The steady state: every Backend's notifications active (1,000
	// processes starting at once on 2 cores time out many LISTEN probes,
	// which retry after 5 s, doubling), then the warm-up, then the
	// statistics settled, so that the startup's statements are not
	// counted.
	started := time.Now()
	for _, pr := range procs {
		for time.Since(started) < 3*time.Minute && ctx.Err() == nil {
			sctx, c := context.WithTimeout(ctx, 100*time.Millisecond)
			active := pr.sg.NotificationStatus(sctx).Active
			c()
			if active {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	row.ListeningAfterS = time.Since(started).Seconds()
	time.Sleep(p.Warm + statsSettle)
	m0, err := readIdleCounters(ctx, admin, table, probe)
	if err != nil {
		cancel()
		wg.Wait()
		return row, err
	}
	time.Sleep(p.Duration)
	m1, err := readIdleCounters(ctx, admin, table, probe)
	if err == nil {
		row.Sessions, row.Listening, err = listenConns(ctx, admin, before, []*proc{holder}, procs)
	}
	cancel()
	wg.Wait()
	if err != nil {
		return row, err
	}
	secs := m1.at.Sub(m0.at).Seconds()
	row.Seconds = secs
	row.CommitsPerS = float64(m1.commits-m0.commits)/secs - row.BaselineCommitsPerS
	row.CommitsPerWaiterS = row.CommitsPerS / float64(c.Waiters)
	row.WaiterWritesPerS = float64(m1.wrote-m0.wrote) / secs
	row.ServerCPUMsPerS = float64(cpuDelta(m0.cpu, m1.cpu)) / 1e6 / secs
	return row, nil
}

// statsSettle outlasts PostgreSQL 15's PGSTAT_IDLE_INTERVAL (10 s).
const statsSettle = 11 * time.Second

// countSessions counts the server's client backends.
func countSessions(ctx context.Context, admin *sql.DB) (int, error) {
	var n int
	err := admin.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'`).Scan(&n)
	return n, err
}

// listenConns estimates the LISTEN connections of procs: the client
// sessions beyond before (counted before they opened) and the open
// connections of their pools and of others.
func listenConns(ctx context.Context, admin *sql.DB, before int, others []*proc, procs ...[]*proc) (sessions, listening int, err error) {
	sessions, err = countSessions(ctx, admin)
	pools := 0
	for _, ps := range append(procs, others) {
		for _, p := range ps {
			pools += p.db.Stats().OpenConnections
			if p.notify != nil {
				pools += p.notify.Stats().OpenConnections
			}
		}
	}
	return sessions, max(sessions-before-pools, 0), err
}

// parallel runs fn(0..n-1) on k goroutines and returns the errors joined.
func parallel(k, n int, fn func(i int) error) error {
	errs := make([]error, n)
	next := make(chan int)
	var wg sync.WaitGroup
	for range k {
		wg.Go(func() {
			for i := range next {
				errs[i] = fn(i)
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	return errors.Join(errs...)
}
