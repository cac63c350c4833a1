package sgbench

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/syncguard/syncguard-go/internal/rules"
	"github.com/syncguard/syncguard-go/rwlock"
	"github.com/syncguard/syncguard-go/syncguard"
)

// Workload k-rw: the read-write lock's readers share. N readers loop on
// one key: Lock (shared), hold a random 10-40 ms, release, at once again.
// Readers only, for each variant in turn (interleaved rounds; each
// variant has a pool of N+3 connections and a locker of its own, warmed up
// for a second before the rounds):
//
//	rwlock                 rw.Shared() (waiters woken by notifications)
//	rwlock, polling        the same without LISTEN (a dialect without
//	                       driver.Listener: as lib/pq via sql.Open, or
//	                       behind a transaction-mode pooler)
//	mutex (one Backend)    syncguard.Backend on the same key: one holder at
//	                       a time (the baseline the readers must beat)
//	no lock (ideal)        workers just sleep their hold
//	durable floor          no lock, but each worker inserts a row of its own
//	                       (autocommit) before its hold and deletes it after:
//	                       the commit latency any lock's acquire pays here
//
// Then the same readers with one writer beside them (rwlock and rwlock,
// polling): the writer asks, holds WriterHold, releases, pauses
// WriterEvery, and again. Measured: the most readers holding at once,
// holdings/s, the reader's wait in Lock (p50/p99/max), the writer's turns
// and wait (p50/p99/max), and overlaps of a writer with a reader as the
// clients see them (a reader counts itself from Lock's return to its
// release call, the writer likewise: an overlap seen is a real one).

// RWParams sizes k-rw.
type RWParams struct {
	Readers          int
	HoldMin, HoldMax time.Duration
	Duration         time.Duration // readers only, per variant (split over Rounds)
	WriterDuration   time.Duration // with the writer, per variant (split over Rounds)
	WriterHold       time.Duration
	WriterEvery      time.Duration // the writer's pause between a release and its next ask
	Rounds           int
}

// DefaultRWParams is the shape the targets are set for.
var DefaultRWParams = RWParams{Readers: 30, HoldMin: 10 * time.Millisecond, HoldMax: 40 * time.Millisecond,
	Duration: 6 * time.Second, WriterDuration: 12 * time.Second, WriterHold: 10 * time.Millisecond,
	WriterEvery: 100 * time.Millisecond, Rounds: 2}

// k-rw variants.
const (
	RWVarShared  = "rwlock"
	RWVarPolling = "rwlock, polling (no LISTEN)"
	RWVarMutex   = "mutex (one syncguard.Backend)"
	RWVarIdeal   = "no lock (ideal)"
	RWVarFloor   = "durable floor (no lock)"
)

// RWRow is one variant and phase of k-rw.
type RWRow struct {
	Variant        string  `json:"variant"`
	Writer         bool    `json:"writer"` // the phase with one writer
	Seconds        float64 `json:"seconds"`
	MaxReaders     int     `json:"max_readers_at_once"`
	Holdings       int     `json:"reader_holdings"`
	HoldingsPerSec float64 `json:"reader_holdings_per_s"`
	XMutex         float64 `json:"x_mutex,omitempty"` // holdings/s over the mutex's
	WaitP50        float64 `json:"reader_wait_p50_ms"`
	WaitP99        float64 `json:"reader_wait_p99_ms"`
	WaitMax        float64 `json:"reader_wait_max_ms"`
	WriterTurns    int     `json:"writer_turns,omitempty"`
	WriterP50      float64 `json:"writer_wait_p50_ms,omitempty"`
	WriterP99      float64 `json:"writer_wait_p99_ms,omitempty"`
	WriterMax      float64 `json:"writer_wait_max_ms,omitempty"`
	Overlaps       int64   `json:"writer_reader_overlaps"`
	Errors         int     `json:"errors"`
	FirstError     string  `json:"first_error,omitempty"`
}

