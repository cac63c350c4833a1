package sgbench

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The etcd workload: syncguard side by side with etcd 3.4's
// concurrency.Mutex and Election (etcd-server from Debian, started on a
// temporary data directory by the bench; the v3 client from the module
// proxy), all measured in one run, interleaved:
//
//	w6a, w6b   4 processes on one key: 8 workers, hold 10 ms, think 20 ms;
//	           4 workers, hold 50 ms, think 50 ms (W6e's process model):
//	           hand-offs/s, wait p50/p99/max, holds per process
//	hand-off   one waiter queued in another process: from the holder's
//	           unlock returning to the waiter's lock returning
//	sequential lock+unlock of a free key, one worker
//	resign     election: from the leader's Resign returning to the
//	           candidate (another process) becoming leader
//	crash      election, TTL 2 s: from kill -9 of the leader's process to
//	           the candidate (another process) becoming leader
//
// syncguard runs on pgx and on lib/pq opened with sgpq.NewConnector.

// EtcdSystem is one system of the comparison.
type EtcdSystem struct {
	Name   string // as reported
	Driver string // the child's ProcJob.Driver: "etcd", "pgx" or "pqc"
	DSN    string // the etcd endpoint or the PostgreSQL DSN
	Env    *WaitEnv
}

// EtcdParams size the etcd workload.
type EtcdParams struct {
	Rounds     int
	Duration   time.Duration // per shape, system and round
	HandOffs   int           // per system
	Sequential time.Duration // per system
	Resigns    int           // per system
	Crashes    int           // per system
	ElectTTL   time.Duration // the crash takeover's TTL (etcd: whole seconds)
	// Sample, when set, runs during each syncguard contention run's
	// measured window (-trace: Tracer.SampleQueue of its key).
	Sample func(key string, start, end time.Time)
}

// DefaultEtcdParams: about 4 minutes.
var DefaultEtcdParams = EtcdParams{Rounds: 2, Duration: 8 * time.Second, HandOffs: 60, Sequential: 3 * time.Second,
	Resigns: 20, Crashes: 5, ElectTTL: 2 * time.Second}

// PeerSpawner starts a child process with job and returns it and a
// function that kills it (SIGKILL).
type PeerSpawner func(job ProcJob) (c *Child, kill func(), err error)

// EtcdRow is one measurement of one system.
type EtcdRow struct {
	Measure  string  `json:"measure"`
	System   string  `json:"system"`
	PerS     float64 `json:"per_s,omitempty"` // hand-offs/s (w6a, w6b), lock+unlock/s (sequential)
	N        int     `json:"n"`
	P50      float64 `json:"p50_ms"`
	P99      float64 `json:"p99_ms"`
	Max      float64 `json:"max_ms"`
	PerProc  []int   `json:"holds_per_process,omitempty"`
	Fairness float64 `json:"min_over_max_holds,omitempty"`
	Errors   int     `json:"errors"`
	FirstErr string  `json:"first_error,omitempty"`
	VsEtcd   string  `json:"vs_etcd,omitempty"` // ratios syncguard / etcd
}

// EtcdResult is the etcd workload: one JSON line.
type EtcdResult struct {
	Bench    string         `json:"bench"`
	Driver   string         `json:"driver"`
	Workload string         `json:"workload"`
	Method   string         `json:"method"`
	Params   map[string]any `json:"params"`
	Rows     []EtcdRow      `json:"rows"`
	Targets  []Target       `json:"targets,omitempty"`
}

