package sgbench

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/syncguard/syncguard-go/driver"
	"github.com/syncguard/syncguard-go/semaphore"
	"github.com/syncguard/syncguard-go/syncguard"
)

// ---------------------------------------------------------------- k-sem

// SemUtilParams sizes k-sem: Workers loop Lock / hold (uniform in
// [0, HoldMax]) / release on one key of a semaphore of Permits permits.
type SemUtilParams struct {
	Permits, Workers int
	HoldMax          time.Duration
	Duration         time.Duration // measured per variant, over Rounds interleaved segments
	Rounds           int
	Warm             time.Duration // per segment, not measured
}

// DefaultSemUtil is the user's report: 3 permits, 10 workers, holds 0-20 ms.
var DefaultSemUtil = SemUtilParams{Permits: 3, Workers: 10, HoldMax: 20 * time.Millisecond, Duration: 10 * time.Second, Rounds: 5,
	Warm: 300 * time.Millisecond}

// SemUtilRow is one variant of k-sem.
type SemUtilRow struct {
	Variant      string  `json:"variant"`
	Holdings     int     `json:"holdings"`
	Seconds      float64 `json:"seconds"`
	HoldingsPerS float64 `json:"holdings_per_s"`
	MeanHoldMs   float64 `json:"mean_hold_ms"`
	Utilization  float64 `json:"utilization"` // holdings x mean hold / permits / time
	Ratio        float64 `json:"utilization_ratio_ideal"`
	WaitP50Ms    float64 `json:"wait_p50_ms"` // Lock's call to its return
	WaitP99Ms    float64 `json:"wait_p99_ms"`
	GapMeanMs    float64 `json:"slot_gap_mean_ms"`  // a slot's hold end to its next hold start (the release, the hand-off, the waiter's attempt)
	WakeMeanMs   float64 `json:"wake_mean_ms"`      // a slot's release call's return to its next hold start (the waiter's wake-up and attempt)
	ReleaseP50Ms float64 `json:"release_p50_ms"`    // the release call
	Attempts     float64 `json:"attempts_per_lock"` // acquire statements per Lock
	PeakHolders  int     `json:"peak_holders"`      // as the workers saw it: at most Permits
	Errors       int     `json:"errors"`
	FirstError   string  `json:"first_error,omitempty"`
}

// SemUtilResult is k-sem's result: one JSON line.
type SemUtilResult = TableResult[SemUtilRow]

func (SemUtilRow) layout() (string, []string, string) {
	return "k-sem: permit utilization of a semaphore (holdings x mean hold / N / time)",
		[]string{"variant", "holdings", "holdings/s", "mean hold ms", "utilization", "x ideal", "wait p50 / p99 ms",
			"slot gap ms", "release p50 ms", "release to next hold ms", "attempts/Lock", "peak holders", "errors"}, "l"
}

func (x SemUtilRow) cells() []string {
	return []string{x.Variant, fmt.Sprint(x.Holdings), fmt.Sprintf("%.0f", x.HoldingsPerS), fmt.Sprintf("%.2f", x.MeanHoldMs),
		fmt.Sprintf("%.3f", x.Utilization), fmt.Sprintf("%.2f", x.Ratio), fmt.Sprintf("%.1f / %.1f", x.WaitP50Ms, x.WaitP99Ms),
		fmt.Sprintf("%.2f", x.GapMeanMs), fmt.Sprintf("%.2f", x.ReleaseP50Ms), fmt.Sprintf("%.2f", x.WakeMeanMs), fmt.Sprintf("%.2f", x.Attempts),
		fmt.Sprint(x.PeakHolders), fmt.Sprint(x.Errors)}
}

// semHolder is one variant's permits: lock returns the slot and a
// release function.
type semHolder interface {
	lock(ctx context.Context, attempts *atomic.Int64) (slot int, release func() error, err error)
}

// chanSem is the capacity ideal: N permits as N tokens of a buffered
// channel, in this process.
type chanSem struct{ tokens chan int }

func newChanSem(n int) *chanSem {
	c := &chanSem{tokens: make(chan int, n)}
	for i := range n {
		c.tokens <- i + 1
	}
	return c
}

func (c *chanSem) lock(ctx context.Context, _ *atomic.Int64) (int, func() error, error) {
	select {
	case s := <-c.tokens:
		return s, func() error { c.tokens <- s; return nil }, nil
	case <-ctx.Done():
		return 0, nil, ctx.Err()
	}
}

// floorSem is the durable floor: N tokens of a buffered channel whose
// every release is first one durable commit (an UPDATE of its slot's fence
// row, one round trip): what any semaphore with a durable fence per
// hand-off pays at least, on this server.
type floorSem struct {
	chanSem
	db    *sql.DB
	table string
}