// RWResult is k-rw for one driver: one JSON line.
type RWResult struct {
	Bench    string         `json:"bench"`
	Driver   string         `json:"driver"`
	Workload string         `json:"workload"`
	Method   string         `json:"method"`
	Params   map[string]any `json:"params"`
	Rows     []RWRow        `json:"rows"`
	Targets  []Target       `json:"targets,omitempty"`
}

func (r *RWResult) table() table {
	t := table{driver: r.Driver, title: "k-rw: readers share the read-write lock", method: r.Method, align: "l", targets: r.Targets,
		cols: []string{"variant", "phase", "max readers at once", "holdings/s", "x mutex", "reader wait p50/p99/max ms",
			"writer turns", "writer wait p50/p99/max ms", "overlaps", "errors"}}
	for _, x := range r.Rows {
		phase, turns, ww := "readers only", "-", "-"
		if x.Writer {
			phase, turns = "one writer", fmt.Sprint(x.WriterTurns)
			ww = fmt.Sprintf("%.0f/%.0f/%.0f", x.WriterP50, x.WriterP99, x.WriterMax)
		}
		t.rows = append(t.rows, []string{x.Variant, phase, fmt.Sprint(x.MaxReaders), fmt.Sprintf("%.0f", x.HoldingsPerSec),
			ratioStr(x.XMutex), fmt.Sprintf("%.0f/%.0f/%.0f", x.WaitP50, x.WaitP99, x.WaitMax), turns, ww,
			fmt.Sprint(x.Overlaps), fmt.Sprint(x.Errors)})
	}
	return t
}

// rwTable is k-rw's lock table (the read-write lock's tables are
// "<it>_rw*"; the mutex's "<it>_mutex" and "<it>_mutex_fences").
const rwTable = "sgbench_krw"