// EtcdCompare runs the etcd workload; systems[0] is etcd.
func EtcdCompare(ctx context.Context, spawn PeerSpawner, systems []EtcdSystem, p EtcdParams, runID, etcdVersion string) (*EtcdResult, error) {
	res := &EtcdResult{Bench: "syncguard", Driver: "etcd vs syncguard", Workload: "etcd",
		Method: "etcd " + etcdVersion + " (concurrency.Mutex, a session per worker; Election) vs syncguard (Lock; election, TTL as etcd's session), " +
			"one run, rounds interleaved; waits and hand-offs within the measured window (after 1 s warm-up); ratios syncguard / etcd",
		Params: map[string]any{"rounds": p.Rounds, "seconds": p.Duration.Seconds(), "processes": 4, "handoffs": p.HandOffs,
			"resigns": p.Resigns, "crashes": p.Crashes, "election_ttl_s": p.ElectTTL.Seconds()}}
	procSpawn := func(job ProcJob) (*Child, error) { c, _, err := spawn(job); return c, err }
	type acc struct {
		waits   []time.Duration
		perProc []int
		errs    int
		first   string
		secs    float64
	}
	accs := map[string]*acc{}
	for r := range p.Rounds {
		for _, sh := range FairShapes {
			for si, sys := range systems {
				key := fmt.Sprintf("%s:etcd:%s:%d:%d", runID, sh.Name, si, r)
				var jobs []ProcJob
				for range 4 {
					jobs = append(jobs, ProcJob{Driver: sys.Driver, DSN: sys.DSN, Variant: VarNotify, Pool: 2,
						Groups: []ProcGroup{{Tag: sh.Name, Key: key, Workers: sh.WorkersPerProcess, Hold: sh.Hold, Pause: sh.Pause}}})
				}
				var during func(start, end time.Time)
				if p.Sample != nil && sys.Driver != "etcd" {
					during = func(start, end time.Time) { p.Sample(key, start, end) }
				}
				prs, err := RunProcs(ctx, procSpawn, jobs, time.Second, p.Duration, during)
				if err != nil {
					return nil, fmt.Errorf("%s %s: %w", sh.Name, sys.Name, err)
				}
				a := accs[sh.Name+"\x00"+sys.Name]
				if a == nil {
					a = &acc{perProc: make([]int, 4)}
					accs[sh.Name+"\x00"+sys.Name] = a
				}
				a.secs += p.Duration.Seconds()
				for i, pr := range prs {
					g := pr.Groups[0]
					a.perProc[i] += g.Acquired
					a.waits = append(a.waits, g.Waits...)
					a.errs += g.Errors + g.Timeouts
					if a.first == "" {
						a.first = g.FirstError
					}
				}
			}
		}
	}
	for _, sh := range FairShapes {
		for _, sys := range systems {
			a := accs[sh.Name+"\x00"+sys.Name]
			row := EtcdRow{Measure: fmt.Sprintf("%s: %d workers, hold %v, think %v", sh.Name, 4*sh.WorkersPerProcess, sh.Hold, sh.Pause),
				System: sys.Name, N: len(a.waits), PerProc: a.perProc, Errors: a.errs, FirstErr: a.first}
			row.PerS = float64(row.N) / a.secs
			row.P50, row.P99, row.Max = summarizeMs(a.waits)
			lo, hi := a.perProc[0], a.perProc[0]
			for _, n := range a.perProc {
				lo, hi = min(lo, n), max(hi, n)
			}
			if hi > 0 {
				row.Fairness = float64(lo) / float64(hi)
			}
			res.Rows = append(res.Rows, row)
		}
	}
	steps := []struct {
		name string
		fn   func(context.Context, EtcdSystem, string) (EtcdRow, error)
	}{
		{"hand-off", func(ctx context.Context, s EtcdSystem, key string) (EtcdRow, error) {
			return etcdHandOff(ctx, spawn, s, key, p.HandOffs)
		}},
		{"sequential", func(ctx context.Context, s EtcdSystem, key string) (EtcdRow, error) {
			return etcdSequential(ctx, s, key, p.Sequential)
		}},
		{"resign", func(ctx context.Context, s EtcdSystem, key string) (EtcdRow, error) {
			return etcdResign(ctx, spawn, s, key, p.Resigns, p.ElectTTL)
		}},
		{"crash", func(ctx context.Context, s EtcdSystem, key string) (EtcdRow, error) {
			return etcdCrash(ctx, spawn, s, key, p.Crashes, p.ElectTTL)
		}},
	}
	for _, st := range steps {
		for si, sys := range systems {
			row, err := st.fn(ctx, sys, fmt.Sprintf("%s:etcd:%s:%d", runID, st.name, si))
			if err != nil {
				return nil, fmt.Errorf("%s %s: %w", st.name, sys.Name, err)
			}
			res.Rows = append(res.Rows, row)
		}
	}
	res.compare()
	return res, nil
}

