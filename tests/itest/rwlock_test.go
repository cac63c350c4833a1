package itest_test

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/syncguard/syncguard-go/conformance"
	"github.com/syncguard/syncguard-go/driver"
	"github.com/syncguard/syncguard-go/internal/rules"
	"github.com/syncguard/syncguard-go/rwlock"
	"github.com/syncguard/syncguard-go/syncguard"
	"github.com/syncguard/syncguard-go/tests/pgtest"
	"github.com/syncguard/syncguard-go/tests/pgtest/suite"
)

// rwTarget opens a pool on dsn, creates read-write lock tables of their
// own (a fresh TableName) and returns the RWLock on them.
func rwTarget(t testing.TB, d suite.Driver, dsn string) (*rwlock.RWLock, *sql.DB, syncguard.Config) {
	t.Helper()
	db, err := sql.Open(d.Name, dsn)
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(60)
	t.Cleanup(func() { db.Close() })
	dialect := d.Dialect
	if d.DialectFor != nil {
		dialect = d.DialectFor(dsn)
	}
	cfg := syncguard.Config{TableName: fmt.Sprintf("rw_%08x", rand.Uint32()), Dialect: dialect}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := rwlock.SetupSchema(ctx, db, &cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		n := cfg.TableName
		_, _ = db.Exec(fmt.Sprintf(`DROP TABLE IF EXISTS %s, %s, %s`, rules.QuoteIdent(n+"_rw"), rules.QuoteIdent(n+"_rw_keys"), rules.QuoteIdent(n+"_rw_waiters")))
		for _, f := range []string{"_rw_acquire", "_rw_release", "_rw_grant", "_rw_hint", "_rw_lock"} {
			_, _ = db.Exec(fmt.Sprintf(`DROP FUNCTION IF EXISTS %s CASCADE`, rules.QuoteIdent(n+f)))
		}
	})
	rw, err := rwlock.New(db, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rw.Close() })
	return rw, db, cfg
}

func rwHarness(d suite.Driver, dsn string, polling bool) conformance.RWLockHarness {
	return conformance.RWLockHarness{Parallel: true, New: func(t *testing.T) conformance.RWLockTarget {
		rw, _, _ := rwTarget(t, d, dsn)
		return conformance.RWLockTarget{Shared: rw.Shared(), Exclusive: rw.Exclusive(), WriterFence: rw.WriterFence, Polling: polling}
	}}
}

func TestRWLockConformancePQ(t *testing.T) {
	conformance.RunRWLock(t, rwHarness(pqDriver, pgtest.Require(t).DSN, false))
}

func TestRWLockConformancePGX(t *testing.T) {
	conformance.RunRWLock(t, rwHarness(pgxDriver, pgtest.Require(t).DSN, false))
}

// bouncerDSN starts PgBouncer in transaction mode: notifications do not
// pass it, waiting polls.
func bouncerDSN(t *testing.T, d suite.Driver) string {
	pgtest.Long(t, "the read-write lock through PgBouncer")
	srv := pgtest.Require(t)
	if srv.Kind == pgtest.KindEnv {
		t.Skip("PgBouncer is started in front of a local or docker server only")
	}
	b := pgtest.RequirePgBouncer(t, srv, pgtest.PgBouncerOptions{PoolMode: "transaction", DefaultPoolSize: 40})
	return b.DSN + d.PgBouncerParams + "&connect_timeout=5"
}

func TestRWLockConformancePQThroughPgBouncer(t *testing.T) {
	d := pqDriver
	d.DialectFor = func(string) driver.Dialect { return pqDriver.Dialect } // no LISTEN through the pooler
	conformance.RunRWLock(t, rwHarness(d, bouncerDSN(t, d), true))
}

func TestRWLockConformancePGXThroughPgBouncer(t *testing.T) {
	conformance.RunRWLock(t, rwHarness(pgxDriver, bouncerDSN(t, pgxDriver), true))
}

// rwEvent is one lease as the server saw it: admitted and released at
// server times (the holders table's acquired_at_ms; the release's clock).
type rwEvent struct {
	excl     bool
	from, to int64 // server ms
	fence    int64
	id       string
}