// KindRW runs k-rw with p on the WaitEnv's server and driver.
func (w *WaitEnv) KindRW(ctx context.Context, p RWParams) (*RWResult, error) {
	if p.Readers < 1 || p.Rounds < 1 || p.HoldMax < p.HoldMin {
		return nil, fmt.Errorf("k-rw: bad parameters %+v", p)
	}
	admin, err := sql.Open(w.SQLDriver, w.DSN)
	if err != nil {
		return nil, err
	}
	defer admin.Close()
	admin.SetMaxOpenConns(2)
	rwCfg := &syncguard.Config{TableName: rwTable, Dialect: w.Dialect}
	mxCfg := &syncguard.Config{TableName: rwTable + "_mutex", FenceTableName: rwTable + "_mutex_fences", Dialect: w.Dialect}
	drop := func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_ = DropTables(dctx, admin, rwTable+"_floor", rwTable+"_rw", rwTable+"_rw_keys", rwTable+"_rw_waiters",
			mxCfg.TableName, mxCfg.FenceTableName, mxCfg.TableName+"_waiters", mxCfg.TableName+"_holders")
		for _, f := range []string{"_rw_acquire", "_rw_release", "_rw_grant", "_rw_hint", "_rw_lock"} {
			_, _ = admin.ExecContext(dctx, `DROP FUNCTION IF EXISTS `+rules.QuoteIdent(rwTable+f)+` CASCADE`)
		}
	}
	drop()
	defer drop()
	if err := rwlock.SetupSchema(ctx, admin, rwCfg); err != nil {
		return nil, fmt.Errorf("k-rw: rwlock schema: %w", err)
	}
	if err := syncguard.SetupSchema(ctx, admin, mxCfg); err != nil {
		return nil, fmt.Errorf("k-rw: mutex schema: %w", err)
	}
	if _, err := admin.ExecContext(ctx, `CREATE TABLE `+rules.QuoteIdent(rwTable+"_floor")+` (id text PRIMARY KEY)`); err != nil {
		return nil, fmt.Errorf("k-rw: floor table: %w", err)
	}
	type job struct {
		variant string
		writer  bool
	}
	jobs := []job{{RWVarShared, false}, {RWVarMutex, false}, {RWVarIdeal, false}, {RWVarFloor, false}, {RWVarPolling, false},
		{RWVarShared, true}, {RWVarPolling, true}}
	accs := make([]*rwAcc, len(jobs))
	for i := range accs {
		accs[i] = &rwAcc{}
	}
	targets := map[string]*rwTarget{}
	defer func() {
		for _, t := range targets {
			t.close()
		}
	}()
	for _, j := range jobs {
		if targets[j.variant] != nil {
			continue
		}
		t, err := w.openRWTarget(ctx, p, j.variant, rwCfg, mxCfg)
		if err != nil {
			return nil, fmt.Errorf("k-rw: %s: %w", j.variant, err)
		}
		targets[j.variant] = t
		// warm-up, not measured: sessions plan and compile the functions
		if err := rwSegment(ctx, p, t, false, time.Second, &rwAcc{}); err != nil {
			return nil, fmt.Errorf("k-rw: %s warm-up: %w", j.variant, err)
		}
	}
	for round := range p.Rounds {
		for i, j := range jobs {
			d := p.Duration / time.Duration(p.Rounds)
			if j.writer {
				d = p.WriterDuration / time.Duration(p.Rounds)
			}
			if err := rwSegment(ctx, p, targets[j.variant], j.writer, d, accs[i]); err != nil {
				return nil, fmt.Errorf("k-rw: %s (writer %v, round %d): %w", j.variant, j.writer, round+1, err)
			}
		}
	}
	r := &RWResult{Bench: "syncguard", Driver: w.Driver, Workload: "k-rw",
		Method: fmt.Sprintf("%d readers hold %v-%v each and ask again at once; %d interleaved rounds; one writer holds %v and pauses %v between turns",
			p.Readers, p.HoldMin, p.HoldMax, p.Rounds, p.WriterHold, p.WriterEvery),
		Params: map[string]any{"readers": p.Readers, "hold_min_ms": p.HoldMin.Milliseconds(), "hold_max_ms": p.HoldMax.Milliseconds(),
			"duration_s": p.Duration.Seconds(), "writer_duration_s": p.WriterDuration.Seconds(), "writer_hold_ms": p.WriterHold.Milliseconds(),
			"writer_every_ms": p.WriterEvery.Milliseconds(), "rounds": p.Rounds}}
	var mutexRate float64
	for i, j := range jobs {
		row := accs[i].row(j.variant, j.writer)
		if j.variant == RWVarMutex {
			mutexRate = row.HoldingsPerSec
		}
		r.Rows = append(r.Rows, row)
	}
	for i := range r.Rows {
		if x := &r.Rows[i]; mutexRate > 0 && x.Variant != RWVarMutex {
			x.XMutex = x.HoldingsPerSec / mutexRate
		}
	}
	rwTargets(r)
	return r, nil
}

// rwTargets sets the targets on the rwlock variant (notified waiters).
func rwTargets(r *RWResult) {
	var ro, wr *RWRow
	for i := range r.Rows {
		if x := &r.Rows[i]; x.Variant == RWVarShared && !x.Writer {
			ro = x
		} else if x.Variant == RWVarShared && x.Writer {
			wr = x
		}
	}
	if ro == nil || wr == nil {
		return
	}
	var over int64
	for _, x := range r.Rows {
		over += x.Overlaps
	}
	add := func(name string, v float64, goal string, met bool) {
		r.Targets = append(r.Targets, Target{Name: "k-rw: " + name, Value: v, Goal: goal, Met: met})
	}
	add("readers at once (readers only)", float64(ro.MaxReaders), ">= 20", ro.MaxReaders >= 20)
	add("reader wait p99 ms (readers only)", ro.WaitP99, "<= 100", ro.WaitP99 <= 100)
	add("reader holdings/s x one mutex", ro.XMutex, ">= 5", ro.XMutex >= 5)
	turns := float64(wr.WriterTurns) * 12 / max(wr.Seconds, 1e-9)
	add("writer turns per 12 s (one writer)", turns, ">= 30", turns >= 30)
	add("writer wait p99 ms", wr.WriterP99, "<= 300", wr.WriterP99 <= 300)
	add("writer wait max ms", wr.WriterMax, "<= 1000", wr.WriterMax <= 1000)
	add("writer/reader overlaps seen (all variants)", float64(over), "0", over == 0)
}

