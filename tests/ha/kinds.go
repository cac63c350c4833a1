package ha

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/syncguard/syncguard-go/internal/rules"
	"github.com/syncguard/syncguard-go/multilock"
	"github.com/syncguard/syncguard-go/rwlock"
	"github.com/syncguard/syncguard-go/semaphore"
	"github.com/syncguard/syncguard-go/syncguard"
	"github.com/syncguard/syncguard-go/tests/pgtest/history"
	"github.com/syncguard/syncguard-go/tests/pgtest/kindcheck"
	"github.com/syncguard/syncguard-go/txguard"
)

// The lock kinds through the same failovers as the mutex (issue 42): on
// one client per adapter, beside the mutex workers, a semaphore of
// kindsPermits on one key, a read-write lock (readers and writers on one
// key), a set lock (crossing sets of one to three of three keys) and
// writes to a resource table under txguard's lease check (mutex leases of
// the kinds' own lock table). Their tables are separate from the mutex's
// (lock table ha_kinds), so that the mutex's audit and the
// linearizability checker see only the mutex.
//
// The checks (tests/pgtest/kindcheck, shared with tests/chaos) run after
// the load: the audits on the last primary (one holder per slot, at most
// kindsPermits, writers alone, sets all-or-nothing, fences strictly
// increasing per key or slot, on the server's clock), the clients' record
// of acknowledged fences (none handed out twice, none after a failover at
// or below one acknowledged before it: what a failover lost shows there,
// the audit lost it too), and the resource table (no zombie write
// committed, every committed write still there).

const (
	kindsTable    = "ha_kinds"
	kindsFences   = "ha_kinds_fences"
	kindsResource = "ha_kinds_resource"
	kindsPermits  = 2
	kindsSemKey   = "ha-sem"
	kindsRWKey    = "ha-rw"
)

var (
	kindsMLKeys = []string{"ha-ml-0", "ha-ml-1", "ha-ml-2"}
	kindsTxKeys = []string{"ha-tx-0", "ha-tx-1"}
)

// KindStats is what one kind did in a run.
type KindStats struct {
	Acquired  int64 // acquires acknowledged (rwlock: Writers of them exclusive)
	Writers   int64
	Abandoned int64 // holders that died (no release, no extend)
	// Checked are the holdings the audit check rebuilt (semaphore: ended
	// holdings; rwlock: leases; multilock: key holdings); Peak is the
	// semaphore's most live holders at one server time.
	Checked int
	Peak    int64
	// txguard only: writes committed, writes in belief that found their
	// lease lost when they ran, writes that failed for a fault, and zombie
	// writes (after the lease's expiry plus a TTL) rejected and accepted.
	Committed, LostInBelief, WriteErrors, ZombieRejected, ZombieAccepted int64
}

// kindsClient is one client's handles of the kinds.
type kindsClient struct {
	name string
	db   *sql.DB
	b    *syncguard.Backend
	sem  *semaphore.Semaphore
	rw   *rwlock.RWLock
	ml   *multilock.Locker
	g    *txguard.Guard
}

type kindsRun struct {
	cfg   syncguard.Config
	admin *sql.DB
	cl    []*kindsClient
	tx    *kindcheck.TxTable
	acks  kindcheck.Acks
	cuts  []kindcheck.Cut

	mu           sync.Mutex // guards the stats and the committed writes
	stats        map[string]*KindStats
	committed    map[string]int64 // tx key -> writes committed
	maxCommitted map[string]int64 // tx key -> largest fence committed
}

