package sgbench

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/syncguard/syncguard-go/syncguard"
)

// Workloads over several OS processes (the benchmark program runs itself
// with -w6-proc, once per process; ServeProc is the child's side):
//
//	W6e       fairness to far clients: W6a's and W6b's shapes over 4
//	          processes, 2 of them behind a proxy that delays each
//	          direction by 5 ms, then 10 ms
//	w6_scale  the work a process does per hand-off with 5 and with 50
//	          processes, each waiting on keys of its own and on one shared
//	          hot key

// ProcGroup is a set of workers of one child process that loop
// WithLock(Key, hold Hold) then pause Pause.
type ProcGroup struct {
	Tag     string        `json:"tag"`
	Key     string        `json:"key"`
	Workers int           `json:"workers"`
	Hold    time.Duration `json:"hold"`
	Pause   time.Duration `json:"pause"`
}

// ProcJob is what one child process runs: sent as one JSON line.
type ProcJob struct {
	Driver  string      `json:"driver"` // "pq" or "pgx"
	DSN     string      `json:"dsn"`
	Variant string      `json:"variant"`
	Pool    int         `json:"pool"`
	Groups  []ProcGroup `json:"groups"`
}

// GroupStats is one group's outcome within the measured window.
type GroupStats struct {
	Tag        string          `json:"tag"`
	Acquired   int             `json:"acquired"` // fn started within the window
	HeldNs     int64           `json:"held_ns"`  // time inside fn, clipped to the window
	Timeouts   int             `json:"timeouts"` // calls that failed within the window (however long ago they began)
	Errors     int             `json:"errors"`
	FirstError string          `json:"first_error,omitempty"`
	Waits      []time.Duration `json:"waits"` // of the calls whose fn started within the window
}

// ProcResult is one child's report: one JSON line.
type ProcResult struct {
	Groups   []GroupStats `json:"groups"`
	CPUNs    int64        `json:"cpu_ns"`   // user + system CPU of the process within the window
	Notified int64        `json:"notified"` // notifications delivered to its LISTEN connections within the window
	Attempts int64        `json:"attempts"` // Acquire calls (statements) within the window
	Releases int64        `json:"releases"`
}

// countLocker counts the statements a Locker runs. It is a
// syncguard.Queuer whenever the Locker beneath is one (a wrapper that is
// not would make Lock poll without a place in the queue), and counts its
// Waiters' attempts too.
type countLocker struct {
	syncguard.Locker
	attempts, releases *atomic.Int64
}

// Queue implements syncguard.Queuer: the Locker's Waiter, counted; nil (no
// queue: Lock polls) when the Locker has none.
func (c countLocker) Queue(key, identity string, once bool) syncguard.Waiter {
	q, ok := c.Locker.(syncguard.Queuer)
	if !ok {
		return nil
	}
	w := q.Queue(key, identity, once)
	if w == nil {
		return nil
	}
	return countWaiter{w, c.attempts}
}

type countWaiter struct {
	syncguard.Waiter
	attempts *atomic.Int64
}

func (w countWaiter) Attempt(ctx context.Context, ttl time.Duration) (syncguard.AcquireResult, error) {
	w.attempts.Add(1)
	return w.Waiter.Attempt(ctx, ttl)
}

func (c countLocker) Acquire(ctx context.Context, key string, ttl time.Duration) (syncguard.AcquireResult, error) {
	c.attempts.Add(1)
	return c.Locker.Acquire(ctx, key, ttl)
}

func (c countLocker) Release(ctx context.Context, id string) (syncguard.ReleaseResult, error) {
	c.releases.Add(1)
	return c.Locker.Release(ctx, id)
}