// rwAcc accumulates a variant's segments.
type rwAcc struct {
	mu            sync.Mutex
	seconds       float64
	peak          int
	holdings      int
	waits, wwaits []time.Duration
	overlaps      int64
	errors        int
	firstErr      string
}

func (a *rwAcc) fail(err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.errors++; a.firstErr == "" {
		a.firstErr = err.Error()
	}
}

func (a *rwAcc) row(variant string, writer bool) RWRow {
	x := RWRow{Variant: variant, Writer: writer, Seconds: a.seconds, MaxReaders: a.peak, Holdings: a.holdings,
		Overlaps: a.overlaps, Errors: a.errors, FirstError: a.firstErr}
	if a.seconds > 0 {
		x.HoldingsPerSec = float64(a.holdings) / a.seconds
	}
	x.WaitP50, x.WaitP99, x.WaitMax = summarizeMs(a.waits)
	if writer {
		x.WriterTurns = len(a.wwaits)
		x.WriterP50, x.WriterP99, x.WriterMax = summarizeMs(a.wwaits)
	}
	return x
}

// rwTarget is one variant's pool and lockers, kept for all its segments.
type rwTarget struct {
	db           *sql.DB
	shared, excl syncguard.LockBackend
	floor        *sql.DB
	closeFns     []func()
}

func (t *rwTarget) close() {
	for i := len(t.closeFns) - 1; i >= 0; i-- {
		t.closeFns[i]()
	}
}

// openRWTarget opens variant's pool (Readers+3 connections: the readers,
// the writer and a LISTEN connection), warmed, and its locker.
func (w *WaitEnv) openRWTarget(ctx context.Context, p RWParams, variant string, rwCfg, mxCfg *syncguard.Config) (*rwTarget, error) {
	t := &rwTarget{}
	if variant == RWVarIdeal {
		return t, nil
	}
	db, err := sql.Open(w.SQLDriver, w.DSN)
	if err != nil {
		return nil, err
	}
	t.db = db
	t.closeFns = append(t.closeFns, func() { db.Close() })
	db.SetMaxOpenConns(p.Readers + 3)
	db.SetMaxIdleConns(p.Readers + 3)
	quiet := slog.New(slog.DiscardHandler)
	switch variant {
	case RWVarFloor:
		t.floor = db
	case RWVarMutex:
		c := *mxCfg
		c.Logger = quiet
		b, err := syncguard.New(db, &c)
		if err != nil {
			t.close()
			return nil, err
		}
		t.closeFns = append(t.closeFns, func() { b.Close() })
		t.shared = b
	default:
		c := *rwCfg
		c.Logger = quiet
		if variant == RWVarPolling {
			c.Dialect = noListen{fwdDialect{w.Dialect}}
		}
		rw, err := rwlock.New(db, &c)
		if err != nil {
			t.close()
			return nil, err
		}
		t.closeFns = append(t.closeFns, func() { rw.Close() })
		t.shared, t.excl = rw.Shared(), rw.Exclusive()
	}
	if err := warmPool(ctx, db, p.Readers+3); err != nil {
		t.close()
		return nil, err
	}
	return t, nil
}

