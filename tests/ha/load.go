package ha

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	libpq "github.com/lib/pq"

	"github.com/syncguard/syncguard-go/syncguard"
	"github.com/syncguard/syncguard-go/tests/pgtest/history"
	"github.com/syncguard/syncguard-go/tests/pgtest/kindcheck"

	_ "github.com/syncguard/syncguard-go/pgxstd" // registers pgx's dialect
	_ "github.com/syncguard/syncguard-go/pq"     // registers lib/pq's dialect
)

// FaultKind is one way the primary goes away.
type FaultKind string

const (
	// KillPostmaster: kill -9 of the primary's postmaster. Its keeper
	// survives, reports Postgres down and the monitor fails over at once.
	KillPostmaster FaultKind = "kill -9 postmaster"
	// KillNode: kill -9 of the primary's whole process group (keeper,
	// postmaster, backends), as when the machine dies. The monitor notices
	// through its health checks and timeouts. The node is started again
	// once the standby took over, and rejoins as the new standby.
	KillNode FaultKind = "kill -9 node"
	// Switchover: a planned failover requested from the monitor.
	Switchover FaultKind = "switchover"
)

// RunOptions configure Run.
type RunOptions struct {
	// Faults in order; each waits for the formation to be stable again
	// (a primary and a secondary) and for Settle of load before the next.
	Faults []FaultKind
	// Settle is the load before the first fault and after each recovery.
	// Default 3 s.
	Settle time.Duration
	// Keys is the number of hot keys all workers contend on. Default 4.
	Keys int
	// StableTimeout bounds the wait for a primary and a secondary after a
	// fault. Default 2 minutes.
	StableTimeout time.Duration
	// Seed seeds the workers' random choices; 0 picks one.
	Seed uint64
	// Dir is where the evidence of a violation goes (the linearizability
	// checker's counterexample, the lock kinds' audits); default
	// os.TempDir().
	Dir  string
	Logf func(format string, args ...any)
}

// Cluster is what Run needs of a topology: a *Formation
// (pg_auto_failover) or a *Patroni cluster.
type Cluster interface {
	// clients are the pools the load goes through, one per adapter and
	// route, named "pq", "pgx" or e.g. "pq-haproxy".
	clients() []client
	// async reports asynchronous replication.
	async() bool
	// settings describes the failover manager's timing settings.
	settings() string
	// fault waits for the cluster to be stable, calls before, applies kind
	// to the primary and waits until it is stable again; it fills fr's
	// Node, At, InPlace, Promoted and Stable.
	fault(ctx context.Context, r *runner, i int, kind FaultKind, fr *FaultResult, before func()) error
}

// client is one pool of the load: an adapter through one route.
type client struct {
	name string
	open func(app string) (*sql.DB, error)
}

