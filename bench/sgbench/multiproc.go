package sgbench

import (
	"bufio"
	"context"
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

	"github.com/syncguard/syncguard-go/internal/kit"
	"github.com/syncguard/syncguard-go/syncguard"
)

// Workloads over several OS processes (the benchmark program runs itself
// with -w6-proc, once per process; ServeProc is the child's side):
//
//	W6e       fairness to far clients: W6a's and W6b's shapes over 4
//	          processes, 2 of them behind a proxy that delays each
//	          direction by 5 ms, then 10 ms (wait_fairness.go)
//	w6_scale  the work a process does per hand-off with 5 and with 50
//	          processes, each waiting on keys of its own and on one shared
//	          hot key (wait_scale.go)

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
// kit.Queuer whenever the Locker beneath is one (a wrapper that is
// not would make Lock poll without a place in the queue), and counts its
// Waiters' attempts too.
type countLocker struct {
	syncguard.Locker
	attempts, releases *atomic.Int64
}

// Queue implements kit.Queuer: the Locker's Waiter, counted; nil (no
// queue: Lock polls) when the Locker has none.
func (c countLocker) Queue(key, identity string, once bool) kit.Wait {
	q, ok := c.Locker.(kit.Queuer)
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
	kit.Wait
	attempts *atomic.Int64
}

func (w countWaiter) Attempt(ctx context.Context, ttl time.Duration) (syncguard.AcquireResult, error) {
	w.attempts.Add(1)
	return w.Wait.Attempt(ctx, ttl)
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

// ---------------------------------------------------------------- scale