// rwMix runs readers:writers = 100:1 on one key: 100 reader goroutines
// loop (Lock, hold a few ms, release), one writer loops likewise, for
// rounds writer turns. It checks on the server's clock that no writer
// lease overlaps any other lease, that readers overlap, and that writer
// fences strictly increase, and reports how many reader admissions (and
// batches) came between a writer's queueing and its turn.
func rwMix(t *testing.T, d suite.Driver, dsn string, rounds int) {
	rw, db, cfg := rwTarget(t, d, dsn)
	audit := newRWAudit(t, db, cfg.TableName)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	key := "mix"
	var (
		mu      sync.Mutex
		leases  []rwEvent
		stop    atomic.Bool
		readers sync.WaitGroup
	)
	opts := &syncguard.LockOptions{TTL: 30 * time.Second, Acquisition: syncguard.AcquisitionOptions{Timeout: time.Minute}}
	record := func(l *syncguard.Lease, excl bool) {
		var acq int64
		if err := db.QueryRowContext(ctx, fmt.Sprintf(`SELECT acquired_at_ms FROM %s WHERE lock_id = $1`, rules.QuoteIdent(cfg.TableName+"_rw")), l.LockID()).Scan(&acq); err != nil {
			t.Error(err)
		}
		f, _ := l.Fence().Int64()
		mu.Lock()
		leases = append(leases, rwEvent{excl: excl, from: acq, fence: f, id: l.LockID()})
		i := len(leases) - 1
		mu.Unlock()
		time.Sleep(time.Duration(2+rand.IntN(4)) * time.Millisecond)
		var now int64
		_ = db.QueryRowContext(ctx, `SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint`).Scan(&now)
		mu.Lock()
		leases[i].to = now
		mu.Unlock()
		if r, err := l.Release(ctx); err != nil || !r.OK {
			t.Errorf("release: %+v %v", r, err)
		}
	}
	for range 100 {
		readers.Add(1)
		go func() {
			defer readers.Done()
			for !stop.Load() {
				l, err := syncguard.Lock(ctx, rw.Shared(), key, opts)
				if err != nil {
					t.Error(err)
					return
				}
				record(l, false)
			}
		}()
	}
	time.Sleep(200 * time.Millisecond)
	serverNow := func() int64 {
		var now int64
		_ = db.QueryRowContext(ctx, `SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint`).Scan(&now)
		return now
	}
	var calls []int64  // server time just before each writer's Lock call
	var queued []int64 // and just after its first attempt answered (its queue place committed)
	var waitTimes []time.Duration
	for range rounds {
		calls = append(calls, serverNow())
		wopts := *opts
		first := true
		wopts.OnAttempt = func(syncguard.AcquireResult, error) {
			if first {
				first = false
				queued = append(queued, serverNow())
			}
		}
		start := time.Now()
		l, err := syncguard.Lock(ctx, rw.Exclusive(), key, &wopts)
		if err != nil {
			t.Fatal(err)
		}
		waitTimes = append(waitTimes, time.Since(start))
		record(l, true)
		time.Sleep(20 * time.Millisecond)
	}
	stop.Store(true)
	readers.Wait()
	// Invariants on the server's clock.
	sort.Slice(leases, func(i, j int) bool { return leases[i].from < leases[j].from })
	var lastFence int64 = -1
	for i, a := range leases {
		if a.excl {
			if a.fence <= lastFence {
				t.Errorf("rule: writer fences strictly increase: %d after %d", a.fence, lastFence)
			}
			lastFence = a.fence
		}
		for j, b := range leases {
			if i == j || b.from >= a.to || a.from >= b.to {
				continue
			}
			if a.excl || b.excl {
				// touching at the same millisecond is a hand-off, not an overlap
				if b.from < a.to && a.from < b.to && !(b.from == a.to || a.from == b.to) {
					t.Errorf("rule: a writer overlaps no other lease: %+v and %+v\n%s", a, b, audit.dump(ctx, min(a.from, b.from)-30, max(a.to, b.to)+30, a.id, b.id))
				}
			}
		}
	}
	// Per writer turn: the readers admitted after its first attempt had
	// queued it and before its lease (one batch at most: only readers
	// queued before it, each of the 100 at most once; before its place
	// commits, which a loaded machine can delay by seconds, readers come
	// and go freely), and the readers it waited for (holding at its call).
	var writers []rwEvent
	for _, a := range leases {
		if a.excl {
			writers = append(writers, a)
		}
	}
	var after, heldAt []int
	for i, w := range writers {
		n, h := 0, 0
		for _, r := range leases {
			if r.excl {
				continue
			}
			if r.from > queued[i] && r.from < w.from {
				n++
			}
			if r.from <= calls[i] && r.to > calls[i] {
				h++
			}
		}
		after, heldAt = append(after, n), append(heldAt, h)
	}
	// The most reader leases live at one server millisecond.
	type edge struct {
		at int64
		d  int
	}
	var edges []edge
	for _, a := range leases {
		if !a.excl {
			edges = append(edges, edge{a.from, 1}, edge{a.to, -1})
		}
	}
	sort.Slice(edges, func(i, j int) bool {
		return edges[i].at < edges[j].at || edges[i].at == edges[j].at && edges[i].d < edges[j].d
	})
	cur, peak := 0, 0
	for _, e := range edges {
		cur += e.d
		peak = max(peak, cur)
	}
	sort.Ints(after)
	t.Logf("100 readers : 1 writer, %d writer turns, %d leases, writer fences strictly increasing, no writer overlapping any lease (server clock): readers admitted between a writer's queueing and its turn: %v (max %d); readers holding at its call (the batch it waited for): %v; writer wait median %v max %v; up to %d reader leases live at once",
		rounds, len(leases), after, after[len(after)-1], heldAt, median(waitTimes), maxDur(waitTimes), peak)
	if after[len(after)-1] > 100 {
		t.Errorf("rule: a writer gets its turn within one reader batch (each of the 100 readers admitted at most once before it): %d admissions", after[len(after)-1])
	}
	if peak < 2 {
		t.Errorf("rule: readers overlap: at most %d reader lease live at once", peak)
	}
}

