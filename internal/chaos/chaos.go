package chaos

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"runtime"
	"runtime/pprof"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lib/pq"

	"github.com/syncguard/syncguard-go/internal/pgtest"
	"github.com/syncguard/syncguard-go/internal/rules"
	"github.com/syncguard/syncguard-go/pgxstd"
	sgpq "github.com/syncguard/syncguard-go/pq"
	"github.com/syncguard/syncguard-go/syncguard"
)

// Fault kinds.
const (
	FaultCut       = "cut"       // reset N (0: all) proxied connections
	FaultDelay     = "delay"     // add N ms per chunk for For
	FaultBlackhole = "blackhole" // drop all traffic for For, then reset
	FaultTerminate = "terminate" // pg_terminate_backend of N pool connections
	FaultLockStorm = "lockstorm" // ACCESS EXCLUSIVE on the lock table for For: lock_timeout / statement_timeout fire
	FaultRestart   = "restart"   // immediate-mode server restart (a crash)
)

// Fault is one scheduled fault.
type Fault struct {
	Kind string
	At   time.Duration // from the start of the load
	For  time.Duration // how long it lasts (delay, blackhole, lockstorm)
	N    int
}

func (f Fault) String() string {
	switch f.Kind {
	case FaultCut:
		if f.N <= 0 {
			return "cut(all)"
		}
		return fmt.Sprintf("cut(%d)", f.N)
	case FaultDelay:
		return fmt.Sprintf("delay(%dms,%v)", f.N, f.For)
	case FaultTerminate:
		return fmt.Sprintf("terminate(%d)", f.N)
	case FaultBlackhole, FaultLockStorm:
		return fmt.Sprintf("%s(%v)", f.Kind, f.For)
	}
	return f.Kind
}

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
	Logf       func(format string, args ...any)
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

// ShortSchedule is the CI plan for a 20 s load: every fault once, the
// restart last, then 4 s of quiet to show recovery.
func ShortSchedule() []Fault {
	return []Fault{
		{Kind: FaultCut, At: 2 * time.Second},
		{Kind: FaultDelay, At: 3500 * time.Millisecond, For: 2 * time.Second, N: 250},
		{Kind: FaultTerminate, At: 6 * time.Second, N: 3},
		{Kind: FaultTerminate, At: 6500 * time.Millisecond, N: 3},
		{Kind: FaultBlackhole, At: 7500 * time.Millisecond, For: 4500 * time.Millisecond},
		{Kind: FaultLockStorm, At: 12500 * time.Millisecond, For: 1500 * time.Millisecond},
		{Kind: FaultRestart, At: 15 * time.Second},
	}
}

// RandomSchedule is the long plan: random faults with random gaps until d
// minus 8 s of final quiet, with a restart about every 50 s.
func RandomSchedule(r *rand.Rand, d time.Duration) []Fault {
	var out []Fault
	at := 2 * time.Second
	nextRestart := 30 * time.Second
	kinds := []string{FaultCut, FaultDelay, FaultBlackhole, FaultTerminate, FaultLockStorm}
	for at < d-8*time.Second {
		f := Fault{At: at}
		if at >= nextRestart {
			f.Kind = FaultRestart
			nextRestart = at + 40*time.Second + time.Duration(r.IntN(20))*time.Second
		} else {
			f.Kind = kinds[r.IntN(len(kinds))]
		}
		switch f.Kind {
		case FaultCut:
			f.N = r.IntN(4) // 0: all
		case FaultDelay:
			f.N = 50 + r.IntN(400)
			f.For = time.Duration(1000+r.IntN(5000)) * time.Millisecond
		case FaultBlackhole:
			f.For = time.Duration(2000+r.IntN(6000)) * time.Millisecond
		case FaultTerminate:
			f.N = 1 + r.IntN(4)
		case FaultLockStorm:
			f.For = time.Duration(300+r.IntN(2700)) * time.Millisecond
		}
		out = append(out, f)
		at += f.For + time.Duration(1500+r.IntN(3500))*time.Millisecond
		if f.Kind == FaultRestart {
			at += 2 * time.Second
		}
	}
	return out
}

