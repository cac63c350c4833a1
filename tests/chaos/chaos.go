// Package chaos is syncguard-go's fault-injection suite: workers on both
// adapters acquire, extend and release contended keys through a TCP proxy
// (tests/pgtest/tcpproxy) that cuts, delays and black-holes connections,
// while the server's backends are terminated, its locks time out and the
// server itself crashes and restarts. Every run checks the lock invariants
// from the server timestamps the library returns, the error contract,
// recovery, and leaks. See docs/failure-model.md for what the runs
// measured.
//
// The files follow the jobs of a run: chaos.go sets it up, drives the load
// and assembles the report; faults.go schedules and injects the faults,
// restart.go is the crash-and-restart fault with its durability checks;
// worker.go is the load; adapters.go opens the pools and checks each
// operation's outcome; history.go checks the invariants afterwards;
// resource.go is the fenced resource; report.go and leaks.go measure.
//
// The short form runs as part of `go test ./...` in this module; the long
// form and the soak run are selected by environment variables (see the
// Makefile.inc targets chaos and soak).
package chaos

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/syncguard/syncguard-go/internal/rules"
	"github.com/syncguard/syncguard-go/pgxstd"
	"github.com/syncguard/syncguard-go/syncguard"
	"github.com/syncguard/syncguard-go/tests/pgtest"
	"github.com/syncguard/syncguard-go/tests/pgtest/history"
	"github.com/syncguard/syncguard-go/tests/pgtest/tcpproxy"
)

// Options configures a Run. Zero fields take the defaults noted.
type Options struct {
	Duration      time.Duration // load duration; default 20 s
	Seed          uint64        // 0: random
	Keys          int           // default 6
	RawWorkers    int           // per adapter, Backend with extends at the edge of expiry; default 4
	HelperWorkers int           // per adapter, syncguard.Lock with AutoExtend; default 2
	// WithLockWorkers per adapter run short critical sections through
	// syncguard.WithLock; default 0.
	WithLockWorkers int
	MaxOpenConns    int           // per adapter pool, below the workers: pool exhaustion; default 3
	TTL             time.Duration // default 1500 ms
	OpTimeout       time.Duration // context deadline of every operation; default 1 s
	// PQReadTimeout is the DeadlineDialer read timeout of the lib/pq pool;
	// default 2 s (above its statement_timeout of 1.5 s).
	PQReadTimeout time.Duration
	// Schedule is the fault plan; nil: ShortSchedule for loads up to 60 s,
	// else RandomSchedule.
	Schedule []Fault
	// ReleaseSlackMs: see History.Check. Default 100.
	ReleaseSlackMs int64
	// SampleEvery > 0 samples heap, goroutines and connections that often
	// (Report.Samples), for the soak run.
	SampleEvery time.Duration
	// NoEventLog keeps no per-key operation log (violations then print the
	// holdings only), so that a long soak's heap measures the library and
	// not the log.
	NoEventLog bool
	// CompactHistory has the checker check and forget finished holdings
	// before every sample (History.Compact), so that its memory stays
	// bounded over a long soak. Only for runs without crashes.
	CompactHistory bool
	// LinearDir is where the linearizability checker writes the
	// visualisation of a counterexample; default os.TempDir().
	LinearDir string
	Logf      func(format string, args ...any)
}

func (o *Options) defaults() {
	if o.Duration <= 0 {
		o.Duration = 20 * time.Second
	}
	if o.Seed == 0 {
		o.Seed = rand.Uint64()
	}
	if o.Keys <= 0 {
		o.Keys = 6
	}
	if o.RawWorkers <= 0 {
		o.RawWorkers = 4
	}
	if o.HelperWorkers < 0 {
		o.HelperWorkers = 0
	} else if o.HelperWorkers == 0 {
		o.HelperWorkers = 2
	}
	if o.MaxOpenConns <= 0 {
		o.MaxOpenConns = 3
	}
	if o.TTL <= 0 {
		o.TTL = 1500 * time.Millisecond
	}
	if o.OpTimeout <= 0 {
		o.OpTimeout = time.Second
	}
	if o.PQReadTimeout <= 0 {
		o.PQReadTimeout = 2 * time.Second
	}
	if o.ReleaseSlackMs <= 0 {
		o.ReleaseSlackMs = 100
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	if o.Schedule == nil {
		if o.Duration <= time.Minute {
			o.Schedule = ShortSchedule()
		} else {
			o.Schedule = RandomSchedule(rand.New(rand.NewPCG(o.Seed, 1)), o.Duration)
		}
	}
}

type runner struct {
	opts    Options
	srv     *pgtest.Server
	admin   *sql.DB
	adminB  *syncguard.Backend
	cfg     syncguard.Config
	proxy   *tcpproxy.Proxy
	hist    *history.History
	res     resource
	ctx     context.Context
	keys    []string
	adapt   []*adapter
	running atomic.Bool // false: errors no longer count (shutdown)

	dropTables  bool // setup created the tables; teardown drops them
	poolsClosed bool

	mu         sync.Mutex
	violations []history.Violation
	ops        map[string]int64
	errs       map[string]int64
	maxLat     map[string]time.Duration
	successes  map[string][][2]time.Time // adapter -> [start, end] of successful ops
	faults     []FaultRecord
	crashes    []crashMark
}

// crashMark is a restart: when the server was ready again, and the largest
// fence per key acknowledged before it went down.
type crashMark struct {
	ready    time.Time
	maxAcked map[string]int64
}

func (r *runner) violate(v history.Violation) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.violations) < 50 {
		r.violations = append(r.violations, v)
	}
}

