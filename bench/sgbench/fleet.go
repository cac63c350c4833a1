package sgbench

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/syncguard/syncguard-go/internal/rules"
	"github.com/syncguard/syncguard-go/syncguard"
)

// Workload 7 (issue 29): waiting at fleet scale, in one benchmark process
// whose Backends each stand for a process of their own (a pool of their
// own, a Backend of their own, hence a LISTEN connection of their own), as
// in W6a:
//
//	w7a  foreign listeners: a hot key handed over among a few Backends,
//	     with 0 to 600 idle sessions of another program LISTENing on
//	     channels nobody notifies (the sessions stay open throughout; only
//	     whether they listen changes between cases)
//	w7b  own waiters: 10 to 300 Backends waiting on 3 hot keys, and a
//	     fourth key contended by 3 Backends: what the crowd costs the others
//	w7c  idle waiting cost (idle.go): waiters on held keys, nothing handed
//	     over: committed transactions and waiter-row writes per second
//	w7d  (the program) W6a through PgBouncer with a direct NotifyDB
//
// Each reports its cases as ratios to its smallest case of the same run.
// The server's CPU is read from /proc (the server must be on this
// machine; otherwise it is reported as 0).

// FleetResult is one workload 7 measurement: one JSON line.
type FleetResult[R tableRow] struct {
	Bench    string         `json:"bench"`
	Driver   string         `json:"driver"`
	Workload string         `json:"workload"`
	Method   string         `json:"method"`
	Params   map[string]any `json:"params"`
	Rows     []R            `json:"rows"`
	Targets  []Target       `json:"targets,omitempty"`
}

func (r *FleetResult[R]) table() table {
	var zero R
	title, cols, align := zero.layout()
	t := table{driver: r.Driver, title: title, method: r.Method, cols: cols, align: align, targets: r.Targets}
	for _, x := range r.Rows {
		t.rows = append(t.rows, x.cells())
	}
	return t
}

func ratio(x, y float64) float64 {
	if y == 0 {
		return 0
	}
	return x / y
}

// ---------------------------------------------------------------- server CPU

// ServerProbe reads the CPU time of a local PostgreSQL server: the
// postmaster and all its children (backends, background processes).
type ServerProbe struct{ pm int }

// NewServerProbe finds the postmaster of db's server through a backend's
// parent process; nil when the server is not on this machine.
func NewServerProbe(ctx context.Context, db *sql.DB) *ServerProbe {
	var pid int
	if db.QueryRowContext(ctx, "SELECT pg_backend_pid()").Scan(&pid) != nil {
		return nil
	}
	st, ok := readStat(pid)
	if !ok || !strings.HasPrefix(st.comm, "postgres") {
		return nil
	}
	pm, ok := readStat(st.ppid)
	if !ok || !strings.HasPrefix(pm.comm, "postgres") {
		return nil
	}
	return &ServerProbe{pm: st.ppid}
}

type procStat struct {
	comm string
	ppid int
	cpu  int64 // ns
}

func readStat(pid int) (procStat, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, false
	}
	s := string(b)
	i, j := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if i < 0 || j < i {
		return procStat{}, false
	}
	f := strings.Fields(s[j+1:]) // f[0] is field 3 (state)
	if len(f) < 13 {
		return procStat{}, false
	}
	ppid, _ := strconv.Atoi(f[1])
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return procStat{comm: s[i+1 : j], ppid: ppid, cpu: (ut + st) * int64(time.Second) / clockTicks}, true
}

