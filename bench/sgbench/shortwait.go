package sgbench

import (
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/stdlib"
	"github.com/lib/pq"

	"github.com/syncguard/syncguard-go/driver"
	"github.com/syncguard/syncguard-go/pgxstd"
	sgpq "github.com/syncguard/syncguard-go/pq"
	"github.com/syncguard/syncguard-go/syncguard"
)

// Workload w44 (issue 44, short waits on the pools users open): Lock with
// a Timeout of 1-31 ms on one key through a pool of 3 connections, opened
// each of the four ways the docs show. An attempt still running when the
// wait ends finishes in the background and is undone, so a cut statement
// must not cost the pool its connection (pgx's stdlib closes a connection
// whose statement the context cuts), and waiters that give up within
// milliseconds must not starve the key.

// ShortWaitRow is one pool kind's figures.
type ShortWaitRow struct {
	Pool            string  `json:"pool"`
	SoloHoldings    int     `json:"solo_holdings"`
	SoloGaveUp      int     `json:"solo_gave_up"`
	SoloOpened      int64   `json:"solo_conns_opened"`
	Holdings        int     `json:"holdings"` // six workers
	GaveUp          int     `json:"gave_up"`
	Ratio           float64 `json:"ratio_to_solo"`
	LongestGapMs    float64 `json:"longest_gap_ms"`
	LongestGapWhere string  `json:"longest_gap_where"`
	LongestBetween  float64 `json:"longest_between_holdings_ms"`
	Opened          int64   `json:"conns_opened"`
	PoolWaits       int64   `json:"pool_waits"`        // six workers: statements that waited for a connection
	PoolWaitMs      float64 `json:"pool_wait_mean_ms"` // their mean wait
	WaiterRowsMax   int     `json:"waiter_rows_max"`   // the key's queue rows, sampled every 100 ms
	DeadRowsMax     int     `json:"dead_waiter_rows_max"`
	Errors          int     `json:"errors"`
	FirstError      string  `json:"first_error,omitempty"`
}

// ShortWaitResult is workload w44's result: one JSON line per driver.
type ShortWaitResult = TableResult[ShortWaitRow]

func (ShortWaitRow) layout() (string, []string, string) {
	return "w44 short waits: Lock with a 1-31 ms Timeout on one key, pool of 3",
		[]string{"pool", "alone: holdings", "given up", "conns opened", "six: holdings", "given up", "six/alone",
			"longest gap ms", "where", "longest between holdings ms", "conns opened", "pool waits (mean ms)", "queue rows max (past deadline)", "errors"}, "lrrrrrrrlrrrrr"
}

func (x ShortWaitRow) cells() []string {
	return []string{x.Pool, fmt.Sprint(x.SoloHoldings), fmt.Sprint(x.SoloGaveUp), fmt.Sprint(x.SoloOpened),
		fmt.Sprint(x.Holdings), fmt.Sprint(x.GaveUp), fmt.Sprintf("%.2f", x.Ratio), fmt.Sprintf("%.0f", x.LongestGapMs),
		x.LongestGapWhere, fmt.Sprintf("%.0f", x.LongestBetween), fmt.Sprint(x.Opened),
		fmt.Sprintf("%d (%.0f)", x.PoolWaits, x.PoolWaitMs), fmt.Sprintf("%d (%d)", x.WaiterRowsMax, x.DeadRowsMax), fmt.Sprint(x.Errors)}
}

// w44's shape.
const (
	swPool    = 3
	swWorkers = 6
	swTable   = "sgbench_w44_locks"
	swFences  = "sgbench_w44_fences"
)

// countingDriver wraps a database/sql driver, counting the connections it
// opens.
type countingDriver struct {
	sqldriver.Driver
	opened *atomic.Int64
}

func (d countingDriver) Open(name string) (sqldriver.Conn, error) {
	d.opened.Add(1)
	return d.Driver.Open(name)
}