// setupKinds creates the kinds' tables with their audits and the
// resource table through admin, and the kinds' handles on one client per
// adapter (a pool of its own).
func (r *runner) setupKinds(ctx context.Context, admin *sql.DB, clients []client) error {
	k := &kindsRun{cfg: syncguard.Config{TableName: kindsTable, FenceTableName: kindsFences, Logger: discard()}, admin: admin,
		stats: map[string]*KindStats{}, committed: map[string]int64{}, maxCommitted: map[string]int64{}}
	for _, kind := range kindcheck.Kinds {
		k.stats[kind] = &KindStats{}
	}
	r.kinds = k
	r.rep.Kinds = k.stats
	cfg := &k.cfg
	for _, step := range []func() error{
		func() error { return syncguard.SetupSchema(ctx, admin, cfg) },
		func() error { return semaphore.SetupSchema(ctx, admin, cfg) },
		func() error { return rwlock.SetupSchema(ctx, admin, cfg) },
		func() error { return multilock.SetupSchema(ctx, admin, cfg) },
		func() error { return kindcheck.InstallSemaphoreAudit(ctx, admin, kindsTable) },
		func() error { return kindcheck.InstallRWLockAudit(ctx, admin, kindsTable) },
		func() error { return kindcheck.InstallMultiLockAudit(ctx, admin, cfg) },
		func() (err error) { k.tx, err = kindcheck.SetupTxTable(ctx, admin, cfg, kindsResource); return err },
	} {
		if err := step(); err != nil {
			return fmt.Errorf("ha: setting up the lock kinds: %w", err)
		}
	}
	seen := map[string]bool{}
	for _, c := range clients {
		drv, _, _ := strings.Cut(c.name, "-")
		if seen[drv] {
			continue // one client per adapter: the clusters' max_connections
		}
		seen[drv] = true
		db, err := c.open("ha-kinds-" + c.name)
		if err != nil {
			return err
		}
		db.SetMaxOpenConns(6)
		kc := &kindsClient{name: c.name, db: db}
		k.cl = append(k.cl, kc)
		if kc.b, err = syncguard.New(db, cfg); err == nil {
			if kc.sem, err = semaphore.New(db, cfg, kindsPermits); err == nil {
				if kc.rw, err = rwlock.New(db, cfg); err == nil {
					if kc.ml, err = multilock.New(db, cfg); err == nil {
						kc.g, err = txguard.New(db, cfg)
					}
				}
			}
		}
		if err != nil {
			return fmt.Errorf("ha: the lock kinds on %s: %w", c.name, err)
		}
	}
	return nil
}

// closeKinds closes the kinds' handles and pools.
func (k *kindsRun) close() {
	for _, kc := range k.cl {
		for _, c := range []interface{ Close() error }{kc.sem, kc.rw, kc.ml} {
			if c != nil {
				_ = c.Close()
			}
		}
		kc.db.Close()
	}
	k.cl = nil
}

// startKinds starts the kinds' workers on r.ctx.
func (r *runner) startKinds(wg *sync.WaitGroup) {
	for ci, kc := range r.kinds.cl {
		for i, run := range []func(*kindsClient, string, *rand.Rand){
			r.semWorker, r.semWorker, r.rwWorker, r.rwWorker, r.mlWorker, r.mlWorker, r.txWorker,
		} {
			rng := rand.New(rand.NewPCG(r.o.Seed, uint64(1000+ci*100+i)))
			name := fmt.Sprintf("%s-kind-%d", kc.name, i)
			wg.Go(func() { run(kc, name, rng) })
		}
	}
}

func (k *kindsRun) count(kind string, f func(s *KindStats)) {
	k.mu.Lock()
	f(k.stats[kind])
	k.mu.Unlock()
}

// acquired notes an acknowledged acquire of kind: its fences (fence key
// -> fence) go into the clients' record.
func (r *runner) acquired(kc *kindsClient, kind, worker, lockID string, sent time.Time, fences map[string]syncguard.Fence) {
	now := time.Now()
	for key, f := range fences {
		n, err := f.Int64()
		if err != nil {
			r.addViolation(history.Violation{Rule: RuleErrors, Key: key, Detail: fmt.Sprintf("%s: %s acquire returned fence %q", worker, kind, f)})
			continue
		}
		r.kinds.acks.Add(kindcheck.Ack{Kind: kind, Key: key, Fence: n, Worker: worker, Lock: syncguard.HashKey(lockID), Sent: sent, Acked: now})
	}
	r.kinds.count(kind, func(s *KindStats) { s.Acquired++ })
	r.noteAs(kc.name, kind+"-acquire", "ok", nil)
}

// failed notes a failed acquire and backs off after a fault.
func (r *runner) failed(kc *kindsClient, kind string, err error, rng *rand.Rand, fails *int) {
	r.noteAs(kc.name, kind+"-acquire", "", err)
	if syncguard.CodeOf(err) != syncguard.ErrAcquisitionTimeout {
		*fails++
		backoff(r.ctx, rng, *fails)
	}
}

// hold holds a lease for 20-300 ms, or until it is lost or the run ends.
func (r *runner) hold(l *syncguard.Lease, rng *rand.Rand) {
	t := time.NewTimer(time.Duration(20+rng.IntN(280)) * time.Millisecond)
	defer t.Stop()
	select {
	case <-t.C:
	case <-l.Done():
	case <-r.ctx.Done():
	}
}