// FaultRecord is what happened to one fault.
type FaultRecord struct {
	Fault
	Start, End time.Time
	Detail     string
	// Recovery is, per adapter, the time from the fault's end until the
	// first operation started after the end succeeded (-1: never).
	Recovery map[string]time.Duration
}

// Report is the outcome of a Run.
type Report struct {
	Seed       uint64
	Violations []Violation
	Stats      CheckStats
	Faults     []FaultRecord
	Ops        map[string]int64 // "adapter op outcome" -> count
	Errors     map[string]int64 // "adapter code sqlstate" -> count
	MaxLatency map[string]time.Duration
	Resource   ResourceStats
	Leaks      string // summary of the leak check
	Holdings   int
	History    *History
	Samples    []Sample
}

// Sample is one measurement of a soak run.
type Sample struct {
	At             time.Duration
	HeapAlloc      uint64 // bytes live after a GC
	Goroutines     int
	Open           map[string]int // adapter -> db.Stats().OpenConnections
	ServerSessions int            // pg_stat_activity sessions of the pools
	Holdings       int            // holdings so far
}

// Summary formats the report for a test log.
func (r *Report) Summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d: %d holdings, %d hand-offs checked (%d after release, %d after expiry), closest hand-off %d ms after the release was sent or the expiry+tolerance passed\n",
		r.Seed, r.Stats.Holdings, r.Stats.Pairs, r.Stats.HandoffsByRelease, r.Stats.HandoffsByExpiry, r.Stats.MinGapMs)
	fmt.Fprintf(&b, "fenced resource: %d writes accepted, %d in-belief writes rejected; zombie writes after loss: %d rejected, %d accepted (no newer holder yet)\n",
		r.Resource.Accepted, r.Resource.RejectedInBelief, r.Resource.ZombieRejected, r.Resource.ZombieAccepted)
	b.WriteString("faults (recovery = first success of an operation started after the fault ended):\n")
	for _, f := range r.Faults {
		var rec []string
		for _, a := range []string{"pq", "pgx"} {
			d, ok := f.Recovery[a]
			switch {
			case !ok:
			case d < 0:
				rec = append(rec, a+"=never")
			default:
				rec = append(rec, fmt.Sprintf("%s=%dms", a, d.Milliseconds()))
			}
		}
		fmt.Fprintf(&b, "  %7.1fs %-22s lasted %6dms  recovery %s  %s\n", f.At.Seconds(), f.Fault.String(),
			f.End.Sub(f.Start).Milliseconds(), strings.Join(rec, " "), f.Detail)
	}
	b.WriteString("operations:\n")
	for _, k := range sortedKeys(r.Ops) {
		fmt.Fprintf(&b, "  %-40s %d\n", k, r.Ops[k])
	}
	b.WriteString("errors by adapter, code, SQLSTATE:\n")
	for _, k := range sortedKeys(r.Errors) {
		fmt.Fprintf(&b, "  %-40s %d\n", k, r.Errors[k])
	}
	b.WriteString("max latency:\n")
	for _, k := range sortedKeys(r.MaxLatency) {
		fmt.Fprintf(&b, "  %-40s %v\n", k, r.MaxLatency[k].Round(time.Millisecond))
	}
	b.WriteString("leaks: " + r.Leaks + "\n")
	return b.String()
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// ResourceStats counts writes to the fenced resource.
type ResourceStats struct {
	Accepted, RejectedInBelief, ZombieAccepted, ZombieRejected int64
}

// resource is a fenced resource: it accepts a write only with a fence at
// least as large as every fence it accepted before for the key.
type resource struct {
	mu   sync.Mutex
	last map[string]int64
	st   ResourceStats
}