// Run runs the fault suite against srv (which must support Restart for a
// schedule with restarts) and returns the report. An error means the run
// could not be set up; broken invariants are Report.Violations.
func Run(ctx context.Context, srv *pgtest.Server, opts Options) (*Report, error) {
	opts.defaults()
	r := &runner{opts: opts, srv: srv, hist: history.New(), res: resource{last: map[string]int64{}},
		ops: map[string]int64{}, errs: map[string]int64{}, maxLat: map[string]time.Duration{}, successes: map[string][][2]time.Time{}}
	defer r.teardown()
	baseGoroutines, err := r.setup(ctx)
	if err != nil {
		return nil, err
	}
	samples := r.load(ctx)
	r.computeRecovery()
	leaks := r.checkLeaks(ctx, baseGoroutines, r.closePools)
	return r.report(samples, leaks), nil
}

// setup creates the run's tables (with a random suffix), the admin pool
// and backend, the proxy and the adapters' pools. It returns the number of
// goroutines before the proxy and pools started, the baseline of the leak
// check. teardown undoes whatever setup did.
func (r *runner) setup(ctx context.Context) (baseGoroutines int, err error) {
	suffix := fmt.Sprintf("%08x", rand.Uint32())
	r.cfg = syncguard.Config{TableName: "chaos_" + suffix + "_locks", FenceTableName: "chaos_" + suffix + "_fences",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	for i := 0; i < r.opts.Keys; i++ {
		r.keys = append(r.keys, fmt.Sprintf("chaos:%s:key-%02d", suffix, i))
	}
	if r.admin, err = sql.Open("pgx", r.srv.DSN+"&application_name=chaos-admin"); err != nil {
		return 0, err
	}
	r.admin.SetMaxOpenConns(4)
	acfg := r.cfg
	acfg.Dialect = pgxstd.Dialect
	if err := syncguard.SetupSchema(ctx, r.admin, &acfg); err != nil {
		return 0, fmt.Errorf("setup schema: %w", err)
	}
	r.dropTables = true
	if err := r.installAudit(ctx); err != nil {
		return 0, err
	}
	if r.adminB, err = syncguard.New(r.admin, &acfg); err != nil {
		return 0, err
	}
	runtime.GC()
	baseGoroutines = runtime.NumGoroutine()
	if r.proxy, err = tcpproxy.New(net.JoinHostPort(r.srv.Host, fmt.Sprint(r.srv.Port))); err != nil {
		return 0, err
	}
	return baseGoroutines, r.openAdapters(suffix)
}

// closePools closes the adapters' pools and the proxy, once. The adapters
// stay in r.adapt: the leak check still counts their server sessions.
func (r *runner) closePools() {
	if r.poolsClosed {
		return
	}
	r.poolsClosed = true
	for _, a := range r.adapt {
		a.db.Close()
	}
	if r.proxy != nil {
		r.proxy.Close()
	}
}

// teardown closes everything setup opened and drops the run's tables.
func (r *runner) teardown() {
	r.closePools()
	if r.admin == nil {
		return
	}
	if r.dropTables {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = history.DropAudit(cctx, r.admin, r.cfg.TableName)
		_, _ = r.admin.ExecContext(cctx, `DROP TABLE IF EXISTS `+rules.QuoteIdent(r.cfg.TableName)+`, `+rules.QuoteIdent(r.cfg.FenceTableName))
	}
	r.admin.Close()
}

// load runs the workers and the fault schedule for opts.Duration, then
// stops the workers (a worker that does not stop within 20 s is a hung
// caller) and returns the soak samples.
func (r *runner) load(ctx context.Context) []Sample {
	opts := r.opts
	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	r.ctx = loadCtx
	r.running.Store(true)
	start := time.Now()
	opts.Logf("chaos: seed %d, %v of load, %d keys, %d raw + %d helper workers per adapter, pools of %d, ttl %v, schedule %v",
		opts.Seed, opts.Duration, opts.Keys, opts.RawWorkers, opts.HelperWorkers, opts.MaxOpenConns, opts.TTL, opts.Schedule)
	stopped := r.startWorkers()

	var samples []Sample
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		if opts.SampleEvery <= 0 {
			return
		}
		t := time.NewTicker(opts.SampleEvery)
		defer t.Stop()
		for {
			if opts.CompactHistory {
				// Holdings that ended and were acknowledged ten TTLs ago can
				// no longer meet a violation that is not already decided.
				r.hist.Compact(opts.ReleaseSlackMs, time.Now().Add(-10*opts.TTL))
			}
			samples = append(samples, r.sample(ctx, start))
			select {
			case <-t.C:
			case <-loadCtx.Done():
				return
			}
		}
	}()
	r.runSchedule(loadCtx, start)
	if wait := time.Until(start.Add(opts.Duration)); wait > 0 {
		select {
		case <-time.After(wait):
		case <-ctx.Done():
		}
	}
	r.awaitRecovery(ctx)
	r.running.Store(false)
	stopLoad()
	<-sampled
	r.proxy.SetDelay(0)
	r.proxy.Heal()
	select {
	case <-stopped:
	case <-time.After(20 * time.Second):
		r.violate(history.Violation{Rule: "workers stop within 20 s of the end of the load (no hung caller)", Detail: goroutineDump()})
		<-stopped
	}
	opts.Logf("chaos: load ended after %v", time.Since(start).Round(time.Millisecond))
	return samples
}