// countingConnector's Driver is the wrapped connector's, so syncguard.New
// finds the adapter's dialect as for sql.OpenDB(connector).
type countingConnector struct {
	sqldriver.Connector
	opened *atomic.Int64
}

func (c countingConnector) Connect(ctx context.Context) (sqldriver.Conn, error) {
	c.opened.Add(1)
	return c.Connector.Connect(ctx)
}

var (
	swRegister                sync.Once
	swRegisterErr             error
	swOpenedPGX, swOpenedPQ   atomic.Int64
	swDialectPGX, swDialectPQ driver.Dialect
)

const swDriverPGX, swDriverPQ = "sgbench-w44-pgx", "sgbench-w44-postgres"

// swKind is a way to open the pool: open returns it, its counter of
// connections opened and the Config.Dialect it needs (nil: found by
// syncguard.New, as for the unwrapped pool).
type swKind struct {
	name string
	open func(dsn string) (*sql.DB, *atomic.Int64, driver.Dialect, error)
}

func swKinds(drv string) ([]swKind, error) {
	swRegister.Do(func() {
		var ok1, ok2 bool
		swDialectPGX, ok1 = driver.Lookup(stdlib.GetDefaultDriver())
		swDialectPQ, ok2 = driver.Lookup(&pq.Driver{})
		if !ok1 || !ok2 {
			swRegisterErr = errors.New("w44: no syncguard dialect registered for pgx's or lib/pq's driver")
			return
		}
		// The wrapped drivers are other types: Config.Dialect names the
		// dialect syncguard.New would find for the unwrapped one.
		sql.Register(swDriverPGX, countingDriver{stdlib.GetDefaultDriver(), &swOpenedPGX})
		sql.Register(swDriverPQ, countingDriver{&pq.Driver{}, &swOpenedPQ})
	})
	if swRegisterErr != nil {
		return nil, swRegisterErr
	}
	byName := func(name string, n *atomic.Int64, d *driver.Dialect) func(string) (*sql.DB, *atomic.Int64, driver.Dialect, error) {
		return func(dsn string) (*sql.DB, *atomic.Int64, driver.Dialect, error) {
			db, err := sql.Open(name, dsn)
			return db, n, *d, err
		}
	}
	connector := func(newc func(string) (sqldriver.Connector, error)) func(string) (*sql.DB, *atomic.Int64, driver.Dialect, error) {
		return func(dsn string) (*sql.DB, *atomic.Int64, driver.Dialect, error) {
			c, err := newc(dsn)
			if err != nil {
				return nil, nil, nil, err
			}
			n := new(atomic.Int64)
			return sql.OpenDB(countingConnector{c, n}), n, nil, nil
		}
	}
	switch drv {
	case "pgx":
		return []swKind{
			{`sql.Open("pgx")`, byName(swDriverPGX, &swOpenedPGX, &swDialectPGX)},
			{"sql.OpenDB(pgxstd.NewConnector)", connector(pgxstd.NewConnector)},
		}, nil
	case "pq":
		return []swKind{
			{`sql.Open("postgres")`, byName(swDriverPQ, &swOpenedPQ, &swDialectPQ)},
			{"sql.OpenDB(sgpq.NewConnector)", connector(func(dsn string) (sqldriver.Connector, error) { return sgpq.NewConnector(dsn) })},
		}, nil
	}
	return nil, fmt.Errorf("w44: unknown driver %q", drv)
}

// swHolding is one holding on the client's clock: Lock returned at acq,
// Release was called at rel.
type swHolding struct{ acq, rel time.Time }

// swPhase is one phase's outcome.
type swPhase struct {
	holdings   []swHolding
	poolWaits  int64
	poolWaitMs float64
	rows, dead int // the key's waiter rows at most, and of them past their deadline
	gaveUp     int
	errors     int
	firstError string
	opened     int64
	start, end time.Time
}