// Sample returns the CPU time (ns) of each server process now.
func (p *ServerProbe) Sample() map[int]int64 {
	if p == nil {
		return nil
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	m := map[int]int64{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, ok := readStat(pid); ok && (pid == p.pm || st.ppid == p.pm) {
			m[pid] = st.cpu
		}
	}
	return m
}

// cpuDelta is the server CPU (ns) spent between two samples: the growth
// of the processes in both, and all of those started in between.
func cpuDelta(a, b map[int]int64) int64 {
	if a == nil || b == nil {
		return 0
	}
	var sum int64
	for pid, v := range b {
		sum += v - a[pid]
	}
	return sum
}

// ---------------------------------------------------------------- loops

// loopGroup is a set of workers, one per proc, that loop WithLock(key,
// hold) then pause.
type loopGroup struct {
	key         string
	procs       []*proc
	hold, pause time.Duration
	opts        *syncguard.LockOptions
	mu          sync.Mutex
	st          GroupStats
}

// runLoops runs the groups' workers: warm unmeasured, then d measured
// (calls whose fn starts in the window count; waits still running at its
// end do not). during(start, end) runs meanwhile, if not nil.
func runLoops(ctx context.Context, groups []*loopGroup, warm, d time.Duration, during func(start, end time.Time)) {
	start := time.Now().Add(warm)
	end := start.Add(d)
	wctx, cancel := context.WithDeadline(ctx, end)
	defer cancel()
	var wg sync.WaitGroup
	for _, g := range groups {
		for _, pr := range g.procs {
			wg.Go(func() {
				for wctx.Err() == nil {
					t0 := time.Now()
					var h0, h1 time.Time
					err := syncguard.WithLock(wctx, pr.locker, g.key, func(context.Context, *syncguard.Lease) error {
						h0 = time.Now()
						time.Sleep(g.hold)
						h1 = time.Now()
						return nil
					}, g.opts)
					now := time.Now()
					g.mu.Lock()
					st := &g.st
					switch {
					case err == nil:
						if !h0.Before(start) && h0.Before(end) {
							st.Acquired++
							st.Waits = append(st.Waits, h0.Sub(t0))
						}
						st.HeldNs += int64(max(minTime(h1, end).Sub(maxTime(h0, start)), 0))
					case now.Before(start):
					case wctx.Err() != nil:
					case errors.Is(err, syncguard.ErrAcquisitionTimeout):
						st.Timeouts++
					default:
						st.Errors++
						if st.FirstError == "" {
							st.FirstError = err.Error()
						}
					}
					g.mu.Unlock()
					if g.pause > 0 {
						select {
						case <-time.After(g.pause):
						case <-wctx.Done():
						}
					}
				}
			})
		}
	}
	if during != nil {
		during(start, end)
	}
	wg.Wait()
}

// window samples the server's CPU and a notification counter at the edges
// of a measured window.
type window struct {
	probe    *ServerProbe
	notified *atomic.Int64
	cpuNs    int64
	span     time.Duration
	notes    int64
}

func (w *window) during(start, end time.Time) {
	time.Sleep(time.Until(start))
	t0, s0 := time.Now(), w.probe.Sample()
	var n0 int64
	if w.notified != nil {
		n0 = w.notified.Load()
	}
	time.Sleep(time.Until(end))
	s1 := w.probe.Sample()
	w.span += time.Since(t0)
	w.cpuNs += cpuDelta(s0, s1)
	if w.notified != nil {
		w.notes += w.notified.Load() - n0
	}
}

func reopenAll(ps []*proc) error {
	var errs []error
	for _, p := range ps {
		errs = append(errs, p.reopen())
	}
	return errors.Join(errs...)
}

func closeAll(ps []*proc) {
	for _, p := range ps {
		p.close()
	}
}

// openProcs opens n procs of variant, 8 at a time.
func (w *WaitEnv) openProcs(ctx context.Context, variant string, n, conns int) ([]*proc, error) {
	ps := make([]*proc, n)
	errs := make([]error, n)
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			ps[i], errs[i] = w.OpenProc(ctx, variant, conns)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, p := range ps {
			if p != nil {
				p.close()
			}
		}
		return nil, err
	}
	return ps, nil
}

// ---------------------------------------------------------------- foreign sessions

// Foreign is a set of idle sessions of "another program": each LISTENs on
// a channel of its own that nobody notifies, or does nothing.
type Foreign struct {
	db        *sql.DB
	conns     []*sql.Conn
	listening int
}

// OpenForeign opens n idle sessions (not listening yet).
func OpenForeign(ctx context.Context, sqlDriver, dsn string, n int) (*Foreign, error) {
	db, err := sql.Open(sqlDriver, dsn)
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(max(n, 1))
	db.SetMaxIdleConns(max(n, 1))
	f := &Foreign{db: db, conns: make([]*sql.Conn, n)}
	errs := make([]error, n)
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			f.conns[i], errs[i] = db.Conn(ctx)
			if errs[i] == nil {
				errs[i] = f.conns[i].PingContext(ctx)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		f.Close()
		return nil, fmt.Errorf("opening %d foreign sessions: %w", n, err)
	}
	return f, nil
}

// Listen makes the first k sessions listen and the others not.
func (f *Foreign) Listen(ctx context.Context, k int) error {
	for i := f.listening; i < k; i++ {
		if _, err := f.conns[i].ExecContext(ctx, "LISTEN "+rules.QuoteIdent(fmt.Sprintf("sgbench_foreign_%d", i))); err != nil {
			return err
		}
	}
	for i := k; i < f.listening; i++ {
		if _, err := f.conns[i].ExecContext(ctx, "UNLISTEN *"); err != nil {
			return err
		}
	}
	f.listening = k
	return nil
}