func (f *floorSem) lock(ctx context.Context, a *atomic.Int64) (int, func() error, error) {
	slot, release, err := f.chanSem.lock(ctx, a)
	if err != nil {
		return 0, nil, err
	}
	return slot, func() error {
		_, err := f.db.ExecContext(context.WithoutCancel(ctx), `UPDATE "`+f.table+`" SET "fence" = "fence" + 1 WHERE "slot" = $1`, slot)
		_ = release()
		return err
	}, nil
}

// pgSem is a semaphore.Semaphore on one key.
type pgSem struct {
	s   *semaphore.Semaphore
	key string
}

func (p *pgSem) lock(ctx context.Context, attempts *atomic.Int64) (int, func() error, error) {
	opts := &syncguard.LockOptions{TTL: 30 * time.Second, Acquisition: syncguard.AcquisitionOptions{Timeout: -1},
		OnAttempt: func(syncguard.AcquireResult, error) { attempts.Add(1) }}
	pm, err := p.s.Lock(ctx, p.key, opts)
	if err != nil {
		return 0, nil, err
	}
	return pm.Slot, func() error {
		r, err := pm.Release(context.WithoutCancel(ctx))
		if err == nil && !r.OK {
			err = fmt.Errorf("release: %s", r.Reason)
		}
		return err
	}, nil
}

// semStats accumulates one variant's measured holdings.
type semStats struct {
	mu                sync.Mutex
	holdings          int
	hold, gap, wake   time.Duration
	gaps, wakes       int
	waits, releases   []time.Duration
	seconds           float64
	locks             int64
	attempts          atomic.Int64
	peak              int
	errors            int
	firstErr          string
	lastEnd, lastRel  map[int]time.Time // per slot: the last hold's end, its release's return, this segment
	measureFrom, upTo time.Time
}

func (st *semStats) fail(err error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.errors++
	if st.firstErr == "" {
		st.firstErr = err.Error()
	}
}

// segment runs p.Workers workers on h for warm + d and records the
// holdings that start within the measured window.
func (st *semStats) segment(ctx context.Context, h semHolder, p SemUtilParams, warm, d time.Duration) {
	start := time.Now()
	st.mu.Lock()
	st.measureFrom, st.upTo = start.Add(warm), start.Add(warm+d)
	st.lastEnd, st.lastRel = map[int]time.Time{}, map[int]time.Time{}
	st.mu.Unlock()
	var live atomic.Int64
	var wg sync.WaitGroup
	for w := range p.Workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(start.UnixNano()), uint64(w)))
			for time.Now().Before(st.upTo) && ctx.Err() == nil {
				t0 := time.Now()
				slot, release, err := h.lock(ctx, &st.attempts)
				if err != nil {
					st.fail(err)
					time.Sleep(10 * time.Millisecond)
					continue
				}
				got := time.Now()
				n := live.Add(1)
				time.Sleep(time.Duration(rng.Int64N(int64(p.HoldMax) + 1)))
				end := time.Now()
				live.Add(-1)
				r0 := time.Now()
				rerr := release()
				rel := time.Since(r0)
				if rerr != nil {
					st.fail(rerr)
				}
				st.mu.Lock()
				st.peak = max(st.peak, int(n))
				// a holding counts when it starts in the window; its hold
				// is cut at the window's end (utilization within it)
				if !got.Before(st.measureFrom) && got.Before(st.upTo) {
					st.holdings++
					st.hold += earliest(end, st.upTo).Sub(got)
					st.waits = append(st.waits, got.Sub(t0))
					st.releases = append(st.releases, rel)
					st.locks++
					if prev, ok := st.lastEnd[slot]; ok && prev.Before(got) {
						st.gap += got.Sub(prev)
						st.gaps++
					}
					if prev, ok := st.lastRel[slot]; ok && prev.Before(got) {
						st.wake += got.Sub(prev)
						st.wakes++
					}
				} else if got.Before(st.measureFrom) && end.After(st.measureFrom) {
					st.hold += earliest(end, st.upTo).Sub(st.measureFrom) // a hold across the window's start
				}
				st.lastEnd[slot], st.lastRel[slot] = end, r0.Add(rel)
				st.mu.Unlock()
			}
		})
	}
	wg.Wait()
	st.seconds += d.Seconds()
}

func (st *semStats) row(name string, permits int) SemUtilRow {
	r := SemUtilRow{Variant: name, Holdings: st.holdings, Seconds: st.seconds, PeakHolders: st.peak, Errors: st.errors, FirstError: st.firstErr}
	if st.seconds > 0 {
		r.HoldingsPerS = float64(st.holdings) / st.seconds
		r.Utilization = st.hold.Seconds() / float64(permits) / st.seconds
	}
	if st.holdings > 0 {
		r.MeanHoldMs = msf(st.hold) / float64(st.holdings)
	}
	if st.gaps > 0 {
		r.GapMeanMs = msf(st.gap) / float64(st.gaps)
	}
	if st.wakes > 0 {
		r.WakeMeanMs = msf(st.wake) / float64(st.wakes)
	}
	slices.Sort(st.waits)
	slices.Sort(st.releases)
	r.WaitP50Ms, r.WaitP99Ms = msf(Percentile(st.waits, 0.5)), msf(Percentile(st.waits, 0.99))
	r.ReleaseP50Ms = msf(Percentile(st.releases, 0.5))
	if st.locks > 0 {
		r.Attempts = float64(st.attempts.Load()) / float64(st.locks)
	}
	return r
}