// ShortWaits runs w44 for drv's two pool kinds: for each, one worker alone
// for d, then six workers on one key for d, each on a fresh pool of 3 and
// Backend, looping Lock (Timeout 1-31 ms, TTL 10 s), a 1 ms hold, Release.
func ShortWaits(ctx context.Context, drv, dsn string, d time.Duration) (*ShortWaitResult, error) {
	kinds, err := swKinds(drv)
	if err != nil {
		return nil, err
	}
	admin, err := sql.Open(sqlDriverOf(drv), dsn)
	if err != nil {
		return nil, err
	}
	defer admin.Close()
	tables := []string{swTable, swFences, swTable + "_waiters", swTable + "_holders"}
	if err := DropTables(ctx, admin, tables...); err != nil {
		return nil, err
	}
	defer DropTables(context.WithoutCancel(ctx), admin, tables...) //nolint:errcheck
	if err := syncguard.SetupSchema(ctx, admin, &syncguard.Config{TableName: swTable, FenceTableName: swFences}); err != nil {
		return nil, err
	}
	r := &ShortWaitResult{Bench: "syncguard", Driver: drv, Workload: "w44_short_waits",
		Method: fmt.Sprintf("per pool kind: a fresh pool of %d (SetMaxOpenConns/SetMaxIdleConns) and Backend for each phase; "+
			"one worker alone on a free key for %v, then %d workers on one key for %v; each loops Lock (Timeout random 1-31 ms, TTL 10 s), "+
			"1 ms hold, Release; a gap runs from a Release call to the next Lock's return (client clock; also start to first, last to end); "+
			"conns opened: the pool's driver Open / connector Connect calls during the phase", swPool, d, swWorkers, d)}
	run := time.Now().UnixNano()
	for i, k := range kinds {
		solo, err := swRun(ctx, admin, k, dsn, fmt.Sprintf("w44:%d:%d:alone", run, i), 1, d)
		if err != nil {
			return nil, fmt.Errorf("%s alone: %w", k.name, err)
		}
		six, err := swRun(ctx, admin, k, dsn, fmt.Sprintf("w44:%d:%d:six", run, i), swWorkers, d)
		if err != nil {
			return nil, fmt.Errorf("%s, %d workers: %w", k.name, swWorkers, err)
		}
		gap, where, between := longestGap(six)
		row := ShortWaitRow{Pool: k.name, SoloHoldings: len(solo.holdings), SoloGaveUp: solo.gaveUp, SoloOpened: solo.opened,
			Holdings: len(six.holdings), GaveUp: six.gaveUp, LongestGapMs: float64(gap) / 1e6, LongestGapWhere: where,
			LongestBetween: float64(between) / 1e6,
			Opened:         six.opened, PoolWaits: six.poolWaits, PoolWaitMs: six.poolWaitMs, WaiterRowsMax: six.rows, DeadRowsMax: six.dead, Errors: solo.errors + six.errors, FirstError: firstOf(solo.firstError, six.firstError)}
		if row.SoloHoldings > 0 {
			row.Ratio = float64(row.Holdings) / float64(row.SoloHoldings)
		}
		r.Rows = append(r.Rows, row)
		clean := row.Errors == 0
		r.Targets = append(r.Targets,
			Target{Name: fmt.Sprintf("w44 %s: six workers' holdings / one alone's", k.name), Value: row.Ratio, Goal: ">= 0.3", Met: row.Ratio >= 0.3 && clean},
			Target{Name: fmt.Sprintf("w44 %s: longest time without a holder, s", k.name), Value: row.LongestGapMs / 1e3, Goal: "<= 1.5", Met: row.LongestGapMs <= 1500 && clean},
			Target{Name: fmt.Sprintf("w44 %s: connections opened by six workers, pool of %d", k.name, swPool), Value: float64(row.Opened),
				Goal: fmt.Sprintf("<= %d", 2*swPool), Met: row.Opened <= 2*swPool && clean})
	}
	return r, nil
}

func sqlDriverOf(drv string) string {
	if drv == "pq" {
		return "postgres"
	}
	return "pgx"
}