// compare fills VsEtcd and the targets: for each syncguard row, against
// etcd's row of the same measure.
func (r *EtcdResult) compare() {
	etcd := map[string]EtcdRow{}
	for _, x := range r.Rows {
		if x.System == "etcd" {
			etcd[x.Measure] = x
		}
	}
	ratio := func(a, b float64) float64 {
		if b == 0 {
			return 0
		}
		return a / b
	}
	for i := range r.Rows {
		x := &r.Rows[i]
		e, ok := etcd[x.Measure]
		if x.System == "etcd" || !ok {
			continue
		}
		var parts []string
		if x.PerS > 0 {
			parts = append(parts, fmt.Sprintf("per s %.2fx", ratio(x.PerS, e.PerS)))
		}
		if x.P50 > 0 || x.P99 > 0 {
			parts = append(parts, fmt.Sprintf("p50 %.2fx, p99 %.2fx, max %.2fx", ratio(x.P50, e.P50), ratio(x.P99, e.P99), ratio(x.Max, e.Max)))
		}
		x.VsEtcd = strings.Join(parts, "; ")
		name := func(s string) string {
			return fmt.Sprintf("etcd %s, %s: %s", x.System, strings.SplitN(x.Measure, ":", 2)[0], s)
		}
		switch {
		case strings.HasPrefix(x.Measure, "w6"):
			rp, rm, rh := ratio(x.P99, e.P99), ratio(x.Max, e.Max), ratio(x.PerS, e.PerS)
			r.Targets = append(r.Targets,
				Target{Name: name("wait p99 / etcd's"), Value: rp, Goal: "<= 1.2", Met: rp > 0 && rp <= 1.2},
				Target{Name: name("wait max / etcd's"), Value: rm, Goal: "<= 1.5", Met: rm > 0 && rm <= 1.5},
				Target{Name: name("hand-offs/s / etcd's"), Value: rh, Goal: ">= 1.1", Met: rh >= 1.1},
				Target{Name: name("errors + timeouts"), Value: float64(x.Errors), Goal: "0", Met: x.Errors == 0})
		case x.Measure == etcdHandOffMeasure:
			r50, r99 := ratio(x.P50, e.P50), ratio(x.P99, e.P99)
			r.Targets = append(r.Targets,
				Target{Name: name("p50 / etcd's"), Value: r50, Goal: "<= 1 (no worse)", Met: r50 > 0 && r50 <= 1},
				Target{Name: name("p99 / etcd's"), Value: r99, Goal: "<= 1 (no worse)", Met: r99 > 0 && r99 <= 1})
		}
	}
}

const etcdHandOffMeasure = "hand-off: one waiter queued (another process), unlock -> next holder"

// readLine reads one line from c within d.
func readLine(c *Child, d time.Duration) (string, error) {
	type rl struct {
		s   string
		err error
	}
	ch := make(chan rl, 1)
	go func() { s, err := c.Out.ReadString('\n'); ch <- rl{s, err} }()
	select {
	case x := <-ch:
		return strings.TrimSpace(x.s), x.err
	case <-time.After(d):
		return "", fmt.Errorf("no answer within %v", d)
	}
}

// answer parses "<word> <unix ns>".
func answer(line, word string) (time.Time, error) {
	f := strings.Fields(line)
	if len(f) != 2 || f[0] != word {
		return time.Time{}, fmt.Errorf("child: %q", line)
	}
	ns, err := strconv.ParseInt(f[1], 10, 64)
	return time.Unix(0, ns), err
}

