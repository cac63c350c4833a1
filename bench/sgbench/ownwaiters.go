package sgbench

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/syncguard/syncguard-go/syncguard"
)

// ---------------------------------------------------------------- w7b

// OwnWaitersParams sizes w7b.
type OwnWaitersParams struct {
	Counts                []int // waiting Backends on the hot keys, ascending; the first is the reference
	HotKeys               int
	HotHold, HotPause     time.Duration
	Probe                 int // Backends on the fourth key
	ProbeHold, ProbePause time.Duration
	Duration              time.Duration // measured per case, over Rounds interleaved segments
	Rounds                int
	Warm                  time.Duration // per segment
}

// OwnWaitersRow is one number of waiting Backends.
type OwnWaitersRow struct {
	Backends            int     `json:"backends"`
	Seconds             float64 `json:"seconds"`
	ProbeHandOffs       int     `json:"probe_handoffs"`
	ProbeHandOffsPer10s float64 `json:"probe_handoffs_per_10s"`
	ProbeRatio          float64 `json:"probe_handoffs_ratio"`
	ProbeWaitP50        float64 `json:"probe_wait_p50_ms"`
	ProbeWaitP99        float64 `json:"probe_wait_p99_ms"`
	ProbeP99Ratio       float64 `json:"probe_wait_p99_ratio"`
	ProbeTimeouts       int     `json:"probe_acquisition_timeouts"`
	HotHandOffsPerS     float64 `json:"hot_handoffs_per_s"` // all hot keys together
	NotifiedPerS        float64 `json:"notified_per_s"`     // delivered to all the Backends' LISTEN connections
	ServerCPUMsPerS     float64 `json:"server_cpu_ms_per_s"`
	ServerUsPerHandOff  float64 `json:"server_cpu_us_per_handoff"` // all keys
	ServerCPURatio      float64 `json:"server_cpu_per_handoff_ratio"`
	Listening           int     `json:"listen_connections"` // near a segment's end (the most of its segments): client sessions beyond the pools' and those there before
	Errors              int     `json:"errors"`
	FirstError          string  `json:"first_error,omitempty"`
}

func (OwnWaitersRow) layout() (string, []string, string) {
	return "w7b: a fourth key's hand-offs with 10 to 300 Backends waiting on three hot keys",
		[]string{"waiting Backends", "4th key hand-offs in 10 s", "× first", "4th key wait p50 / p99 ms", "p99 × first", "4th key timeouts", "hot hand-offs/s", "notified/s", "server CPU ms/s", "server CPU µs per hand-off", "× first", "LISTEN connections", "errors"}, ""
}

func (x OwnWaitersRow) cells() []string {
	return []string{fmt.Sprint(x.Backends), fmt.Sprintf("%.0f", x.ProbeHandOffsPer10s), fmt.Sprintf("%.2f", x.ProbeRatio),
		fmt.Sprintf("%.0f / %.0f", x.ProbeWaitP50, x.ProbeWaitP99), fmt.Sprintf("%.2f", x.ProbeP99Ratio), fmt.Sprint(x.ProbeTimeouts),
		fmt.Sprintf("%.0f", x.HotHandOffsPerS), fmt.Sprintf("%.0f", x.NotifiedPerS), fmt.Sprintf("%.0f", x.ServerCPUMsPerS),
		fmt.Sprintf("%.0f", x.ServerUsPerHandOff), fmt.Sprintf("%.2f", x.ServerCPURatio), fmt.Sprint(x.Listening), fmt.Sprint(x.Errors)}
}