// rwSegment runs one variant for d.
func rwSegment(ctx context.Context, p RWParams, t *rwTarget, writer bool, d time.Duration, acc *rwAcc) error {
	shared, excl, floor := t.shared, t.excl, t.floor
	const key = "k-rw"
	opts := &syncguard.LockOptions{TTL: 30 * time.Second, Acquisition: syncguard.AcquisitionOptions{Timeout: 30 * time.Second}}
	var (
		cur, peak atomic.Int64
		writing   atomic.Bool
		overlaps  atomic.Int64
		wg        sync.WaitGroup
		mu        sync.Mutex
		waits     []time.Duration
		wwaits    []time.Duration
		holdings  int
	)
	floorIns := `INSERT INTO ` + rules.QuoteIdent(rwTable+"_floor") + ` (id) VALUES ($1)`
	floorDel := `DELETE FROM ` + rules.QuoteIdent(rwTable+"_floor") + ` WHERE id = $1`
	start := time.Now()
	end := start.Add(d)
	for range p.Readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil && time.Now().Before(end) {
				asked := time.Now()
				var l *syncguard.Lease
				id := rules.GenerateLockID()
				if floor != nil {
					if _, err := floor.ExecContext(ctx, floorIns, id); err != nil {
						acc.fail(err)
						continue
					}
				}
				if shared != nil {
					var err error
					if l, err = syncguard.Lock(ctx, shared, key, opts); err != nil {
						acc.fail(err)
						time.Sleep(10 * time.Millisecond)
						continue
					}
				}
				admitted := time.Now()
				n := cur.Add(1)
				for m := peak.Load(); n > m && !peak.CompareAndSwap(m, n); m = peak.Load() {
				}
				if writing.Load() {
					overlaps.Add(1)
				}
				time.Sleep(p.HoldMin + rand.N(p.HoldMax-p.HoldMin+1))
				cur.Add(-1)
				if l != nil {
					if _, err := l.Release(context.WithoutCancel(ctx)); err != nil {
						acc.fail(err)
					}
				}
				if floor != nil {
					if _, err := floor.ExecContext(context.WithoutCancel(ctx), floorDel, id); err != nil {
						acc.fail(err)
					}
				}
				if admitted.Before(end) {
					mu.Lock()
					waits = append(waits, admitted.Sub(asked))
					holdings++
					mu.Unlock()
				}
			}
		}()
	}
	if writer && excl != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil && time.Now().Before(end) {
				asked := time.Now()
				l, err := syncguard.Lock(ctx, excl, key, opts)
				if err != nil {
					acc.fail(err)
					time.Sleep(10 * time.Millisecond)
					continue
				}
				admitted := time.Now()
				writing.Store(true)
				if cur.Load() > 0 {
					overlaps.Add(1)
				}
				time.Sleep(p.WriterHold)
				writing.Store(false)
				if _, err := l.Release(context.WithoutCancel(ctx)); err != nil {
					acc.fail(err)
				}
				if admitted.Before(end) {
					mu.Lock()
					wwaits = append(wwaits, admitted.Sub(asked))
					mu.Unlock()
				}
				time.Sleep(p.WriterEvery)
			}
		}()
	}
	wg.Wait()
	acc.mu.Lock()
	defer acc.mu.Unlock()
	acc.seconds += d.Seconds()
	acc.peak = max(acc.peak, int(peak.Load()))
	acc.holdings += holdings
	acc.waits = append(acc.waits, waits...)
	acc.wwaits = append(acc.wwaits, wwaits...)
	acc.overlaps += overlaps.Load()
	return ctx.Err()
}

// warmPool opens n connections of db (a cold pool's first statements would
// count as waits).
func warmPool(ctx context.Context, db *sql.DB, n int) error {
	conns := make([]*sql.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range n {
		c, err := db.Conn(ctx)
		if err != nil {
			return err
		}
		if err := c.PingContext(ctx); err != nil {
			c.Close()
			return err
		}
		conns = append(conns, c)
	}
	return nil
}