// holdLoop is a worker of kind: it acquires through acquire (abandon:
// without AutoExtend), notes the fences it returns, holds the lease for
// 20-300 ms and releases it, or one in abandonOneIn times dies holding it
// (no extend, no release: it returns at its TTL).
func (r *runner) holdLoop(kc *kindsClient, kind, name string, rng *rand.Rand, abandonOneIn int,
	acquire func(ctx context.Context, opts *syncguard.LockOptions) (*syncguard.Lease, map[string]syncguard.Fence, error)) {
	fails := 0
	for r.ctx.Err() == nil {
		abandon := rng.IntN(abandonOneIn) == 0
		sent := time.Now()
		lctx, stop := context.WithCancel(r.ctx)
		l, fences, err := acquire(lctx, r.lockOptions(kc.name, !abandon))
		if err != nil {
			stop()
			r.failed(kc, kind, err, rng, &fails)
			continue
		}
		fails = 0
		r.acquired(kc, kind, name, l.LockID(), sent, fences)
		r.hold(l, rng)
		if abandon {
			r.kinds.count(kind, func(s *KindStats) { s.Abandoned++ })
			context.AfterFunc(r.ctx, stop)
			continue
		}
		l.Close()
		stop()
	}
}

// semWorker takes permits of the semaphore.
func (r *runner) semWorker(kc *kindsClient, name string, rng *rand.Rand) {
	r.holdLoop(kc, "semaphore", name, rng, 10, func(ctx context.Context, opts *syncguard.LockOptions) (*syncguard.Lease, map[string]syncguard.Fence, error) {
		p, err := kc.sem.Lock(ctx, kindsSemKey, opts)
		if err != nil {
			return nil, nil, err
		}
		return p.Lease, map[string]syncguard.Fence{p.FenceKey(): p.Fence()}, nil
	})
}

// rwWorker takes shared leases of the read-write lock's key, and one in
// four times the exclusive one (only a writer's fence is its own: a
// reader's is the writer's before it).
func (r *runner) rwWorker(kc *kindsClient, name string, rng *rand.Rand) {
	r.holdLoop(kc, "rwlock", name, rng, 20, func(ctx context.Context, opts *syncguard.LockOptions) (*syncguard.Lease, map[string]syncguard.Fence, error) {
		side := kc.rw.Shared()
		if rng.IntN(4) == 0 {
			side = kc.rw.Exclusive()
		}
		l, err := syncguard.Lock(ctx, side, kindsRWKey, opts)
		if err != nil || !side.IsExclusive() {
			return l, nil, err
		}
		r.kinds.count("rwlock", func(s *KindStats) { s.Writers++ })
		return l, map[string]syncguard.Fence{kindsRWKey: l.Fence()}, nil
	})
}

// mlWorker locks sets of one to three of the three keys, named in random
// order.
func (r *runner) mlWorker(kc *kindsClient, name string, rng *rand.Rand) {
	keys := append([]string(nil), kindsMLKeys...)
	r.holdLoop(kc, "multilock", name, rng, 20, func(ctx context.Context, opts *syncguard.LockOptions) (*syncguard.Lease, map[string]syncguard.Fence, error) {
		rng.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
		set := append([]string(nil), keys[:1+rng.IntN(len(keys))]...)
		l, err := multilock.Lock(ctx, kc.ml, set, opts)
		if err != nil {
			return nil, nil, err
		}
		fences := map[string]syncguard.Fence{}
		for _, kf := range l.Fences() {
			fences[kf.Key] = kf.Fence
		}
		if len(fences) != len(set) {
			r.addViolation(history.Violation{Rule: kindcheck.RuleMLOneTx, Detail: fmt.Sprintf("%s: a set of %d keys came back with %d fences", name, len(set), len(fences))})
		}
		return l.Lease, fences, nil
	})
}