func startPeer(spawn PeerSpawner, s EtcdSystem, ttl time.Duration) (*Child, func(), error) {
	c, kill, err := spawn(ProcJob{Driver: s.Driver, DSN: s.DSN, Variant: "peer:" + ttl.String(), Pool: 2})
	if err != nil {
		return nil, nil, err
	}
	if line, err := readLine(c, 30*time.Second); err != nil || line != "ready" {
		kill()
		c.Close()
		return nil, nil, fmt.Errorf("child did not start: %q %v", line, err)
	}
	return c, kill, nil
}

func stopPeer(c *Child) {
	c.In.Close()
	c.Close() //nolint:errcheck
}

func parentWorker(ctx context.Context, s EtcdSystem, ttl time.Duration) (peerSys, peerWorker, error) {
	sys, err := openPeer(ctx, s.Env, ProcJob{Driver: s.Driver, DSN: s.DSN, Pool: 2})
	if err != nil {
		return nil, nil, err
	}
	w, err := sys.worker(ctx, ttl)
	if err != nil {
		sys.close()
		return nil, nil, err
	}
	return sys, w, nil
}

func etcdHandOff(ctx context.Context, spawn PeerSpawner, s EtcdSystem, key string, n int) (EtcdRow, error) {
	row := EtcdRow{Measure: etcdHandOffMeasure, System: s.Name}
	sys, w, err := parentWorker(ctx, s, 30*time.Second)
	if err != nil {
		return row, err
	}
	defer sys.close()
	defer w.close()
	c, _, err := startPeer(spawn, s, 30*time.Second)
	if err != nil {
		return row, err
	}
	defer stopPeer(c)
	var lat []time.Duration
	for i := range n + 5 { // the first 5 warm up
		unlock, err := w.lock(ctx, key)
		if err != nil {
			return row, err
		}
		fmt.Fprintf(c.In, "lock %s\n", key)
		time.Sleep(30*time.Millisecond + time.Duration(i%5)*5*time.Millisecond)
		if err := unlock(ctx); err != nil {
			return row, err
		}
		released := time.Now()
		line, err := readLine(c, 30*time.Second)
		if err != nil {
			return row, err
		}
		got, err := answer(line, "got")
		if err != nil {
			row.Errors++
			row.FirstErr = line
			continue
		}
		if i >= 5 {
			lat = append(lat, got.Sub(released))
		}
	}
	row.N = len(lat)
	row.P50, row.P99, row.Max = summarizeMs(lat)
	return row, nil
}

func etcdSequential(ctx context.Context, s EtcdSystem, key string, d time.Duration) (EtcdRow, error) {
	row := EtcdRow{Measure: "sequential lock+unlock of a free key, one worker", System: s.Name}
	sys, w, err := parentWorker(ctx, s, 30*time.Second)
	if err != nil {
		return row, err
	}
	defer sys.close()
	defer w.close()
	var lat []time.Duration
	t0 := time.Now()
	for time.Since(t0) < d {
		a := time.Now()
		unlock, err := w.lock(ctx, key)
		if err == nil {
			err = unlock(ctx)
		}
		if err != nil {
			return row, err
		}
		lat = append(lat, time.Since(a))
	}
	row.N = len(lat)
	row.PerS = float64(row.N) / time.Since(t0).Seconds()
	row.P50, row.P99, row.Max = summarizeMs(lat)
	return row, nil
}

