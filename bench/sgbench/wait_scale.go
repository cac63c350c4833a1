package sgbench

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

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