func (r *resource) write(key string, fence int64, zombie bool) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	ok := fence >= r.last[key]
	if ok {
		r.last[key] = fence
	}
	switch {
	case zombie && ok:
		r.st.ZombieAccepted++
	case zombie:
		r.st.ZombieRejected++
	case ok:
		r.st.Accepted++
	default:
		r.st.RejectedInBelief++
	}
	return ok
}

// adapter is one driver's pool and backend.
type adapter struct {
	name, app string
	db        *sql.DB
	b         *syncguard.Backend
	bound     time.Duration // longest an operation may take before it counts as a hang
	// attemptGrace is how long an operation may run past its context's
	// deadline: pgx stops at once; lib/pq keeps reading until the
	// DeadlineDialer's read timeout.
	attemptGrace time.Duration
}

type runner struct {
	opts    Options
	srv     *pgtest.Server
	admin   *sql.DB
	adminB  *syncguard.Backend
	cfg     syncguard.Config
	proxy   *Proxy
	hist    *History
	res     resource
	ctx     context.Context
	keys    []string
	adapt   []*adapter
	running atomic.Bool // false: errors no longer count (shutdown)

	mu         sync.Mutex
	violations []Violation
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

func (r *runner) violate(v Violation) {
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
	r := &runner{opts: opts, srv: srv, hist: NewHistory(), res: resource{last: map[string]int64{}},
		ops: map[string]int64{}, errs: map[string]int64{}, maxLat: map[string]time.Duration{}, successes: map[string][][2]time.Time{}}
	suffix := fmt.Sprintf("%08x", rand.Uint32())
	r.cfg = syncguard.Config{TableName: "chaos_" + suffix + "_locks", FenceTableName: "chaos_" + suffix + "_fences",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	for i := 0; i < opts.Keys; i++ {
		r.keys = append(r.keys, fmt.Sprintf("chaos:%s:key-%02d", suffix, i))
	}

	var err error
	if r.admin, err = sql.Open("pgx", srv.DSN+"&application_name=chaos-admin"); err != nil {
		return nil, err
	}
	defer r.admin.Close()
	r.admin.SetMaxOpenConns(4)
	acfg := r.cfg
	acfg.Dialect = pgxstd.Dialect
	if err := syncguard.SetupSchema(ctx, r.admin, &acfg); err != nil {
		return nil, fmt.Errorf("setup schema: %w", err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = r.admin.ExecContext(cctx, `DROP TABLE IF EXISTS "`+r.cfg.TableName+`", "`+r.cfg.FenceTableName+`"`)
	}()
	if r.adminB, err = syncguard.New(r.admin, &acfg); err != nil {
		return nil, err
	}
	runtime.GC()
	baseGoroutines := runtime.NumGoroutine()

	if r.proxy, err = NewProxy(net.JoinHostPort(srv.Host, fmt.Sprint(srv.Port))); err != nil {
		return nil, err
	}
	proxyClosed := false
	defer func() {
		if !proxyClosed {
			r.proxy.Close()
		}
	}()
	if err := r.openAdapters(suffix); err != nil {
		return nil, err
	}
	dbsClosed := false
	defer func() {
		if !dbsClosed {
			for _, a := range r.adapt {
				a.db.Close()
			}
		}
	}()

	// Load.
	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	r.ctx = loadCtx
	r.running.Store(true)
	start := time.Now()
	opts.Logf("chaos: seed %d, %v of load, %d keys, %d raw + %d helper workers per adapter, pools of %d, ttl %v, schedule %v",
		opts.Seed, opts.Duration, opts.Keys, opts.RawWorkers, opts.HelperWorkers, opts.MaxOpenConns, opts.TTL, opts.Schedule)
	var wg sync.WaitGroup
	wseed := opts.Seed
	for _, a := range r.adapt {
		for i := 0; i < opts.RawWorkers; i++ {
			wseed++
			w := &worker{r: r, a: a, name: fmt.Sprintf("%s-raw-%d", a.name, i), rng: rand.New(rand.NewPCG(wseed, 2))}
			wg.Add(1)
			go func() { defer wg.Done(); w.runRaw() }()
		}
		for i := 0; i < opts.WithLockWorkers; i++ {
			wseed++
			w := &worker{r: r, a: a, name: fmt.Sprintf("%s-withlock-%d", a.name, i), rng: rand.New(rand.NewPCG(wseed, 4))}
			wg.Add(1)
			go func() { defer wg.Done(); w.runWithLock() }()
		}
		for i := 0; i < opts.HelperWorkers; i++ {
			wseed++
			w := &worker{r: r, a: a, name: fmt.Sprintf("%s-helper-%d", a.name, i), rng: rand.New(rand.NewPCG(wseed, 3))}
			wg.Add(1)
			go func() { defer wg.Done(); w.runHelper() }()
		}
	}

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
	r.running.Store(false)
	stopLoad()
	<-sampled
	r.proxy.SetDelay(0)
	r.proxy.Heal()
	stopped := make(chan struct{})
	go func() { wg.Wait(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(20 * time.Second):
		r.violate(Violation{Rule: "workers stop within 20 s of the end of the load (no hung caller)", Detail: goroutineDump()})
		<-stopped
	}
	opts.Logf("chaos: load ended after %v", time.Since(start).Round(time.Millisecond))

	// Recovery per fault.
	r.computeRecovery()

	// Leaks.
	leaks := r.checkLeaks(ctx, baseGoroutines, func() {
		for _, a := range r.adapt {
			a.db.Close()
		}
		dbsClosed = true
		r.proxy.Close()
		proxyClosed = true
	})

	vs, st := r.hist.Check(opts.ReleaseSlackMs)
	for _, c := range r.crashes {
		vs = append(vs, r.hist.CheckFencesAfter(c.ready, c.maxAcked)...)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	rep := &Report{Seed: opts.Seed, Violations: append(r.violations, vs...), Stats: st, Faults: r.faults,
		Ops: r.ops, Errors: r.errs, MaxLatency: r.maxLat, Leaks: leaks, History: r.hist, Holdings: st.Holdings, Samples: samples}
	r.res.mu.Lock()
	rep.Resource = r.res.st
	r.res.mu.Unlock()
	if rep.Resource.RejectedInBelief > 0 {
		rep.Violations = append(rep.Violations, Violation{Rule: "the fenced resource never rejects a write made while its holder believed it held the lock",
			Detail: fmt.Sprintf("%d such writes rejected", rep.Resource.RejectedInBelief)})
	}
	return rep, nil
}

func (r *runner) openAdapters(suffix string) error {
	o := r.opts
	base := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable&connect_timeout=2", r.proxy.Port())
	// lib/pq: lock_timeout below statement_timeout, so a lock storm ends
	// with 55P03; reads and writes bounded by the DeadlineDialer.
	pqApp := "chaos-pq-" + suffix
	conn, err := pq.NewConnector(base + "&application_name=" + pqApp + "&statement_timeout=1500&lock_timeout=300")
	if err != nil {
		return err
	}
	conn.Dialer(sgpq.DeadlineDialer{ReadTimeout: o.PQReadTimeout,
		KeepAlive: net.KeepAliveConfig{Enable: true, Idle: 5 * time.Second, Interval: 2 * time.Second, Count: 3}, UserTimeout: 5 * time.Second})
	pqDB := sql.OpenDB(conn)
	// pgx: statement_timeout only, so a lock storm ends with 57014.
	pgxApp := "chaos-pgx-" + suffix
	pgxDB, err := sql.Open("pgx", base+"&application_name="+pgxApp+"&statement_timeout=600")
	if err != nil {
		pqDB.Close()
		return err
	}
	for _, a := range []*adapter{
		{name: "pq", app: pqApp, db: pqDB, bound: o.PQReadTimeout + o.OpTimeout + time.Second, attemptGrace: o.PQReadTimeout + time.Second},
		{name: "pgx", app: pgxApp, db: pgxDB, bound: o.OpTimeout + time.Second, attemptGrace: 500 * time.Millisecond},
	} {
		a.db.SetMaxOpenConns(o.MaxOpenConns)
		a.db.SetMaxIdleConns(o.MaxOpenConns)
		c := r.cfg
		b, err := syncguard.New(a.db, &c)
		if err != nil {
			return err
		}
		a.b = b
		r.adapt = append(r.adapt, a)
	}
	return nil
}

// note records an operation's outcome. err must come from syncguard.
func (r *runner) note(a *adapter, worker, key, op string, start time.Time, dur time.Duration, outcome string, err error, bound time.Duration) {
	if err != nil {
		outcome = "error " + string(syncguard.CodeOf(err))
	}
	if key != "" && !r.opts.NoEventLog {
		r.hist.Event(key, Event{At: start, Dur: dur, Worker: worker, Op: op, Outcome: outcome})
	}
	if !r.running.Load() {
		return
	}
	r.mu.Lock()
	kind, _, _ := strings.Cut(outcome, " fence=")
	r.ops[a.name+" "+op+" "+kind]++
	if dur > r.maxLat[a.name+" "+op] {
		r.maxLat[a.name+" "+op] = dur
	}
	if err == nil {
		r.successes[a.name] = append(r.successes[a.name], [2]time.Time{start, start.Add(dur)})
	}
	r.mu.Unlock()
	if dur > bound {
		r.violate(Violation{Rule: "a caller on a broken or half-open connection is released within its bound", Key: key,
			Detail: fmt.Sprintf("%s %s by %s took %v (bound %v), ended with %s", a.name, op, worker, dur.Round(time.Millisecond), bound, outcome)})
	}
	if err != nil {
		r.checkErr(a, worker, op, err)
	}
}

// checkErr enforces the error contract under transient faults: every error
// is a *syncguard.Error with a code, and a retryable one.
func (r *runner) checkErr(a *adapter, worker, op string, err error) {
	var se *syncguard.Error
	if !errors.As(err, &se) || se.Code == "" {
		r.violate(Violation{Rule: "every error is a *syncguard.Error with a code",
			Detail: fmt.Sprintf("%s %s by %s: %T %v", a.name, op, worker, err, err)})
		return
	}
	r.mu.Lock()
	r.errs[fmt.Sprintf("%s %s %s", a.name, se.Code, se.SQLState)]++
	r.mu.Unlock()
	if !se.Retryable() {
		r.violate(Violation{Rule: "errors caused by transient faults are retryable (ServiceUnavailable, NetworkTimeout, RateLimited)",
			Detail: fmt.Sprintf("%s %s by %s: code %s: %v", a.name, op, worker, se.Code, err)})
	}
}

func goroutineDump() string {
	var b strings.Builder
	_ = pprof.Lookup("goroutine").WriteTo(&b, 1)
	return b.String()
}

// runSchedule injects the faults in order; it returns after the last one.
func (r *runner) runSchedule(ctx context.Context, start time.Time) {
	for _, f := range r.opts.Schedule {
		if f.At >= r.opts.Duration {
			break
		}
		select {
		case <-time.After(time.Until(start.Add(f.At))):
		case <-ctx.Done():
			return
		}
		rec := FaultRecord{Fault: f, Start: time.Now()}
		rec.Detail = r.inject(ctx, f)
		rec.End = time.Now()
		r.opts.Logf("chaos: %6.1fs %s: %s", rec.Start.Sub(start).Seconds(), f, rec.Detail)
		r.mu.Lock()
		r.faults = append(r.faults, rec)
		r.mu.Unlock()
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-time.After(d):
	case <-ctx.Done():
	}
}

func (r *runner) inject(ctx context.Context, f Fault) string {
	switch f.Kind {
	case FaultCut:
		return fmt.Sprintf("reset %d connections", r.proxy.Cut(f.N))
	case FaultDelay:
		r.proxy.SetDelay(time.Duration(f.N) * time.Millisecond)
		sleepCtx(ctx, f.For)
		r.proxy.SetDelay(0)
		return fmt.Sprintf("+%d ms per chunk each way", f.N)
	case FaultBlackhole:
		n := r.proxy.Blackhole()
		sleepCtx(ctx, f.For)
		r.proxy.Heal()
		return fmt.Sprintf("%d connections caught; all traffic dropped", n)
	case FaultTerminate:
		return r.terminate(ctx, f.N)
	case FaultLockStorm:
		return r.lockStorm(ctx, f.For)
	case FaultRestart:
		return r.restart(ctx)
	}
	return "unknown fault"
}

func (r *runner) appNames() []string {
	var s []string
	for _, a := range r.adapt {
		s = append(s, a.app)
	}
	return s
}

func (r *runner) terminate(ctx context.Context, n int) string {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	rows, err := r.admin.QueryContext(cctx, `SELECT pid FROM pg_stat_activity WHERE application_name = ANY($1) ORDER BY random() LIMIT $2`,
		r.appNames(), n)
	if err != nil {
		return "listing backends failed: " + err.Error()
	}
	var pids []int
	for rows.Next() {
		var pid int
		if rows.Scan(&pid) == nil {
			pids = append(pids, pid)
		}
	}
	rows.Close()
	done := 0
	for _, pid := range pids {
		var ok bool
		if r.admin.QueryRowContext(cctx, `SELECT pg_terminate_backend($1)`, pid).Scan(&ok) == nil && ok {
			done++
		}
	}
	return fmt.Sprintf("terminated %d backends", done)
}

func (r *runner) lockStorm(ctx context.Context, d time.Duration) string {
	cctx, cancel := context.WithTimeout(ctx, d+10*time.Second)
	defer cancel()
	tx, err := r.admin.BeginTx(cctx, nil)
	if err != nil {
		return "begin failed: " + err.Error()
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(cctx, `LOCK TABLE "`+r.cfg.TableName+`" IN ACCESS EXCLUSIVE MODE`); err != nil {
		return "lock table failed: " + err.Error()
	}
	sleepCtx(ctx, d)
	return "lock table held ACCESS EXCLUSIVE (pq pool: lock_timeout=300ms, pgx pool: statement_timeout=600ms)"
}

// restart crashes and restarts the server, and checks that locks and
// fences acknowledged before the crash survive it.
func (r *runner) restart(ctx context.Context) string {
	if !r.srv.CanRestart() {
		return "skipped: server cannot restart"
	}
	// Sentinels: two locks acknowledged just before the crash, one of them
	// extended.
	type sentinel struct {
		key    string
		res    syncguard.AcquireResult
		expiry time.Time
	}
	var sents []sentinel
	for i := 0; i < 2; i++ {
		k := fmt.Sprintf("%s:sentinel-%d-%d", r.keys[0], time.Now().UnixNano(), i)
		res, err := r.adminB.Acquire(ctx, k, 20*time.Second)
		if err != nil || !res.OK {
			return fmt.Sprintf("sentinel acquire failed: %+v %v", res, err)
		}
		s := sentinel{key: k, res: res, expiry: res.ExpiresAt}
		if i == 1 {
			x, err := r.adminB.Extend(ctx, res.LockID, 25*time.Second)
			if err != nil || !x.OK {
				return fmt.Sprintf("sentinel extend failed: %+v %v", x, err)
			}
			s.expiry = x.ExpiresAt
		}
		sents = append(sents, s)
	}
	began := time.Now()
	maxAcked := r.hist.MaxAckedFences(began)
	rctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	if err := r.srv.Restart(rctx); err != nil {
		r.violate(Violation{Rule: "the server restarts", Detail: err.Error()})
		return "restart failed: " + err.Error()
	}
	ready := time.Now()
	// Operations on the admin pool fail until it has replaced its broken
	// connections.
	retry := func(fn func() error) error {
		deadline := time.Now().Add(15 * time.Second)
		for {
			err := fn()
			if err == nil || !syncguard.CodeOf(err).Retryable() || time.Now().After(deadline) {
				return err
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	for _, s := range sents {
		var info *syncguard.LockInfoDebug
		err := retry(func() (err error) { info, err = r.adminB.LookupIDDebug(ctx, s.res.LockID); return err })
		switch {
		case err != nil:
			r.violate(Violation{Rule: "a lock acknowledged before a crash is still held after it", Key: s.key, Detail: "lookup failed: " + err.Error()})
		case info == nil:
			r.violate(Violation{Rule: "a lock acknowledged before a crash is still held after it", Key: s.key,
				Detail: fmt.Sprintf("fence %s, expiry %v: not found after the restart", s.res.Fence, s.expiry)})
		case info.Fence != s.res.Fence || !info.ExpiresAt.Equal(s.expiry):
			r.violate(Violation{Rule: "a lock acknowledged before a crash is still held after it", Key: s.key,
				Detail: fmt.Sprintf("acknowledged fence %s expiry %v; after the restart fence %s expiry %v", s.res.Fence, s.expiry, info.Fence, info.ExpiresAt)})
		}
		var again syncguard.AcquireResult
		if err := retry(func() (err error) { again, err = r.adminB.Acquire(ctx, s.key, time.Second); return err }); err != nil || again.OK {
			r.violate(Violation{Rule: "a lock acknowledged before a crash excludes others after it", Key: s.key,
				Detail: fmt.Sprintf("acquire after the restart: %+v, %v", again, err)})
		}
		if rel, err := r.adminB.Release(ctx, s.res.LockID); err != nil || !rel.OK {
			r.violate(Violation{Rule: "a lock acknowledged before a crash can be released after it", Key: s.key, Detail: fmt.Sprintf("%+v, %v", rel, err)})
		}
		next, err := r.adminB.Acquire(ctx, s.key, time.Second)
		if err != nil || !next.OK || next.Fence <= s.res.Fence {
			r.violate(Violation{Rule: "the next fence after a crash exceeds every acknowledged fence", Key: s.key,
				Detail: fmt.Sprintf("acknowledged %s; next acquire %+v, %v", s.res.Fence, next, err)})
		} else {
			_, _ = r.adminB.Release(ctx, next.LockID)
		}
	}
	// The fence counters of the workers' keys did not go back.
	counters := map[string]int64{}
	err := retry(func() error {
		rows, err := r.admin.QueryContext(ctx, `SELECT "key_debug", "fence" FROM "`+r.cfg.FenceTableName+`"`)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var k string
			var n int64
			if err := rows.Scan(&k, &n); err != nil {
				return err
			}
			counters[k] = n
		}
		return rows.Err()
	})
	if err != nil {
		r.violate(Violation{Rule: "fence counters are readable after a crash", Detail: err.Error()})
	}
	for k, n := range maxAcked {
		norm, _ := rules.NormalizeKey(k)
		if counters[norm] < n {
			r.violate(Violation{Rule: "no acknowledged fence is lost across a crash", Key: k,
				Detail: fmt.Sprintf("fence %d acknowledged before the crash; counter %d after it", n, counters[norm])})
		}
	}
	// Later holdings must have larger fences: checked at the end.
	r.mu.Lock()
	r.crashes = append(r.crashes, crashMark{ready: ready, maxAcked: maxAcked})
	r.mu.Unlock()
	return fmt.Sprintf("server down for %v; 2 sentinel locks and %d keys' fences checked", ready.Sub(began).Round(time.Millisecond), len(maxAcked))
}

func (r *runner) sample(ctx context.Context, start time.Time) Sample {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	smp := Sample{At: time.Since(start), HeapAlloc: ms.HeapAlloc, Goroutines: runtime.NumGoroutine(), Open: map[string]int{}}
	for _, a := range r.adapt {
		smp.Open[a.name] = a.db.Stats().OpenConnections
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_ = r.admin.QueryRowContext(cctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = ANY($1)`, r.appNames()).Scan(&smp.ServerSessions)
	r.hist.mu.Lock()
	smp.Holdings = len(r.hist.holdings)
	r.hist.mu.Unlock()
	return smp
}

func (r *runner) computeRecovery() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for a, s := range r.successes {
		sort.Slice(s, func(i, j int) bool { return s[i][1].Before(s[j][1]) })
		r.successes[a] = s
	}
	for i := range r.faults {
		f := &r.faults[i]
		f.Recovery = map[string]time.Duration{}
		for _, a := range r.adapt {
			d := time.Duration(-1)
			for _, s := range r.successes[a.name] {
				if !s[0].Before(f.End) {
					d = s[1].Sub(f.End)
					break
				}
			}
			f.Recovery[a.name] = d
			if d < 0 || d > 10*time.Second {
				r.violations = append(r.violations, Violation{Rule: "operations succeed again within 10 s of the end of a fault",
					Detail: fmt.Sprintf("%s after %s at %v: recovery %v", a.name, f.Fault, f.At, d)})
			}
		}
	}
}

// checkLeaks waits for the pools to settle, compares client and server
// connection counts, closes everything (closeAll) and checks that the
// goroutines and server sessions return to the baseline.
func (r *runner) checkLeaks(ctx context.Context, baseGoroutines int, closeAll func()) string {
	count := func(apps []string) (int, error) {
		var n int
		err := r.admin.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = ANY($1)`, apps).Scan(&n)
		return n, err
	}
	var parts []string
	for _, a := range r.adapt {
		deadline := time.Now().Add(15 * time.Second)
		var st sql.DBStats
		var server int
		var err error
		for {
			st = a.db.Stats()
			server, err = count([]string{a.app})
			if err == nil && st.InUse == 0 && server == st.OpenConnections || time.Now().After(deadline) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		parts = append(parts, fmt.Sprintf("%s: open=%d inUse=%d idle=%d server sessions=%d waits=%d (%v)",
			a.name, st.OpenConnections, st.InUse, st.Idle, server, st.WaitCount, st.WaitDuration.Round(time.Millisecond)))
		if err != nil || st.InUse != 0 || server != st.OpenConnections || st.OpenConnections > r.opts.MaxOpenConns {
			r.violate(Violation{Rule: "after the load, every connection is back in the pool and matches a server session",
				Detail: fmt.Sprintf("%s: db.Stats %+v; pg_stat_activity sessions %d (%v)", a.name, st, server, err)})
		}
	}
	closeAll()
	deadline := time.Now().Add(15 * time.Second)
	var n, server int
	for {
		runtime.GC()
		n = runtime.NumGoroutine()
		server, _ = count(r.appNames())
		if n <= baseGoroutines+1 && server == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	parts = append(parts, fmt.Sprintf("after close: goroutines %d (baseline %d), server sessions %d", n, baseGoroutines, server))
	if n > baseGoroutines+1 {
		r.violate(Violation{Rule: "no goroutine outlives the pools (runtime.NumGoroutine returns to its baseline)",
			Detail: fmt.Sprintf("%d goroutines, baseline %d\n%s", n, baseGoroutines, goroutineDump())})
	}
	if server != 0 {
		r.violate(Violation{Rule: "no server session outlives the pools", Detail: fmt.Sprintf("%d sessions left", server)})
	}
	return strings.Join(parts, "; ")
}

var _ = sgpq.Dialect // registers lib/pq's dialect