// Close ends the sessions.
func (f *Foreign) Close() {
	for _, c := range f.conns {
		if c != nil {
			c.Close()
		}
	}
	f.db.Close()
}

// ---------------------------------------------------------------- w7a

// ForeignParams sizes w7a.
type ForeignParams struct {
	Counts      []int // foreign listening sessions, ascending; the first is the reference
	Backends    int   // on the hot key, one worker each
	Hold, Pause time.Duration
	Duration    time.Duration // measured per case and variant, over Rounds interleaved segments
	Rounds      int
	Variants    []string // VarNotify, VarFallback, VarNotifyDB
}

// ForeignRow is one variant with one number of foreign listeners.
type ForeignRow struct {
	Variant            string  `json:"variant"`
	Foreign            int     `json:"foreign_listeners"`
	Seconds            float64 `json:"seconds"`
	HandOffs           int     `json:"handoffs"`
	HandOffsPer10s     float64 `json:"handoffs_per_10s"`
	HandOffRatio       float64 `json:"handoffs_ratio"` // to the variant's first case
	NotifiedPerHandOff float64 `json:"notified_per_handoff"`
	ServerCPUMsPerS    float64 `json:"server_cpu_ms_per_s"`
	ServerUsPerHandOff float64 `json:"server_cpu_us_per_handoff"`
	ServerCPURatio     float64 `json:"server_cpu_per_handoff_ratio"`
	WaitP50            float64 `json:"wait_p50_ms"`
	WaitP99            float64 `json:"wait_p99_ms"`
	WaitMax            float64 `json:"wait_max_ms"`
	Timeouts           int     `json:"acquisition_timeouts"`
	Errors             int     `json:"errors"`
	FirstError         string  `json:"first_error,omitempty"`
}

func (ForeignRow) layout() (string, []string, string) {
	return "w7a: a hot key's hand-offs with foreign sessions LISTENing in the database",
		[]string{"variant", "foreign listeners", "hand-offs in 10 s", "× first", "notified per hand-off", "server CPU ms/s", "server CPU µs per hand-off", "× first", "wait p50 / p99 / max ms", "timeouts", "errors"}, "l"
}

func (x ForeignRow) cells() []string {
	notified := fmt.Sprintf("%.2f", x.NotifiedPerHandOff)
	if x.Variant == VarNotifyDB && x.NotifiedPerHandOff == 0 {
		notified = "–" // not counted: the core takes NotifyDB's listening dialect from its driver
	}
	return []string{x.Variant, fmt.Sprint(x.Foreign), fmt.Sprintf("%.0f", x.HandOffsPer10s), fmt.Sprintf("%.2f", x.HandOffRatio),
		notified, fmt.Sprintf("%.0f", x.ServerCPUMsPerS), fmt.Sprintf("%.0f", x.ServerUsPerHandOff),
		fmt.Sprintf("%.2f", x.ServerCPURatio), fmt.Sprintf("%.0f / %.0f / %.0f", x.WaitP50, x.WaitP99, x.WaitMax), fmt.Sprint(x.Timeouts), fmt.Sprint(x.Errors)}
}