func etcdResign(ctx context.Context, spawn PeerSpawner, s EtcdSystem, key string, n int, ttl time.Duration) (EtcdRow, error) {
	row := EtcdRow{Measure: fmt.Sprintf("election: resign -> new leader (another process), TTL %v", ttl), System: s.Name}
	sys, w, err := parentWorker(ctx, s, ttl)
	if err != nil {
		return row, err
	}
	defer sys.close()
	defer w.close()
	c, _, err := startPeer(spawn, s, ttl)
	if err != nil {
		return row, err
	}
	defer stopPeer(c)
	var lat []time.Duration
	for i := range n + 2 {
		resign, err := w.campaign(ctx, key)
		if err != nil {
			return row, err
		}
		fmt.Fprintf(c.In, "campaign %s\n", key)
		time.Sleep(100 * time.Millisecond)
		if err := resign(ctx); err != nil {
			return row, err
		}
		resigned := time.Now()
		line, err := readLine(c, 30*time.Second)
		if err != nil {
			return row, err
		}
		got, err := answer(line, "leader")
		if err != nil {
			return row, err
		}
		if i >= 2 {
			lat = append(lat, got.Sub(resigned))
		}
		fmt.Fprintln(c.In, "resign")
		if line, err := readLine(c, 30*time.Second); err != nil || line != "resigned" {
			return row, fmt.Errorf("child resign: %q %v", line, err)
		}
	}
	row.N = len(lat)
	row.P50, row.P99, row.Max = summarizeMs(lat)
	return row, nil
}

func etcdCrash(ctx context.Context, spawn PeerSpawner, s EtcdSystem, key string, n int, ttl time.Duration) (EtcdRow, error) {
	row := EtcdRow{Measure: fmt.Sprintf("election: kill -9 of the leader's process -> new leader (another process), TTL %v", ttl), System: s.Name}
	leader, kill, err := startPeer(spawn, s, ttl)
	if err != nil {
		return row, err
	}
	fmt.Fprintf(leader.In, "campaign %s\n", key)
	if line, err := readLine(leader, 30*time.Second); err != nil || !strings.HasPrefix(line, "leader ") {
		kill()
		stopPeer(leader)
		return row, fmt.Errorf("first leader: %q %v", line, err)
	}
	var lat []time.Duration
	for range n {
		next, nkill, err := startPeer(spawn, s, ttl)
		if err != nil {
			kill()
			stopPeer(leader)
			return row, err
		}
		fmt.Fprintf(next.In, "campaign %s\n", key)
		// The candidate queues, and the leader extends (keeps alive) a
		// random phase before the kill.
		time.Sleep(300*time.Millisecond + time.Duration(len(lat)*137%700)*time.Millisecond)
		kill()
		killed := time.Now()
		stopPeer(leader)
		line, err := readLine(next, 3*ttl+30*time.Second)
		leader, kill = next, nkill
		if err != nil {
			kill()
			stopPeer(leader)
			return row, err
		}
		got, err := answer(line, "leader")
		if err != nil {
			kill()
			stopPeer(leader)
			return row, err
		}
		lat = append(lat, got.Sub(killed))
	}
	kill()
	stopPeer(leader)
	row.N = len(lat)
	row.P50, row.P99, row.Max = summarizeMs(lat)
	return row, nil
}

func (r *EtcdResult) table() table {
	t := table{driver: r.Driver, title: "etcd: syncguard side by side with etcd's concurrency.Mutex and Election",
		method: r.Method, align: "ll", targets: r.Targets,
		cols: []string{"measure", "system", "per s", "n", "p50 ms", "p99 ms", "max ms", "holds per process", "min/max holds", "errors", "vs etcd"}}
	for _, x := range r.Rows {
		perS, fair, pp := "-", "-", "-"
		if x.PerS > 0 {
			perS = fmt.Sprintf("%.1f", x.PerS)
		}
		if x.PerProc != nil {
			pp = strings.Trim(fmt.Sprint(x.PerProc), "[]")
			fair = fmt.Sprintf("%.2f", x.Fairness)
		}
		t.rows = append(t.rows, []string{x.Measure, x.System, perS, fmt.Sprint(x.N), fmt.Sprintf("%.2f", x.P50), fmt.Sprintf("%.2f", x.P99),
			fmt.Sprintf("%.2f", x.Max), pp, fair, fmt.Sprint(x.Errors), x.VsEtcd})
	}
	return t
}