// SemaphoreUtil runs k-sem on one adapter: the semaphore (its tables
// semaphore.SetupSchema makes under a table name of its own) and the
// capacity ideal, interleaved in p.Rounds segments each. dialect is the
// adapter's (for lib/pq the ListenDialect, so waiters are notified).
func SemaphoreUtil(ctx context.Context, driverName, sqlName, dsn string, dialect driver.Dialect, p SemUtilParams) (*SemUtilResult, error) {
	db, err := sql.Open(sqlName, dsn)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	db.SetMaxOpenConns(p.Workers)
	db.SetMaxIdleConns(p.Workers)
	cfg := &syncguard.Config{TableName: "sgbench_ksem", Dialect: dialect}
	if err := semaphore.SetupSchema(ctx, db, cfg); err != nil {
		return nil, err
	}
	defer func() {
		a, b, c := semaphore.Tables(cfg.TableName)
		for _, t := range []string{a, b, c} {
			_, _ = db.ExecContext(context.WithoutCancel(ctx), `DROP TABLE IF EXISTS "`+t+`"`)
		}
	}()
	s, err := semaphore.New(db, cfg, p.Permits)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	floorTable := "sgbench_ksem_floor"
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS "`+floorTable+`" ("slot" INTEGER PRIMARY KEY, "fence" BIGINT NOT NULL)`); err != nil {
		return nil, err
	}
	defer db.ExecContext(context.WithoutCancel(ctx), `DROP TABLE IF EXISTS "`+floorTable+`"`) //nolint:errcheck
	if _, err := db.ExecContext(ctx, `INSERT INTO "`+floorTable+`" SELECT g, 0 FROM generate_series(1, $1::integer) AS g ON CONFLICT DO NOTHING`, p.Permits); err != nil {
		return nil, err
	}
	floor := &floorSem{chanSem: *newChanSem(p.Permits), db: db, table: floorTable}
	pg := &pgSem{s: s, key: fmt.Sprintf("ksem-%d", time.Now().UnixNano())}
	ideal := newChanSem(p.Permits)
	var pgSt, idealSt, floorSt semStats
	seg := p.Duration / time.Duration(max(p.Rounds, 1))
	for range max(p.Rounds, 1) {
		idealSt.segment(ctx, ideal, p, p.Warm, seg)
		floorSt.segment(ctx, floor, p, p.Warm, seg)
		pgSt.segment(ctx, pg, p, p.Warm, seg)
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
	ir := idealSt.row("ideal: N tokens of a buffered channel", p.Permits)
	ir.Attempts = 0
	sr := pgSt.row(fmt.Sprintf("semaphore (%s, notified: %v)", driverName, s.NotificationStatus(ctx).Active), p.Permits)
	fr := floorSt.row("durable floor: the ideal + one durable UPDATE per release", p.Permits)
	fr.Attempts = 0
	ir.Ratio = 1
	if ir.Utilization > 0 {
		sr.Ratio = sr.Utilization / ir.Utilization
		fr.Ratio = fr.Utilization / ir.Utilization
	}
	res := &SemUtilResult{Bench: "syncguard", Driver: driverName, Workload: "k-sem",
		Method: fmt.Sprintf("%d workers loop Lock (TTL 30 s, no timeout) / hold uniform 0-%v / Release on one key of a semaphore of %d, pool of %d; "+
			"the ideal's and the semaphore's segments interleaved, %d rounds of %v each after %v warm-up; utilization = sum of holds / N / time; "+
			"slot gap = a slot's hold end to its next hold's start (release, hand-off, the waiter's attempt)",
			p.Workers, p.HoldMax, p.Permits, p.Workers, p.Rounds, seg, p.Warm),
		Rows: []SemUtilRow{ir, fr, sr}}
	res.Targets = append(res.Targets,
		Target{Name: "k-sem: semaphore permit utilization", Value: sr.Utilization, Goal: ">= 0.8", Met: sr.Utilization >= 0.8},
		Target{Name: "k-sem: semaphore utilization / durable floor's", Value: ratio(sr.Utilization, fr.Utilization), Goal: ">= 0.8", Met: ratio(sr.Utilization, fr.Utilization) >= 0.8},
		Target{Name: "k-sem: peak holders <= N", Value: float64(sr.PeakHolders), Goal: fmt.Sprintf("<= %d", p.Permits), Met: sr.PeakHolders <= p.Permits})
	return res, nil
}

func earliest(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