// awaitRecovery keeps the load on past its duration until every adapter
// has an operation that started after the last fault ended and succeeded,
// or the 10 s that recovery is allowed have passed (computeRecovery judges
// it): on a loaded machine the last fault (a restart) can end as the load
// does.
func (r *runner) awaitRecovery(ctx context.Context) {
	for {
		r.mu.Lock()
		var end time.Time
		for _, f := range r.faults {
			if f.End.After(end) {
				end = f.End
			}
		}
		recovered := 0
		for _, a := range r.adapt {
			for _, s := range r.successes[a.name] {
				if !s[0].Before(end) {
					recovered++
					break
				}
			}
		}
		r.mu.Unlock()
		if end.IsZero() || recovered == len(r.adapt) || time.Since(end) > 10*time.Second {
			return
		}
		select {
		case <-time.After(50 * time.Millisecond):
		case <-ctx.Done():
			return
		}
	}
}

// startWorkers starts every adapter's workers on r.ctx; the channel is
// closed when all of them have returned.
func (r *runner) startWorkers() <-chan struct{} {
	var wg sync.WaitGroup
	wseed := r.opts.Seed
	for _, a := range r.adapt {
		for _, kind := range []struct {
			name   string
			n      int
			stream uint64
			run    func(*worker)
		}{
			{"raw", r.opts.RawWorkers, 2, (*worker).runRaw},
			{"withlock", r.opts.WithLockWorkers, 4, (*worker).runWithLock},
			{"helper", r.opts.HelperWorkers, 3, (*worker).runHelper},
			{"semaphore", semWorkers, 5, (*worker).runSemaphore}, // semaphore.go
		} {
			for i := 0; i < kind.n; i++ {
				wseed++
				w := &worker{r: r, a: a, name: fmt.Sprintf("%s-%s-%d", a.name, kind.name, i), rng: rand.New(rand.NewPCG(wseed, kind.stream))}
				wg.Add(1)
				go func() { defer wg.Done(); kind.run(w) }()
			}
		}
	}
	r.startRWLock(&wg) // the read-write lock's workers and check (rwlock.go)
	// several keys at once: workers and check (multilock.go)
	r.startMultiLock(&wg)
	stopped := make(chan struct{})
	go func() { wg.Wait(); close(stopped) }()
	return stopped
}

// report assembles the outcome: the history's invariants, the fences after
// each crash, and the fenced resource's verdict.
func (r *runner) report(samples []Sample, leaks string) *Report {
	vs, st := r.hist.Check(r.opts.ReleaseSlackMs)
	for _, c := range r.crashes {
		vs = append(vs, r.hist.CheckFencesAfter(c.ready, c.maxAcked)...)
	}
	lin := r.checkLinear()
	if lin != nil {
		vs = append(vs, lin.Violations()...)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	rep := &Report{Linear: lin, Seed: r.opts.Seed, Violations: append(r.violations, vs...), Stats: st, Faults: r.faults,
		Ops: r.ops, Errors: r.errs, MaxLatency: r.maxLat, Leaks: leaks, History: r.hist, Holdings: st.Holdings, Samples: samples}
	r.res.mu.Lock()
	rep.Resource = r.res.st
	r.res.mu.Unlock()
	if rep.Resource.RejectedInBelief > 0 {
		rep.Violations = append(rep.Violations, history.Violation{Rule: "the fenced resource never rejects a write made while its holder believed it held the lock",
			Detail: fmt.Sprintf("%d such writes rejected", rep.Resource.RejectedInBelief)})
	}
	return rep
}