// txWorker takes a mutex lease of one of the resource's keys and writes
// to the resource table one to three times while it holds it, each write
// checked by txguard (Hold, or the SQL function in the write's
// statement). One in six holders dies holding its lease and, once the
// lease has expired by any extend it may have sent plus a TTL (a stalled
// process waking up), writes again as a zombie: txguard must reject it.
func (r *runner) txWorker(kc *kindsClient, name string, rng *rand.Rand) {
	fails := 0
	for r.ctx.Err() == nil {
		key := kindsTxKeys[rng.IntN(len(kindsTxKeys))]
		abandon := rng.IntN(6) == 0
		sent := time.Now()
		lctx, stop := context.WithCancel(r.ctx)
		l, err := syncguard.Lock(lctx, kc.b, key, r.lockOptions(kc.name, !abandon))
		if err != nil {
			stop()
			r.failed(kc, "txguard", err, rng, &fails)
			continue
		}
		fails = 0
		r.acquired(kc, "txguard", name, l.LockID(), sent, map[string]syncguard.Fence{key: l.Fence()})
		fence, _ := l.Fence().Int64()
		for range 1 + rng.IntN(3) {
			if l.Err() != nil || !time.Now().Before(l.ExpiresAt()) {
				break
			}
			r.txWrite(kc, name, key, l.LockID(), fence, rng.IntN(2) == 0, false)
			sleepCtx(r.ctx, time.Duration(10+rng.IntN(90))*time.Millisecond)
		}
		if abandon {
			r.kinds.count("txguard", func(s *KindStats) { s.Abandoned++ })
			sleepCtx(r.ctx, time.Until(l.ExpiresAt().Add(rules.ToleranceMs*time.Millisecond+hotTTL+100*time.Millisecond)))
			if r.ctx.Err() == nil {
				r.txWrite(kc, name, key, l.LockID(), fence, false, true)
			}
			stop()
			continue
		}
		r.hold(l, rng)
		l.Close()
		stop()
	}
}

// txWrite makes one write to the resource table and judges it.
func (r *runner) txWrite(kc *kindsClient, name, key, lockID string, fence int64, viaSQL, zombie bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*opTimeout)
	out, detail, _ := r.kinds.tx.Write(ctx, kc.db, kc.g, key, lockID, fence, viaSQL)
	cancel()
	k := r.kinds
	k.mu.Lock()
	s := k.stats["txguard"]
	violation := ""
	switch {
	case out == kindcheck.TxViolation:
		violation = detail
	case out == kindcheck.TxError:
		s.WriteErrors++
	case zombie && out == kindcheck.TxAccepted:
		s.ZombieAccepted++
		violation = "a zombie write committed after its lease's expiry plus a TTL"
	case zombie:
		s.ZombieRejected++
	case out == kindcheck.TxAccepted:
		s.Committed++
		k.committed[key]++
		k.maxCommitted[key] = max(k.maxCommitted[key], fence)
	default:
		s.LostInBelief++
	}
	k.mu.Unlock()
	if violation != "" {
		r.addViolation(history.Violation{Rule: kindcheck.RuleTxLease, Key: key, Detail: fmt.Sprintf("%s (fence %d): %s", name, fence, violation)})
	}
}

// checkKinds judges the kinds after the load (the workers have stopped)
// and, on a violation, saves the evidence to a file named in the report.
func (r *runner) checkKinds(ctx context.Context) {
	k := r.kinds
	k.close()
	var vs []history.Violation
	bad := func(kind string, err error) {
		vs = append(vs, history.Violation{Rule: RuleErrors, Detail: fmt.Sprintf("the %s check could not read its evidence: %v", kind, err)})
	}
	sem, v, err := kindcheck.CheckSemaphore(ctx, k.admin, kindsTable, kindsPermits)
	if err != nil {
		bad("semaphore", err)
	}
	vs = append(vs, v...)
	v, nrw, err := kindcheck.CheckRWLock(ctx, k.admin, kindsTable)
	if err != nil {
		bad("rwlock", err)
	}
	vs = append(vs, v...)
	v, nml, err := kindcheck.CheckMultiLock(ctx, k.admin, kindsTable)
	if err != nil {
		bad("multilock", err)
	}
	vs = append(vs, v...)
	rows, err := k.tx.Rows(ctx, k.admin)
	if err != nil {
		bad("txguard", err)
	}
	k.mu.Lock()
	k.stats["semaphore"].Checked, k.stats["semaphore"].Peak = sem.Holdings, sem.Peak
	k.stats["rwlock"].Checked, k.stats["multilock"].Checked = nrw, nml
	for key, n := range k.committed {
		if row := rows[key]; err == nil && (row.Writes < n || row.Fence < k.maxCommitted[key]) {
			vs = append(vs, history.Violation{Rule: kindcheck.RuleTxKept, Key: key,
				Detail: fmt.Sprintf("%d writes committed, up to fence %d; the table has %d writes, fence %d", n, k.maxCommitted[key], row.Writes, row.Fence)})
		}
	}
	k.stats["txguard"].Checked = len(rows)
	k.mu.Unlock()
	vs = append(vs, k.acks.Check(k.cuts)...)
	for _, v := range vs {
		r.addViolation(v)
	}
	if len(vs) > 0 {
		r.dumpKinds(ctx, vs)
	}
	k.tx.Drop(ctx, k.admin)
}