// ForeignListeners runs w7a. admin is a pool for the measurements.
func (w *WaitEnv) ForeignListeners(ctx context.Context, admin *sql.DB, p ForeignParams) (*FleetResult[ForeignRow], error) {
	var notified atomic.Int64
	we := *w
	we.Notified = &notified
	probe := NewServerProbe(ctx, admin)
	res := &FleetResult[ForeignRow]{Bench: "syncguard", Driver: w.Driver, Workload: "w7a",
		Method: fmt.Sprintf("%d Backends (a pool of 2 and a Backend each, as separate processes) loop WithLock(one key, hold %v) then pause %v, default acquisition options; "+
			"%d idle sessions of another program stay open throughout, of which the case's number LISTEN on a channel each that nobody notifies; "+
			"cases and variants interleaved in %d rounds; hand-offs = acquisitions whose fn started in the window; server CPU = user+system of the postmaster and all its children (/proc) over the window; "+
			"notified = notifications delivered to the Backends' LISTEN connections (not counted with NotifyDB, whose listening dialect the core takes from its driver)",
			p.Backends, p.Hold, p.Pause, slices.Max(p.Counts), p.Rounds),
		Params: map[string]any{"backends": p.Backends, "hold_ms": msf(p.Hold), "pause_ms": msf(p.Pause), "seconds_per_case": p.Duration.Seconds(),
			"rounds": p.Rounds, "foreign": p.Counts, "server_cpu_measured": probe != nil}}
	if slices.Contains(p.Variants, VarNotifyDB) {
		res.Params["notify_dsn_database"] = NotifyDatabase
	}
	foreign, err := OpenForeign(ctx, w.SQLDriver, w.DSN, slices.Max(p.Counts))
	if err != nil {
		return nil, err
	}
	defer foreign.Close()
	type cell struct {
		waits              []time.Duration
		handoffs, to, errs int
		firstErr           string
		win                window
	}
	procs := map[string][]*proc{}
	defer func() {
		for _, ps := range procs {
			closeAll(ps)
		}
	}()
	var variants []string
	for _, v := range p.Variants {
		ps, err := we.openProcs(ctx, v, p.Backends, 2)
		if errors.Is(err, ErrNoNotifyDB) {
			res.Params["skipped"] = fmt.Sprintf("%s: %v", v, err)
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", v, err)
		}
		procs[v] = ps
		variants = append(variants, v)
	}
	cells := map[string]*cell{}
	opts := &syncguard.LockOptions{TTL: 30 * time.Second}
	const segWarm = 500 * time.Millisecond
	seg := func(v, key string, d time.Duration, c *cell) error {
		g := &loopGroup{key: key, procs: procs[v], hold: p.Hold, pause: p.Pause, opts: opts}
		c.win.probe, c.win.notified = probe, &notified
		runLoops(ctx, []*loopGroup{g}, segWarm, d, c.win.during)
		c.handoffs += g.st.Acquired
		c.waits = append(c.waits, g.st.Waits...)
		c.to += g.st.Timeouts
		c.errs += g.st.Errors
		if c.firstErr == "" {
			c.firstErr = g.st.FirstError
		}
		// A Backend listens until closed: end its LISTEN connection, so
		// that it costs nothing while the other variants run.
		return reopenAll(procs[v])
	}
	for i, v := range variants { // warm-up: connections, statements
		if err := seg(v, fmt.Sprintf("%s:w7a:warm:%d", w.RunID, i), 500*time.Millisecond, &cell{}); err != nil {
			return nil, err
		}
	}
	d := p.Duration / time.Duration(p.Rounds)
	for r := range p.Rounds {
		for _, n := range rotate(p.Counts, r) {
			if err := foreign.Listen(ctx, n); err != nil {
				return nil, fmt.Errorf("foreign LISTEN: %w", err)
			}
			for _, v := range rotate(variants, r) {
				k := fmt.Sprintf("%s|%d", v, n)
				if cells[k] == nil {
					cells[k] = &cell{}
				}
				key := fmt.Sprintf("%s:w7a:%d:%d:%d", w.RunID, r, n, slices.Index(variants, v))
				if err := seg(v, key, d, cells[k]); err != nil {
					return nil, err
				}
			}
		}
	}
	for _, v := range variants {
		var first *ForeignRow
		for _, n := range p.Counts {
			c := cells[fmt.Sprintf("%s|%d", v, n)]
			secs := c.win.span.Seconds()
			row := ForeignRow{Variant: v, Foreign: n, Seconds: secs, HandOffs: c.handoffs, Timeouts: c.to, Errors: c.errs, FirstError: c.firstErr}
			if secs > 0 {
				row.HandOffsPer10s = float64(c.handoffs) * 10 / secs
				row.ServerCPUMsPerS = float64(c.win.cpuNs) / 1e6 / secs
			}
			if c.handoffs > 0 {
				row.NotifiedPerHandOff = float64(c.win.notes) / float64(c.handoffs)
				row.ServerUsPerHandOff = float64(c.win.cpuNs) / 1e3 / float64(c.handoffs)
			}
			row.WaitP50, row.WaitP99, row.WaitMax = summarizeMs(c.waits)
			if first == nil {
				first = &row
			}
			row.HandOffRatio = ratio(row.HandOffsPer10s, first.HandOffsPer10s)
			row.ServerCPURatio = ratio(row.ServerUsPerHandOff, first.ServerUsPerHandOff)
			res.Rows = append(res.Rows, row)
		}
		last := res.Rows[len(res.Rows)-1]
		if v == VarFallback || len(p.Counts) < 2 {
			continue
		}
		res.Targets = append(res.Targets,
			Target{Name: fmt.Sprintf("w7a %s: hand-offs with %d foreign listeners vs %d", v, last.Foreign, first.Foreign), Value: last.HandOffRatio, Goal: ">= 0.8x", Met: last.HandOffRatio >= 0.8},
			Target{Name: fmt.Sprintf("w7a %s: server CPU per hand-off with %d foreign listeners vs %d", v, last.Foreign, first.Foreign), Value: last.ServerCPURatio, Goal: "<= 3x", Met: probe != nil && last.ServerCPURatio > 0 && last.ServerCPURatio <= 3})
	}
	return res, nil
}