func firstOf(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// swRun runs one phase: workers loop on key for d through a fresh pool of
// kind k.
func swRun(ctx context.Context, admin *sql.DB, k swKind, dsn, key string, workers int, d time.Duration) (*swPhase, error) {
	db, opened, dialect, err := k.open(dsn)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	db.SetMaxOpenConns(swPool)
	db.SetMaxIdleConns(swPool)
	locks, err := syncguard.New(db, &syncguard.Config{TableName: swTable, FenceTableName: swFences, Dialect: dialect})
	if err != nil {
		return nil, err
	}
	defer locks.Close()
	var mu sync.Mutex
	p := &swPhase{}
	before := opened.Load()
	p.start = time.Now()
	deadline := p.start.Add(d)
	var wg sync.WaitGroup
	sampled := make(chan struct{})
	go func() { // the queue, through admin (not the measured pool)
		defer close(sampled)
		for time.Now().Before(deadline) && ctx.Err() == nil {
			time.Sleep(100 * time.Millisecond)
			var n, dead int
			if admin.QueryRowContext(ctx, `SELECT count(*), count(*) FILTER (WHERE "deadline_ms" < (extract(epoch FROM clock_timestamp()) * 1000)::bigint) FROM "`+
				swTable+`_waiters" WHERE "user_key" = $1`, key).Scan(&n, &dead) == nil {
				p.rows, p.dead = max(p.rows, n), max(p.dead, dead)
			}
		}
	}()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var hs []swHolding
			gaveUp, errs, first := 0, 0, ""
			fail := func(err error) {
				if errs++; first == "" {
					first = err.Error()
				}
			}
			for time.Now().Before(deadline) && ctx.Err() == nil {
				timeout := time.Duration(1+rand.IntN(31)) * time.Millisecond
				lease, err := syncguard.Lock(ctx, locks, key, &syncguard.LockOptions{TTL: 10 * time.Second,
					Acquisition: syncguard.AcquisitionOptions{Timeout: timeout}})
				if err != nil {
					if errors.Is(err, syncguard.ErrAcquisitionTimeout) || errors.Is(err, syncguard.ErrNetworkTimeout) {
						gaveUp++
					} else {
						fail(err)
					}
					continue
				}
				h := swHolding{acq: time.Now()}
				time.Sleep(time.Millisecond)
				h.rel = time.Now()
				if _, err := lease.Release(ctx); err != nil {
					fail(err)
				}
				hs = append(hs, h)
			}
			mu.Lock()
			defer mu.Unlock()
			p.holdings = append(p.holdings, hs...)
			p.gaveUp += gaveUp
			p.errors += errs
			if p.firstError == "" {
				p.firstError = first
			}
		}()
	}
	wg.Wait()
	<-sampled
	st := db.Stats()
	p.poolWaits = st.WaitCount
	if st.WaitCount > 0 {
		p.poolWaitMs = float64(st.WaitDuration) / 1e6 / float64(st.WaitCount)
	}
	p.end = deadline
	p.opened = opened.Load() - before
	return p, ctx.Err()
}

// longestGap returns the longest time p's key went without a holder on
// the client's clock, and where it was: from the start to the first
// holding, between holdings (a Release call to the next Lock's return), or
// from the last to the end), and the longest between holdings alone.
func longestGap(p *swPhase) (longest time.Duration, where string, between time.Duration) {
	hs := slices.Clone(p.holdings)
	slices.SortFunc(hs, func(a, b swHolding) int { return a.acq.Compare(b.acq) })
	if len(hs) == 0 {
		return p.end.Sub(p.start), "no holding", 0
	}
	longest, where = hs[0].acq.Sub(p.start), "start to first"
	free := hs[0].rel
	for _, h := range hs[1:] {
		g := h.acq.Sub(free)
		between = max(between, g)
		if g > longest {
			longest, where = g, "between holdings"
		}
		if h.rel.After(free) {
			free = h.rel
		}
	}
	if g := p.end.Sub(free); g > longest {
		longest, where = g, "last to end"
	}
	return longest, where, between
}