// dumpKinds writes the kinds' evidence (the violations, the clients'
// record, the audits and the resource table) to a file in RunOptions.Dir.
func (r *runner) dumpKinds(ctx context.Context, vs []history.Violation) {
	dir := r.o.Dir
	if dir == "" {
		dir = os.TempDir()
	}
	path := filepath.Join(dir, fmt.Sprintf("ha-kinds-%d.txt", time.Now().UnixNano()))
	var b strings.Builder
	fmt.Fprintf(&b, "lock kinds: %d violations (seed %d)\n", len(vs), r.o.Seed)
	for _, v := range vs {
		fmt.Fprintf(&b, "%s\n\n", v)
	}
	for _, c := range r.kinds.cuts {
		fmt.Fprintf(&b, "fault at %s; fences acknowledged before it: %v\n", c.At.Format(time.StampMilli), c.Max)
	}
	b.WriteString("== acknowledged acquires (kind, key, fence, worker, lock, sent, acked)\n")
	for _, a := range r.kinds.acks.All() {
		fmt.Fprintf(&b, "%s\t%s\t%d\t%s\t%s\t%s\t%s\n", a.Kind, a.Key, a.Fence, a.Worker, a.Lock, a.Sent.Format(time.StampMilli), a.Acked.Format(time.StampMilli))
	}
	rwAudit, _ := kindcheck.RWLockAudit(kindsTable)
	mlAudit, _ := kindcheck.MultiLockAudit(kindsTable)
	for _, t := range []string{kindcheck.SemaphoreAudit(kindsTable), rwAudit, mlAudit, r.kinds.tx.Table()} {
		if err := kindcheck.Dump(ctx, r.kinds.admin, t, &b); err != nil {
			fmt.Fprintf(&b, "== %s: %v\n", t, err)
		}
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		r.o.Logf("ha: saving the lock kinds' evidence: %v", err)
		return
	}
	r.o.Logf("ha: the lock kinds' evidence: %s", path)
	r.repMu.Lock()
	r.rep.KindsDump = path
	r.repMu.Unlock()
}

// kindsSummary adds the kinds' figures and rule checks to a report.
func (r *Report) kindsSummary(b *strings.Builder) {
	if r.Kinds == nil {
		return
	}
	s := func(kind string) KindStats {
		if p := r.Kinds[kind]; p != nil {
			return *p
		}
		return KindStats{}
	}
	sem, rw, ml, tx := s("semaphore"), s("rwlock"), s("multilock"), s("txguard")
	b.WriteString("lock kinds (one client per adapter):\n")
	fmt.Fprintf(b, "  semaphore of %d permits on one key: %d permits acquired (%d abandoned), %d ended holdings checked on the server's clock, peak %d live holders\n",
		kindsPermits, sem.Acquired, sem.Abandoned, sem.Checked, sem.Peak)
	fmt.Fprintf(b, "  rwlock on one key: %d leases acquired (%d exclusive, %d abandoned), %d leases checked on the server's clock\n",
		rw.Acquired, rw.Writers, rw.Abandoned, rw.Checked)
	fmt.Fprintf(b, "  multilock, sets of 1-3 of %d keys: %d sets acquired (%d abandoned), %d key holdings checked on the server's clock\n",
		len(kindsMLKeys), ml.Acquired, ml.Abandoned, ml.Checked)
	fmt.Fprintf(b, "  txguard on %d keys: %d leases (%d abandoned), writes %d committed, %d found their lease lost, %d failed for a fault; zombie writes %d rejected, %d committed\n",
		len(kindsTxKeys), tx.Acquired, tx.Abandoned, tx.Committed, tx.LostInBelief, tx.WriteErrors, tx.ZombieRejected, tx.ZombieAccepted)
	byRule := r.ViolationsByRule()
	b.WriteString("lock kinds' rule checks (violations):\n")
	for _, kind := range kindcheck.Kinds {
		for _, rule := range kindcheck.Rules(kind) {
			fmt.Fprintf(b, "  %4d  %s\n", byRule[rule], rule)
		}
	}
	if r.KindsDump != "" {
		fmt.Fprintf(b, "lock kinds' evidence: %s\n", r.KindsDump)
	}
}