// OwnWaiters runs w7b. admin is a pool for the measurements.
func (w *WaitEnv) OwnWaiters(ctx context.Context, admin *sql.DB, p OwnWaitersParams) (*FleetResult[OwnWaitersRow], error) {
	var notified atomic.Int64
	we := *w
	we.Notified = &notified
	probe := NewServerProbe(ctx, admin)
	res := &FleetResult[OwnWaitersRow]{Bench: "syncguard", Driver: w.Driver, Workload: "w7b",
		Method: fmt.Sprintf("N Backends (a pool of 2 and a Backend each, as separate processes), Backend i looping WithLock(hot key i mod %d, hold %v) then pause %v without acquisition timeout; "+
			"%d more Backends loop WithLock(a fourth key, hold %v) then pause %v with the default options (timeout 5 s); cases interleaved in %d rounds; the Backends of the larger cases stay open but idle (no LISTEN) in the smaller ones; "+
			"server CPU = user+system of the postmaster and all its children (/proc)",
			p.HotKeys, p.HotHold, p.HotPause, p.Probe, p.ProbeHold, p.ProbePause, p.Rounds),
		Params: map[string]any{"hot_keys": p.HotKeys, "hot_hold_ms": msf(p.HotHold), "hot_pause_ms": msf(p.HotPause), "probe_backends": p.Probe,
			"probe_hold_ms": msf(p.ProbeHold), "probe_pause_ms": msf(p.ProbePause), "seconds_per_case": p.Duration.Seconds(), "rounds": p.Rounds,
			"backends": p.Counts, "variant": VarNotify, "server_cpu_measured": probe != nil}}
	before, err := countSessions(ctx, admin)
	if err != nil {
		return nil, err
	}
	hot, err := we.openProcs(ctx, VarNotify, slices.Max(p.Counts), 2)
	if err != nil {
		return nil, err
	}
	defer closeAll(hot)
	probeProcs, err := we.openProcs(ctx, VarNotify, p.Probe, 2)
	if err != nil {
		return nil, err
	}
	defer closeAll(probeProcs)
	type cell struct {
		probe, hot GroupStats
		win        window
		listening  int
	}
	cells := map[int]*cell{}
	hotOpts := &syncguard.LockOptions{TTL: 30 * time.Second, Acquisition: syncguard.AcquisitionOptions{Timeout: -1}}
	seg := func(n int, tag string, warm, d time.Duration, c *cell) error {
		var gs []*loopGroup
		for k := range p.HotKeys {
			g := &loopGroup{key: fmt.Sprintf("%s:w7b:%s:hot:%d", w.RunID, tag, k), hold: p.HotHold, pause: p.HotPause, opts: hotOpts}
			for i := k; i < n; i += p.HotKeys {
				g.procs = append(g.procs, hot[i])
			}
			gs = append(gs, g)
		}
		pg := &loopGroup{key: fmt.Sprintf("%s:w7b:%s:probe", w.RunID, tag), procs: probeProcs, hold: p.ProbeHold, pause: p.ProbePause,
			opts: &syncguard.LockOptions{TTL: 30 * time.Second}}
		c.win.probe, c.win.notified = probe, &notified
		runLoops(ctx, append(gs, pg), warm, d, func(start, end time.Time) {
			var wg sync.WaitGroup
			wg.Go(func() { // the LISTEN sessions near the window's end, while all wait
				time.Sleep(time.Until(end.Add(-d / 10)))
				if _, l, err := listenConns(ctx, admin, before, probeProcs, hot); err == nil {
					c.listening = max(c.listening, l)
				}
			})
			c.win.during(start, end)
			wg.Wait()
		})
		addStats(&c.probe, &pg.st)
		for _, g := range gs {
			addStats(&c.hot, &g.st)
		}
		return errors.Join(reopenAll(hot[:n]), reopenAll(probeProcs))
	}
	if err := seg(min(p.Counts[0], len(hot)), "warm", time.Second, time.Second, &cell{}); err != nil {
		return nil, err
	}
	d := p.Duration / time.Duration(p.Rounds)
	for r := range p.Rounds {
		for _, n := range rotate(p.Counts, r) {
			if cells[n] == nil {
				cells[n] = &cell{}
			}
			if err := seg(n, fmt.Sprintf("%d:%d", r, n), p.Warm, d, cells[n]); err != nil {
				return nil, err
			}
		}
	}
	var first *OwnWaitersRow
	for _, n := range p.Counts {
		c := cells[n]
		secs := c.win.span.Seconds()
		row := OwnWaitersRow{Backends: n, Seconds: secs, ProbeHandOffs: c.probe.Acquired, ProbeTimeouts: c.probe.Timeouts, Listening: c.listening,
			Errors: c.probe.Errors + c.hot.Errors + c.hot.Timeouts, FirstError: c.probe.FirstError}
		if row.FirstError == "" {
			row.FirstError = c.hot.FirstError
		}
		all := c.probe.Acquired + c.hot.Acquired
		if secs > 0 {
			row.ProbeHandOffsPer10s = float64(c.probe.Acquired) * 10 / secs
			row.HotHandOffsPerS = float64(c.hot.Acquired) / secs
			row.NotifiedPerS = float64(c.win.notes) / secs
			row.ServerCPUMsPerS = float64(c.win.cpuNs) / 1e6 / secs
		}
		if all > 0 {
			row.ServerUsPerHandOff = float64(c.win.cpuNs) / 1e3 / float64(all)
		}
		row.ProbeWaitP50, row.ProbeWaitP99, _ = summarizeMs(c.probe.Waits)
		if first == nil {
			first = &row
		}
		row.ProbeRatio = ratio(row.ProbeHandOffsPer10s, first.ProbeHandOffsPer10s)
		row.ProbeP99Ratio = ratio(row.ProbeWaitP99, first.ProbeWaitP99)
		row.ServerCPURatio = ratio(row.ServerUsPerHandOff, first.ServerUsPerHandOff)
		res.Rows = append(res.Rows, row)
	}
	if len(res.Rows) >= 2 {
		last := res.Rows[len(res.Rows)-1]
		res.Targets = append(res.Targets,
			Target{Name: fmt.Sprintf("w7b: fourth key's hand-offs with %d waiting Backends vs %d", last.Backends, first.Backends), Value: last.ProbeRatio, Goal: ">= 0.8x", Met: last.ProbeRatio >= 0.8})
	}
	return res, nil
}

func addStats(dst, src *GroupStats) {
	dst.Acquired += src.Acquired
	dst.HeldNs += src.HeldNs
	dst.Timeouts += src.Timeouts
	dst.Errors += src.Errors
	if dst.FirstError == "" {
		dst.FirstError = src.FirstError
	}
	dst.Waits = append(dst.Waits, src.Waits...)
}