func cpuNow() int64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// ServeProc is the child's side: it reads the job (one JSON line), opens
// its pool and Backend, warms them up (prepared statements), answers
// "ready", reads "go <start> <end>" (Unix nanoseconds), runs the groups
// from then until end (counting from start) and answers with its
// ProcResult as one JSON line. we carries the driver, DSN and dialect.
func ServeProc(ctx context.Context, we *WaitEnv, job ProcJob, in *bufio.Reader, out io.Writer) error {
	var notified, attempts, releases atomic.Int64
	we.Notified = &notified
	p, err := we.OpenProc(ctx, job.Variant, job.Pool)
	if err != nil {
		return err
	}
	defer p.close()
	locker := countLocker{p.locker, &attempts, &releases}
	warm := fmt.Sprintf("warm:%d:%d", os.Getpid(), time.Now().UnixNano())
	for range 2 {
		r, err := p.locker.Acquire(ctx, warm, time.Minute)
		if err != nil || !r.OK {
			return fmt.Errorf("warm-up acquire: %+v %v", r, err)
		}
		if _, err := p.locker.Release(ctx, r.LockID); err != nil {
			return err
		}
	}
	fmt.Fprintln(out, "ready")
	line, err := in.ReadString('\n')
	if err != nil {
		return fmt.Errorf("waiting for go: %w", err)
	}
	f := strings.Fields(line)
	if len(f) != 3 || f[0] != "go" {
		return fmt.Errorf("unexpected command %q", line)
	}
	s, _ := strconv.ParseInt(f[1], 10, 64)
	e, _ := strconv.ParseInt(f[2], 10, 64)
	start, end := time.Unix(0, s), time.Unix(0, e)

	wctx, cancel := context.WithDeadline(ctx, end) // waits still running at the end are not counted
	defer cancel()
	stats := make([]GroupStats, len(job.Groups))
	var mu sync.Mutex
	var wg sync.WaitGroup
	opts := &syncguard.LockOptions{TTL: 30 * time.Second}
	for gi, g := range job.Groups {
		stats[gi].Tag = g.Tag
		for range g.Workers {
			wg.Go(func() {
				st := &stats[gi]
				for wctx.Err() == nil {
					t0 := time.Now()
					var h0, h1 time.Time
					err := syncguard.WithLock(wctx, locker, g.Key, func(context.Context, *syncguard.Lease) error {
						h0 = time.Now()
						time.Sleep(g.Hold)
						h1 = time.Now()
						return nil
					}, opts)
					now := time.Now()
					mu.Lock()
					switch {
					case err == nil:
						if !h0.Before(start) && h0.Before(end) {
							st.Acquired++
							st.Waits = append(st.Waits, h0.Sub(t0)) // however long ago the call began
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
					mu.Unlock()
					select {
					case <-time.After(g.Pause):
					case <-wctx.Done():
					}
				}
			})
		}
	}
	var res ProcResult
	time.Sleep(time.Until(start))
	c0, n0, a0, r0 := cpuNow(), notified.Load(), attempts.Load(), releases.Load()
	time.Sleep(time.Until(end))
	res.CPUNs, res.Notified, res.Attempts, res.Releases = cpuNow()-c0, notified.Load()-n0, attempts.Load()-a0, releases.Load()-r0
	wg.Wait()
	res.Groups = stats
	b, err := json.Marshal(res)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(out, "%s\n", b)
	return err
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// ProcSpawner starts a child process (the benchmark program with -w6-proc)
// and sends it job.
type ProcSpawner func(job ProcJob) (*Child, error)

// RunProcs starts one child per job, waits until all are ready, lets them
// run for warm unmeasured and then d measured, and returns their reports
// in job order. During the measured window it calls during(start, end),
// if not nil.
func RunProcs(ctx context.Context, spawn ProcSpawner, jobs []ProcJob, warm, d time.Duration, during func(start, end time.Time)) ([]ProcResult, error) {
	children := make([]*Child, 0, len(jobs))
	defer func() {
		for _, c := range children {
			c.In.Close()
			c.Close()
		}
	}()
	for _, j := range jobs {
		c, err := spawn(j)
		if err != nil {
			return nil, err
		}
		children = append(children, c)
	}
	for i, c := range children {
		line, err := c.Out.ReadString('\n')
		if err != nil || strings.TrimSpace(line) != "ready" {
			return nil, fmt.Errorf("process %d did not start: %q %v", i, line, err)
		}
	}
	start := time.Now().Add(warm)
	end := start.Add(d)
	for _, c := range children {
		if _, err := fmt.Fprintf(c.In, "go %d %d\n", start.UnixNano(), end.UnixNano()); err != nil {
			return nil, err
		}
	}
	if during != nil {
		during(start, end)
	}
	res := make([]ProcResult, len(children))
	for i, c := range children {
		line, err := c.Out.ReadString('\n')
		if err != nil {
			return nil, fmt.Errorf("process %d: %w", i, err)
		}
		if err := json.Unmarshal([]byte(line), &res[i]); err != nil {
			return nil, fmt.Errorf("process %d: %q: %w", i, line, err)
		}
	}
	return res, nil
}

// ---------------------------------------------------------------- W6e

// FairRow is one shape at one delay.
type FairRow struct {
	Shape        string  `json:"shape"` // "w6a" or "w6b"
	DelayMs      float64 `json:"delay_ms_each_way"`
	HoldsNear    float64 `json:"holds_per_near_process"`
	HoldsFar     float64 `json:"holds_per_far_process"`
	Ratio        float64 `json:"far_over_near"`
	Utilization  float64 `json:"utilization_pct"`
	Timeouts     int     `json:"acquisition_timeouts"`
	Errors       int     `json:"errors"`
	FirstError   string  `json:"first_error,omitempty"`
	WaitP99Near  float64 `json:"wait_p99_near_ms"`
	WaitP99Far   float64 `json:"wait_p99_far_ms"`
	WaitMaxFar   float64 `json:"wait_max_far_ms"`
	WaitMeanNear float64 `json:"wait_mean_near_ms"`
	WaitMeanFar  float64 `json:"wait_mean_far_ms"`
	// Acquire statements per hold (the first attempt, renewals, retries,
	// wake-ups and the grant's confirmation).
	AttemptsNear float64 `json:"attempts_per_hold_near"`
	AttemptsFar  float64 `json:"attempts_per_hold_far"`
	Seconds      float64 `json:"seconds"`
	PerProcHolds []int   `json:"holds_per_process"` // near, near, far, far
}

// FairResult is W6e: one JSON line.
type FairResult struct {
	Bench    string         `json:"bench"`
	Driver   string         `json:"driver"`
	Workload string         `json:"workload"`
	Method   string         `json:"method"`
	Params   map[string]any `json:"params"`
	Rows     []FairRow      `json:"rows"`
	Targets  []Target       `json:"targets,omitempty"`
}

// FairShape is one of W6e's shapes: the W6a or W6b workers split evenly
// over the processes.
type FairShape struct {
	Name              string
	WorkersPerProcess int
	Hold, Pause       time.Duration
}

// FairShapes are W6a's (8 workers, hold 10 ms, pause 20 ms) and W6b's (4
// workers, hold 50 ms, pause 50 ms) over 4 processes.
var FairShapes = []FairShape{
	{"w6a", 2, 10 * time.Millisecond, 20 * time.Millisecond},
	{"w6b", 1, 50 * time.Millisecond, 50 * time.Millisecond},
}

// Fairness runs W6e: for each delay, a DelayProxy to target (host:port)
// and, for each shape, 4 processes on one key, processes 2 and 3 through
// the proxy. Holds are counted per process within d (after warm).
func (w *WaitEnv) Fairness(ctx context.Context, spawn ProcSpawner, target string, delays []time.Duration, warm, d time.Duration) (*FairResult, error) {
	res := &FairResult{Bench: "syncguard", Driver: w.Driver, Workload: "w6e",
		Method: "4 processes on one key (a pool of 2 and a Backend each), 2 of them through a proxy that delays each direction; " +
			"holds = WithLock calls whose fn started in the window; ratio = mean holds of a far process / mean holds of a near one",
		Params: map[string]any{"processes": 4, "far_processes": 2, "seconds": d.Seconds(), "warm_s": warm.Seconds(), "variant": VarNotify}}
	for _, delay := range delays {
		px, err := NewDelayProxy(target, delay)
		if err != nil {
			return nil, err
		}
		farDSN, err := ProxyDSN(w.DSN, px.Port())
		if err != nil {
			px.Close()
			return nil, err
		}
		for _, sh := range FairShapes {
			key := fmt.Sprintf("%s:w6e:%s:%d", w.RunID, sh.Name, delay.Milliseconds())
			var jobs []ProcJob
			for i := range 4 {
				dsn := w.DSN
				if i >= 2 {
					dsn = farDSN
				}
				jobs = append(jobs, ProcJob{Driver: w.Driver, DSN: dsn, Variant: VarNotify, Pool: 2,
					Groups: []ProcGroup{{Tag: sh.Name, Key: key, Workers: sh.WorkersPerProcess, Hold: sh.Hold, Pause: sh.Pause}}})
			}
			prs, err := RunProcs(ctx, spawn, jobs, warm, d, nil)
			if err != nil {
				px.Close()
				return nil, fmt.Errorf("w6e %s %v: %w", sh.Name, delay, err)
			}
			row := FairRow{Shape: sh.Name, DelayMs: msf(delay), Seconds: d.Seconds()}
			var near, far []time.Duration
			var held int64
			var attNear, attFar float64
			for i, pr := range prs {
				g := pr.Groups[0]
				row.PerProcHolds = append(row.PerProcHolds, g.Acquired)
				row.Timeouts += g.Timeouts
				row.Errors += g.Errors
				if row.FirstError == "" {
					row.FirstError = g.FirstError
				}
				held += g.HeldNs
				if i < 2 {
					row.HoldsNear += float64(g.Acquired) / 2
					near = append(near, g.Waits...)
					attNear += float64(pr.Attempts)
				} else {
					row.HoldsFar += float64(g.Acquired) / 2
					far = append(far, g.Waits...)
					attFar += float64(pr.Attempts)
				}
			}
			if row.HoldsNear > 0 {
				row.Ratio = row.HoldsFar / row.HoldsNear
				row.AttemptsNear = attNear / 2 / row.HoldsNear
			}
			if row.HoldsFar > 0 {
				row.AttemptsFar = attFar / 2 / row.HoldsFar
			}
			row.WaitMeanNear, row.WaitMeanFar = meanMs(near), meanMs(far)
			row.Utilization = 100 * float64(held) / float64(d)
			_, row.WaitP99Near, _ = summarizeMs(near)
			_, row.WaitP99Far, row.WaitMaxFar = summarizeMs(far)
			res.Rows = append(res.Rows, row)
			name := fmt.Sprintf("w6e %s shape, %v each way: holds per far / per near process", sh.Name, delay)
			res.Targets = append(res.Targets,
				Target{Name: name, Value: row.Ratio, Goal: ">= 0.9", Met: row.Ratio >= 0.9},
				Target{Name: fmt.Sprintf("w6e %s shape, %v each way: acquisition timeouts + errors", sh.Name, delay), Value: float64(row.Timeouts + row.Errors), Goal: "0", Met: row.Timeouts+row.Errors == 0})
		}
		px.Close()
	}
	return res, nil
}

func meanMs(ds []time.Duration) float64 {
	if len(ds) == 0 {
		return 0
	}
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return msf(sum / time.Duration(len(ds)))
}

func (r *FairResult) table() table {
	t := table{driver: r.Driver, title: "w6e: fairness to far processes (W6a / W6b shapes over 4 processes, 2 behind a delaying proxy)",
		method: r.Method, align: "l", targets: r.Targets,
		cols: []string{"shape", "delay each way ms", "holds per near process", "holds per far process", "far / near", "holds per process (near, near, far, far)", "utilization %", "timeouts", "errors", "wait mean near / far ms", "wait p99 near / far ms", "wait max far ms", "attempts per hold near / far"}}
	for _, x := range r.Rows {
		t.rows = append(t.rows, []string{x.Shape, fmt.Sprintf("%.0f", x.DelayMs), fmt.Sprintf("%.1f", x.HoldsNear), fmt.Sprintf("%.1f", x.HoldsFar),
			fmt.Sprintf("%.2f", x.Ratio), strings.Trim(fmt.Sprint(x.PerProcHolds), "[]"), fmt.Sprintf("%.1f", x.Utilization),
			fmt.Sprint(x.Timeouts), fmt.Sprint(x.Errors), fmt.Sprintf("%.0f / %.0f", x.WaitMeanNear, x.WaitMeanFar), fmt.Sprintf("%.0f / %.0f", x.WaitP99Near, x.WaitP99Far),
			fmt.Sprintf("%.0f", x.WaitMaxFar), fmt.Sprintf("%.1f / %.1f", x.AttemptsNear, x.AttemptsFar)})
	}
	return t
}

// ---------------------------------------------------------------- scale

// ScaleRow is one process count.
type ScaleRow struct {
	Processes       int     `json:"processes"`
	Seconds         float64 `json:"seconds"`
	HotHandOffs     float64 `json:"hot_handoffs_per_s"`          // acquisitions of the hot key, all processes
	OwnHandOffs     float64 `json:"own_acquisitions_per_s_proc"` // acquisitions of its own keys, per process
	AllAcquisitions float64 `json:"all_acquisitions_per_s"`
	// Per process (mean over processes; max in brackets where shown).
	NotifiedPerS      float64 `json:"notified_per_s_proc"`
	NotifiedPerHot    float64 `json:"notified_per_hot_handoff_proc"`
	NotifiedPerOwnOp  float64 `json:"notified_per_relevant_handoff_proc"` // per (hot hand-off + own acquisition)
	CPUMsPerS         float64 `json:"cpu_ms_per_s_proc"`
	CPUMsPerSMax      float64 `json:"cpu_ms_per_s_proc_max"`
	CPUUsPerRelevant  float64 `json:"cpu_us_per_relevant_handoff_proc"` // CPU / (hot hand-offs + own acquisitions)
	CPUUsPerStatement float64 `json:"cpu_us_per_statement_proc"`        // CPU / (attempts + releases) of the process
	StatementsPerS    float64 `json:"statements_per_s_proc"`
	// The server: CPU of all its processes over the window (/proc, local
	// server only; 0 when unknown) per acquisition anywhere.
	ServerCPUPerS   float64 `json:"server_cpu_ms_per_s"`
	ServerUsPerAcq  float64 `json:"server_cpu_us_per_acquisition"`
	HotWaitP99      float64 `json:"hot_wait_p99_ms"`
	HotWaitMax      float64 `json:"hot_wait_max_ms"`
	Timeouts        int     `json:"acquisition_timeouts"`
	Errors          int     `json:"errors"`
	FirstError      string  `json:"first_error,omitempty"`
	TimeoutsHot     int     `json:"acquisition_timeouts_hot"`
	ProcsWithoutHot int     `json:"processes_without_a_hot_hold"`
}

// ScaleResult is the scale measurement: one JSON line.
type ScaleResult struct {
	Bench    string         `json:"bench"`
	Driver   string         `json:"driver"`
	Workload string         `json:"workload"`
	Method   string         `json:"method"`
	Params   map[string]any `json:"params"`
	Rows     []ScaleRow     `json:"rows"`
	Targets  []Target       `json:"targets,omitempty"`
}

// ScaleShape sizes the scale measurement's processes.
type ScaleShape struct {
	HotWorkers          int
	HotHold, HotPause   time.Duration
	OwnKeys, OwnWorkers int // own keys, workers per own key
	OwnHold, OwnPause   time.Duration
}

// DefaultScaleShape: one worker on the hot key (hold 10 ms, pause 20 ms),
// two keys of its own with two workers each (hold 400 ms, pause 400 ms:
// each own key is contended, so its waiters are woken by notifications on
// their own key's channel, about 2.5 hand-offs/s per key). Light enough
// that 50 processes do not saturate 2 cores: a saturated machine would
// measure the scheduler, not the design.
var DefaultScaleShape = ScaleShape{HotWorkers: 1, HotHold: 10 * time.Millisecond, HotPause: 20 * time.Millisecond,
	OwnKeys: 2, OwnWorkers: 2, OwnHold: 400 * time.Millisecond, OwnPause: 400 * time.Millisecond}

// Scale runs the scale measurement for each process count in counts.
func (w *WaitEnv) Scale(ctx context.Context, spawn ProcSpawner, counts []int, sh ScaleShape, warm, d time.Duration) (*ScaleResult, error) {
	res := &ScaleResult{Bench: "syncguard", Driver: w.Driver, Workload: "w6_scale",
		Method: fmt.Sprintf("N processes (a pool of 2 and a Backend each); each runs %d worker(s) on one shared hot key (hold %v, pause %v) and %d keys of its own with %d workers each (hold %v, pause %v); "+
			"CPU = getrusage user+system of the process over the window; notified = notifications its LISTEN connection delivered; relevant hand-offs = hot-key hand-offs (all processes) + its own acquisitions",
			sh.HotWorkers, sh.HotHold, sh.HotPause, sh.OwnKeys, sh.OwnWorkers, sh.OwnHold, sh.OwnPause),
		Params: map[string]any{"seconds": d.Seconds(), "warm_s": warm.Seconds(), "variant": VarNotify}}
	admin, err := sql.Open(w.SQLDriver, w.DSN)
	if err != nil {
		return nil, err
	}
	defer admin.Close()
	admin.SetMaxOpenConns(1)
	for _, n := range counts {
		hot := fmt.Sprintf("%s:scale:%d:hot", w.RunID, n)
		var jobs []ProcJob
		for i := range n {
			gs := []ProcGroup{{Tag: "hot", Key: hot, Workers: sh.HotWorkers, Hold: sh.HotHold, Pause: sh.HotPause}}
			for k := range sh.OwnKeys {
				gs = append(gs, ProcGroup{Tag: "own", Key: fmt.Sprintf("%s:scale:%d:own:%d:%d", w.RunID, n, i, k), Workers: sh.OwnWorkers, Hold: sh.OwnHold, Pause: sh.OwnPause})
			}
			jobs = append(jobs, ProcJob{Driver: w.Driver, DSN: w.DSN, Variant: VarNotify, Pool: 2, Groups: gs})
		}
		// The server's CPU over the window, sampled at its edges.
		var srv0, srv1 map[int]int64
		var span time.Duration
		prs, err := RunProcs(ctx, spawn, jobs, warm, d, func(start, end time.Time) {
			time.Sleep(time.Until(start))
			t0 := time.Now()
			srv0 = serverCPU(ctx, admin)
			time.Sleep(time.Until(end))
			srv1 = serverCPU(ctx, admin)
			span = time.Since(t0)
		})
		if err != nil {
			return nil, fmt.Errorf("scale, %d processes: %w", n, err)
		}
		row := ScaleRow{Processes: n, Seconds: d.Seconds()}
		secs := d.Seconds()
		var hotWaits []time.Duration
		var hot0, own, notified, cpu, stmts float64
		for _, pr := range prs {
			hotHolds := 0
			for _, g := range pr.Groups {
				row.Timeouts += g.Timeouts
				row.Errors += g.Errors
				if row.FirstError == "" {
					row.FirstError = g.FirstError
				}
				if g.Tag == "hot" {
					hot0 += float64(g.Acquired)
					hotHolds += g.Acquired
					hotWaits = append(hotWaits, g.Waits...)
					row.TimeoutsHot += g.Timeouts
				} else {
					own += float64(g.Acquired)
				}
			}
			if hotHolds == 0 {
				row.ProcsWithoutHot++
			}
			notified += float64(pr.Notified)
			c := float64(pr.CPUNs) / 1e6 / secs
			cpu += c
			row.CPUMsPerSMax = max(row.CPUMsPerSMax, c)
			stmts += float64(pr.Attempts + pr.Releases)
		}
		fn := float64(n)
		row.HotHandOffs = hot0 / secs
		row.OwnHandOffs = own / fn / secs
		row.AllAcquisitions = (hot0 + own) / secs
		row.NotifiedPerS = notified / fn / secs
		if hot0 > 0 {
			row.NotifiedPerHot = notified / fn / hot0
		}
		relevant := hot0 + own/fn // per process: all hot hand-offs + its own acquisitions
		if relevant > 0 {
			row.NotifiedPerOwnOp = notified / fn / relevant
			row.CPUUsPerRelevant = cpu / fn * secs * 1e3 / relevant
		}
		row.CPUMsPerS = cpu / fn
		if stmts > 0 {
			row.CPUUsPerStatement = cpu * secs * 1e3 / stmts
		}
		row.StatementsPerS = stmts / fn / secs
		if srv0 != nil && srv1 != nil {
			var sum int64
			for pid, v := range srv1 {
				if v0, ok := srv0[pid]; ok {
					sum += v - v0
				}
			}
			row.ServerCPUPerS = float64(sum) / 1e6 / span.Seconds()
			if row.AllAcquisitions > 0 {
				row.ServerUsPerAcq = row.ServerCPUPerS * 1e3 / row.AllAcquisitions
			}
		}
		_, row.HotWaitP99, row.HotWaitMax = summarizeMs(hotWaits)
		res.Rows = append(res.Rows, row)
	}
	if len(res.Rows) >= 2 {
		a, b := res.Rows[0], res.Rows[len(res.Rows)-1]
		ratio := func(x, y float64) float64 {
			if y == 0 {
				return 0
			}
			return x / y
		}
		rc := ratio(b.CPUUsPerRelevant, a.CPUUsPerRelevant)
		rn := ratio(b.NotifiedPerOwnOp, a.NotifiedPerOwnOp)
		res.Targets = append(res.Targets,
			Target{Name: fmt.Sprintf("scale: notifications per process per relevant hand-off, %d vs %d processes", b.Processes, a.Processes), Value: rn, Goal: "<= 1.25x (does not grow)", Met: rn > 0 && rn <= 1.25},
			Target{Name: fmt.Sprintf("scale: client CPU per process per relevant hand-off, %d vs %d processes", b.Processes, a.Processes), Value: rc, Goal: "<= 1.5x (does not grow; noisy)", Met: rc > 0 && rc <= 1.5})
		for _, x := range res.Rows {
			res.Targets = append(res.Targets, Target{Name: fmt.Sprintf("scale: %d processes: acquisition timeouts + errors", x.Processes), Value: float64(x.Timeouts + x.Errors), Goal: "0", Met: x.Timeouts+x.Errors == 0})
		}
	}
	return res, nil
}

// serverCPU reads the CPU time (user + system, in ns) of every server
// process that pg_stat_activity lists, from /proc (the server must be on
// this machine). nil when it cannot.
func serverCPU(ctx context.Context, db *sql.DB) map[int]int64 {
	rows, err := db.QueryContext(ctx, "SELECT pid FROM pg_stat_activity")
	if err != nil {
		return nil
	}
	defer rows.Close()
	m := map[int]int64{}
	for rows.Next() {
		var pid int
		if rows.Scan(&pid) != nil {
			return nil
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:]) // f[0] is field 3 (state)
		if len(f) < 13 {
			continue
		}
		ut, _ := strconv.ParseInt(f[11], 10, 64) // field 14
		st, _ := strconv.ParseInt(f[12], 10, 64) // field 15
		m[pid] = (ut + st) * int64(time.Second) / clockTicks
	}
	if rows.Err() != nil || len(m) == 0 {
		return nil
	}
	return m
}

// clockTicks is USER_HZ (100 on Linux).
const clockTicks = 100

func (r *ScaleResult) table() table {
	t := table{driver: r.Driver, title: "w6_scale: the work a process does per hand-off, by number of processes", method: r.Method, targets: r.Targets,
		cols: []string{"processes", "hot hand-offs/s", "own acquisitions/s per process", "notified/s per process", "notified per relevant hand-off", "notified per hot hand-off",
			"CPU ms/s per process (max)", "CPU µs per relevant hand-off", "CPU µs per statement", "statements/s per process", "server CPU ms/s", "server CPU µs per acquisition", "hot wait p99 / max ms", "timeouts", "errors"}}
	for _, x := range r.Rows {
		t.rows = append(t.rows, []string{fmt.Sprint(x.Processes), fmt.Sprintf("%.1f", x.HotHandOffs), fmt.Sprintf("%.1f", x.OwnHandOffs),
			fmt.Sprintf("%.1f", x.NotifiedPerS), fmt.Sprintf("%.2f", x.NotifiedPerOwnOp), fmt.Sprintf("%.2f", x.NotifiedPerHot),
			fmt.Sprintf("%.1f (%.1f)", x.CPUMsPerS, x.CPUMsPerSMax), fmt.Sprintf("%.0f", x.CPUUsPerRelevant), fmt.Sprintf("%.0f", x.CPUUsPerStatement),
			fmt.Sprintf("%.1f", x.StatementsPerS), fmt.Sprintf("%.0f", x.ServerCPUPerS), fmt.Sprintf("%.0f", x.ServerUsPerAcq),
			fmt.Sprintf("%.0f / %.0f", x.HotWaitP99, x.HotWaitMax), fmt.Sprint(x.Timeouts), fmt.Sprint(x.Errors)})
	}
	return t
}
