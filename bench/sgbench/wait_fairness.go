package sgbench

import (
	"context"
	"fmt"
	"strings"
	"time"
)

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