// Run puts load on c through its clients (for a Formation both adapters,
// lib/pq and pgx, each through the multi-host DSN with
// target_session_attrs=read-write), applies the faults, and checks the
// invariants (see Report).
func Run(ctx context.Context, c Cluster, o RunOptions) (*Report, error) {
	if o.Settle == 0 {
		o.Settle = 3 * time.Second
	}
	if o.Keys == 0 {
		o.Keys = 4
	}
	if o.StableTimeout == 0 {
		o.StableTimeout = 2 * time.Minute
	}
	if o.Seed == 0 {
		o.Seed = rand.Uint64()
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	r := &runner{c: c, o: o, hist: history.New(), rep: &Report{Async: c.async(), Settings: c.settings(), Seed: o.Seed,
		Ops: map[string]int64{}, Errors: map[string]int64{}, LeaseLosses: map[string]int64{}}}
	for i := range o.Keys {
		r.keys = append(r.keys, fmt.Sprintf("ha-hot-%d", i))
	}
	if err := r.open(ctx); err != nil {
		return nil, err
	}
	defer r.close()
	return r.run(ctx)
}

// adapter is one driver's pool and backend.
type adapter struct {
	name string
	db   *sql.DB
	b    *syncguard.Backend

	sentinelMu sync.Mutex // held by the checker while it reads the sentinels
	sentinels  []*sentinel

	mu        sync.Mutex
	successes []time.Time // send times of successful acquires, in order
	acks      []time.Time // when they were acknowledged, in order
}

type runner struct {
	c    Cluster
	o    RunOptions
	keys []string
	hist *history.History
	rep  *Report
	ad   []*adapter
	// kinds are the lock kinds' handles, load and record (kinds.go).
	kinds *kindsRun

	ctx   context.Context // the load's; cancelled at the end
	repMu sync.Mutex
}

// DSN is the multi-host connection string clients use: both nodes, in a
// fixed order, and target_session_attrs=read-write so that only the
// primary is used. It is in key=value form, which both drivers read: lib/pq
// v1.12 reads several hosts from key=value strings only (in a URL it takes
// "host:port,host:port" for one host name).
func (f *Formation) DSN(app string) string {
	return fmt.Sprintf("host=127.0.0.1,127.0.0.1 port=%d,%d user=postgres dbname=postgres sslmode=disable target_session_attrs=read-write connect_timeout=2 application_name=%s",
		f.Nodes[0].Port, f.Nodes[1].Port, app)
}

// NodeDSN reaches one node only.
func (f *Formation) NodeDSN(n *Node, app string) string {
	return fmt.Sprintf("host=127.0.0.1 port=%d user=postgres dbname=postgres sslmode=disable connect_timeout=2 application_name=%s", n.Port, app)
}

// OpenPool opens a pool on the formation's multi-host DSN with the named
// adapter's driver ("pq" or "pgx").
func (f *Formation) OpenPool(adapterName, app string) (*sql.DB, error) {
	switch adapterName {
	case "pq":
		c, err := libpq.NewConnector(f.DSN(app))
		if err != nil {
			return nil, err
		}
		return sql.OpenDB(c), nil
	case "pgx":
		return sql.Open("pgx", f.DSN(app))
	}
	return nil, fmt.Errorf("ha: unknown adapter %q", adapterName)
}

func (f *Formation) clients() []client {
	var cs []client
	for _, name := range []string{"pq", "pgx"} {
		cs = append(cs, client{name, func(app string) (*sql.DB, error) { return f.OpenPool(name, app) }})
	}
	return cs
}

func (f *Formation) async() bool      { return f.Async }
func (f *Formation) settings() string { return "failover manager timeouts: " + f.Timeouts.String() }

func (r *runner) open(ctx context.Context) error {
	clients := r.c.clients()
	for _, c := range clients {
		name := c.name
		db, err := c.open("ha-" + name)
		if err != nil {
			return err
		}
		r.rep.Adapters = append(r.rep.Adapters, name)
		db.SetMaxOpenConns(8)
		b, err := syncguard.New(db, &syncguard.Config{Logger: discard()})
		if err != nil {
			db.Close()
			return err
		}
		r.ad = append(r.ad, &adapter{name: name, db: db, b: b})
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := syncguard.SetupSchema(cctx, r.ad[1].db, nil); err != nil {
		return err
	}
	if err := r.installAudit(cctx); err != nil {
		return err
	}
	return r.setupKinds(cctx, r.ad[1].db, clients)
}

func (r *runner) close() {
	if r.kinds != nil {
		r.kinds.close()
	}
	for _, a := range r.ad {
		a.db.Close()
	}
}

func discard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func (r *runner) run(ctx context.Context) (*Report, error) {
	lctx, stopLoad := context.WithCancel(ctx)
	r.ctx = lctx
	var wg sync.WaitGroup
	seed := r.o.Seed
	for _, a := range r.ad {
		for i := range 2 {
			wg.Go(func() {
				r.withLockWorker(a, fmt.Sprintf("%s-withlock-%d", a.name, i), rand.New(rand.NewPCG(seed, uint64(len(a.name)*100+i))))
			})
			wg.Go(func() {
				r.leaseWorker(a, fmt.Sprintf("%s-lease-%d", a.name, i), rand.New(rand.NewPCG(seed, uint64(len(a.name)*100+10+i))))
			})
		}
		wg.Go(func() { r.sentinelWorker(a) })
	}
	r.startKinds(&wg)
	t0 := time.Now()
	err := r.schedule(ctx)
	stopLoad()
	wg.Wait()
	r.rep.Duration = time.Since(t0)
	if err != nil {
		return r.rep, err
	}
	// The last check, after the load: every acknowledged sentinel is there.
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	n, err := r.checkSentinels(cctx, time.Now())
	if err != nil {
		return r.rep, err
	}
	r.rep.SentinelChecks += n
	r.checkKinds(cctx)
	r.finish()
	return r.rep, nil
}

// schedule applies the faults.
func (r *runner) schedule(ctx context.Context) error {
	sleepCtx(ctx, r.o.Settle)
	for i, kind := range r.o.Faults {
		fr := FaultResult{Kind: kind, FirstAcquire: map[string]time.Duration{}, MaxGap: map[string]time.Duration{}, Recovery: map[string]time.Duration{}}
		var maxFences, kindsMax map[string]int64
		if err := r.c.fault(ctx, r, i, kind, &fr, func() {
			maxFences = r.hist.MaxAckedFences(time.Now())
			kindsMax = r.kinds.acks.MaxBefore(time.Now())
		}); err != nil {
			return err
		}
		r.kinds.cuts = append(r.kinds.cuts, kindcheck.Cut{At: fr.At, Max: kindsMax})
		// Some load on the new primary, then the checks.
		sleepCtx(ctx, r.o.Settle)
		for _, a := range r.ad {
			fr.FirstAcquire[a.name] = a.firstSuccessAfter(fr.At)
			fr.MaxGap[a.name] = a.maxGap(fr.At, fr.At.Add(fr.Stable))
			fr.Recovery[a.name] = a.recovery(fr.At, fr.At.Add(fr.Stable+r.o.Settle))
		}
		// Every sentinel acknowledged so far, including those the old
		// primary acknowledged after the fault, must be on the new one.
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		n, err := r.checkSentinels(cctx, time.Now())
		cancel()
		if err != nil {
			return err
		}
		fr.SentinelsChecked = n
		r.rep.SentinelChecks += n
		r.rep.fenceChecks = append(r.rep.fenceChecks, fenceCheck{at: fr.At, max: maxFences})
		var firsts, gaps, recs []string
		for _, a := range r.ad {
			firsts = append(firsts, a.name+" "+ms(fr.FirstAcquire[a.name]))
			gaps = append(gaps, a.name+" "+ms(fr.MaxGap[a.name]))
			recs = append(recs, a.name+" "+ms(fr.Recovery[a.name]))
		}
		r.o.Logf("fault %d: %s stable after %v, first acquire %s, recovered %s, longest gap %s; %d sentinel locks verified",
			i+1, kind, fr.Stable.Round(time.Millisecond), strings.Join(firsts, ", "), strings.Join(recs, ", "), strings.Join(gaps, ", "), n)
		r.rep.Faults = append(r.rep.Faults, fr)
	}
	return nil
}

// fault is the pg_auto_failover part of a fault (see Cluster).
func (f *Formation) fault(ctx context.Context, r *runner, i int, kind FaultKind, fr *FaultResult, before func()) error {
	primary, err := f.WaitStable(ctx, r.o.StableTimeout)
	if err != nil {
		return fmt.Errorf("before fault %d (%s): %w", i+1, kind, err)
	}
	standby := f.Other(primary)
	fr.Node = primary.Name
	before()
	switch kind {
	case KillPostmaster:
		fr.At, err = f.KillPostmaster(primary)
	case KillNode:
		fr.At, err = f.KillNode(primary)
	case Switchover:
		fr.At, err = f.Switchover(ctx)
	default:
		err = fmt.Errorf("unknown fault %q", kind)
	}
	if err != nil {
		return err
	}
	r.o.Logf("fault %d: %s on %s (primary)", i+1, kind, primary.Name)
	// Promotion: the monitor reports the standby as the new primary.
	// A killed postmaster may instead be restarted in place by its
	// keeper before the monitor decides to fail over: the fault then
	// ends once the old primary is back and the monitor's decision
	// window (see decisionWindow) has passed without a failover.
	failover := false
	err = f.waitFor(ctx, standby.Name+" promoted", r.o.StableTimeout, func(ctx context.Context) (bool, error) {
		ss, err := f.State(ctx)
		if err != nil {
			return false, nil
		}
		back := 0
		for _, s := range ss {
			if s.Name == standby.Name && (s.Reported == "wait_primary" || s.Reported == "primary") {
				failover = true
				return true, nil
			}
			if (s.Name == primary.Name && s.Reported == "primary" && s.Goal == "primary" && s.Running) ||
				(s.Name == standby.Name && s.Reported == "secondary" && s.Goal == "secondary") {
				back++
			}
		}
		return kind == KillPostmaster && back == 2 && time.Since(fr.At) > f.decisionWindow(), nil
	})
	if err != nil {
		return fmt.Errorf("fault %d (%s): %w", i+1, kind, err)
	}
	if failover {
		fr.Promoted = time.Since(fr.At)
		r.o.Logf("fault %d: %s promoted after %v", i+1, standby.Name, fr.Promoted.Round(time.Millisecond))
	} else {
		fr.InPlace = true
		r.o.Logf("fault %d: %s restarted in place by its keeper; no failover", i+1, primary.Name)
	}
	// The killed node's pg_autoctl is started again if it is not
	// running (KillNode), as its service manager would.
	if !primary.Running() {
		if kind != KillNode {
			r.o.Logf("fault %d: pg_autoctl of %s exited; starting it again", i+1, primary.Name)
		}
		if err := f.StartNode(primary); err != nil {
			return err
		}
	}
	if _, err := f.WaitStable(ctx, r.o.StableTimeout); err != nil {
		return fmt.Errorf("after fault %d (%s): %w", i+1, kind, err)
	}
	fr.Stable = time.Since(fr.At)
	return nil
}

func p50max(ds []time.Duration) (p50, maxd time.Duration) {
	if len(ds) == 0 {
		return 0, 0
	}
	slices.Sort(ds)
	return ds[(len(ds)-1)/2], ds[len(ds)-1]
}

func (a *adapter) succeeded(sent time.Time) {
	a.mu.Lock()
	a.successes = append(a.successes, sent)
	a.acks = append(a.acks, time.Now())
	a.mu.Unlock()
}

// maxGap is the longest time between at and end without an acknowledged
// acquire: the unavailability a fault caused, including a second outage
// when a restarted old primary served for a while before the failover.
func (a *adapter) maxGap(at, end time.Time) time.Duration {
	gap, _ := a.longestGap(at, end)
	return gap
}

// longestGap is maxGap and the acknowledgement that ended it (zero: none
// before end).
func (a *adapter) longestGap(at, end time.Time) (time.Duration, time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	prev, gap, ended := at, time.Duration(0), time.Time{}
	for _, t := range a.acks {
		if !t.After(at) {
			continue
		}
		if t.After(end) {
			break
		}
		if t.Sub(prev) > gap {
			gap, ended = t.Sub(prev), t
		}
		prev = t
	}
	if end.Sub(prev) > gap {
		gap, ended = end.Sub(prev), time.Time{}
	}
	return gap, ended
}

// recovery is the time from at to the acknowledgement that ended the
// longest outage after it (before end): the first acquire acknowledged by
// the new primary, when the old one served on for a moment (a backend that
// outlived its postmaster, a primary not yet demoted). -1: none.
func (a *adapter) recovery(at, end time.Time) time.Duration {
	_, ended := a.longestGap(at, end)
	if ended.IsZero() {
		return -1
	}
	return ended.Sub(at)
}

// firstSuccessAfter returns how long after t the first acquire that was
// sent after t succeeded (-1 if none).
func (a *adapter) firstSuccessAfter(t time.Time) time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	i := sort.Search(len(a.successes), func(i int) bool { return !a.successes[i].Before(t) })
	if i == len(a.successes) {
		return -1
	}
	// Successes are appended at acknowledgement; the send times are close
	// to ordered. Take the earliest at or after t.
	best := a.successes[i]
	for _, s := range a.successes[i:] {
		if !s.Before(t) && s.Before(best) {
			best = s
		}
	}
	return best.Sub(t)
}

// note counts an operation and checks its error.
func (r *runner) note(a *adapter, op string, outcome string, err error) {
	r.noteAs(a.name, op, outcome, err)
}

// noteAs is note for the client named name.
func (r *runner) noteAs(name, op string, outcome string, err error) {
	r.repMu.Lock()
	defer r.repMu.Unlock()
	if err == nil {
		r.rep.Ops[name+" "+op+" "+outcome]++
		return
	}
	if r.ctx.Err() != nil && syncguard.CodeOf(err) == syncguard.ErrAborted {
		return // the run ended
	}
	var se *syncguard.Error
	if !errors.As(err, &se) {
		r.rep.Errors[fmt.Sprintf("%s %s untyped: %v", name, op, err)]++
		r.rep.Violations = append(r.rep.Violations, history.Violation{Rule: RuleErrors, At: time.Now(),
			Detail: fmt.Sprintf("%s %s returned an error that is no *syncguard.Error: %v", name, op, err)})
		return
	}
	code, cause := se.Code, se
	if code == syncguard.ErrAcquisitionTimeout {
		var ce *syncguard.Error
		if !errors.As(se.Err, &ce) {
			r.rep.Ops[name+" "+op+" contended"]++
			return // contention, not a fault
		}
		cause = ce
	}
	key := fmt.Sprintf("%s %s %s", name, op, cause.Code)
	if cause.SQLState != "" {
		key += " " + cause.SQLState
	}
	key += ": " + cause.Msg
	r.rep.Errors[key]++
	if !cause.Code.Retryable() {
		r.rep.Violations = append(r.rep.Violations, history.Violation{Rule: RuleErrors, At: time.Now(),
			Detail: fmt.Sprintf("%s %s: %v", name, op, err)})
	}
}

func (r *runner) addViolation(v history.Violation) {
	if v.At.IsZero() {
		v.At = time.Now()
	}
	r.repMu.Lock()
	r.rep.Violations = append(r.rep.Violations, v)
	r.repMu.Unlock()
}

// statementSlackMs allows for the clocks compared (this process's, the
// servers' across a failover): see history.Check.
const statementSlackMs = 50

// finish runs the history checks and fills in the report.
func (r *runner) finish() {
	vs, st := r.hist.Check(statementSlackMs)
	r.rep.Violations = append(r.rep.Violations, vs...)
	for _, fc := range r.rep.fenceChecks {
		r.rep.Violations = append(r.rep.Violations, r.hist.CheckFencesAfter(fc.at, fc.max)...)
	}
	r.rep.Holdings, r.rep.Pairs = st.Holdings, st.Pairs
	r.checkLinear()
	var firsts, gaps []time.Duration
	for _, fr := range r.rep.Faults {
		for _, a := range r.rep.Adapters {
			if d := fr.FirstAcquire[a]; d >= 0 {
				firsts = append(firsts, d)
			}
			gaps = append(gaps, fr.MaxGap[a])
		}
	}
	r.rep.RecoveryP50, r.rep.RecoveryMax = p50max(firsts)
	r.rep.GapP50, r.rep.GapMax = p50max(gaps)
}