func median(d []time.Duration) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

func maxDur(d []time.Duration) time.Duration {
	var m time.Duration
	for _, x := range d {
		m = max(m, x)
	}
	return m
}

func TestRWLockReadersWriterPQ(t *testing.T) { rwMix(t, pqDriver, pgtest.Require(t).DSN, 10) }

func TestRWLockReadersWriterPGX(t *testing.T) { rwMix(t, pgxDriver, pgtest.Require(t).DSN, 10) }

func TestRWLockReadersWriterPGXThroughPgBouncer(t *testing.T) {
	rwMix(t, pgxDriver, bouncerDSN(t, pgxDriver), 10)
}

func TestRWLockReadersWriterPQThroughPgBouncer(t *testing.T) {
	d := pqDriver
	d.DialectFor = func(string) driver.Dialect { return pqDriver.Dialect }
	rwMix(t, d, bouncerDSN(t, d), 10)
}

// TestRWLockIndependentOfMutex: a key used as a read-write lock and as a
// mutex of the same name, on the same TableName, share no row and no fence
// counter.
func TestRWLockIndependentOfMutex(t *testing.T) {
	rw, db, cfg := rwTarget(t, pgxDriver, pgtest.Require(t).DSN)
	ctx := context.Background()
	cfg.FenceTableName = cfg.TableName + "_f"
	if err := syncguard.SetupSchema(ctx, db, &cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = db.Exec(fmt.Sprintf(`DROP TABLE IF EXISTS %s, %s, %s, %s`, rules.QuoteIdent(cfg.TableName), rules.QuoteIdent(cfg.FenceTableName),
			rules.QuoteIdent(cfg.TableName+"_waiters"), rules.QuoteIdent(cfg.TableName+"_holders")))
	})
	b, err := syncguard.New(db, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	m, err := b.Acquire(ctx, "same", time.Minute)
	if err != nil || !m.OK {
		t.Fatal(m, err)
	}
	w, err := rw.Exclusive().Acquire(ctx, "same", time.Minute)
	if err != nil || !w.OK {
		t.Fatalf("rule: the mutex of a key does not hold its read-write lock: %+v %v", w, err)
	}
	if w.Fence != "000000000000001" {
		t.Errorf("rule: the read-write lock's writer fences are its own counter: got %s after the mutex took a fence", w.Fence)
	}
	if locked, _ := b.IsLocked(ctx, "same"); !locked {
		t.Error("the mutex is still held")
	}
	if _, err := rw.Exclusive().Release(ctx, w.LockID); err != nil {
		t.Fatal(err)
	}
	if r, _ := b.Release(ctx, m.LockID); !r.OK {
		t.Error("rule: the mutex's release is unaffected")
	}
}
