package sgbench

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/syncguard/syncguard-go/multilock"
	"github.com/syncguard/syncguard-go/syncguard"
)

// Workload k-set: the multi-key lock (package multilock) against the
// core's mutex, in one run, each worker a process of its own (a pool and
// a locker of its own), looping Lock, hold, release with no pause:
//
//	crossing  workers take random sets of 1 to 3 of 3 keys (holds 0-5 ms):
//	          multilock against ONE global mutex key (the lock such a
//	          program would otherwise take)
//	disjoint  each worker its own set of 2 keys: multilock against
//	          independent mutexes (each worker its own key)
//
// The four variants run interleaved in rounds. Measured: holdings/s and
// the wait (from calling Lock to holding), successful calls only.

// KSet variants.
const (
	KSetMLCross    = "multilock, crossing sets of 1-3 of 3 keys"
	KSetMutexCross = "one global mutex (same workers, same holds)"
	KSetMLDisj     = "multilock, disjoint sets (2 keys per worker)"
	KSetMutexDisj  = "independent mutexes (a key per worker)"
)

// KSetTables are the tables of the workload (dropped and created again).
const (
	KSetTable      = "sgbench_kset"
	KSetFenceTable = "sgbench_kset_fences"
)

// KSetParams sizes the workload.
type KSetParams struct {
	Workers  int
	Duration time.Duration // per variant, split into Rounds interleaved segments
	Rounds   int
	MaxHold  time.Duration // holds are uniform in [0, MaxHold]
}

type ksetProc struct {
	db *sql.DB
	ml *multilock.Locker
	mx *syncguard.Backend
}

func (p *ksetProc) close() {
	if p.ml != nil {
		p.ml.Close()
	}
	if p.mx != nil {
		p.mx.Close()
	}
	p.db.Close()
}

type ksetAcc struct {
	mu       sync.Mutex
	waits    []time.Duration
	timeouts int
	errs     int
	firstErr error
	wall     time.Duration
}

// KSet runs the workload.
func (w *WaitEnv) KSet(ctx context.Context, p KSetParams) (*WaitResult, error) {
	setup, err := sql.Open(w.SQLDriver, w.DSN)
	if err != nil {
		return nil, err
	}
	defer setup.Close()
	ml, err := multilock.TablesOf(&syncguard.Config{TableName: KSetTable})
	if err != nil {
		return nil, err
	}
	drop := func(c context.Context) error {
		return DropTables(c, setup, ml.Locks, ml.Fences, ml.Waiters, KSetTable, KSetFenceTable)
	}
	if err := drop(ctx); err != nil {
		return nil, err
	}
	defer drop(context.WithoutCancel(ctx)) //nolint:errcheck
	cfg := &syncguard.Config{TableName: KSetTable, FenceTableName: KSetFenceTable, Dialect: w.Dialect,
		Logger: slog.New(slog.DiscardHandler), DisablePrepare: w.Via != ""}
	if err := syncguard.SetupSchema(ctx, setup, cfg); err != nil {
		return nil, err
	}
	if err := multilock.SetupSchema(ctx, setup, cfg); err != nil {
		return nil, err
	}
	procs := make([]*ksetProc, p.Workers)
	defer func() {
		for _, pr := range procs {
			if pr != nil {
				pr.close()
			}
		}
	}()
	for i := range procs {
		db, err := sql.Open(w.SQLDriver, w.DSN)
		if err != nil {
			return nil, err
		}
		db.SetMaxOpenConns(2)
		db.SetMaxIdleConns(2)
		pr := &ksetProc{db: db}
		procs[i] = pr
		if pr.ml, err = multilock.New(db, cfg); err != nil {
			return nil, err
		}
		if pr.mx, err = syncguard.New(db, cfg); err != nil {
			return nil, err
		}
	}
	opts := &syncguard.LockOptions{TTL: 30 * time.Second, Acquisition: syncguard.AcquisitionOptions{Timeout: 30 * time.Second}}
	// one holding of variant v by worker i; key names the round (fresh keys).
	hold := func(sctx context.Context, v string, i int, rng *rand.Rand, tag string) (time.Duration, error) {
		pr := procs[i]
		h := time.Duration(rng.Int64N(int64(p.MaxHold) + 1))
		var t1 time.Time
		t0 := time.Now()
		switch v {
		case KSetMLCross, KSetMLDisj:
			var keys []string
			if v == KSetMLCross {
				all := []string{"a", "b", "c"}
				rng.Shuffle(3, func(x, y int) { all[x], all[y] = all[y], all[x] })
				keys = all[:1+rng.IntN(3)]
			} else {
				keys = []string{fmt.Sprintf("w%d-x", i), fmt.Sprintf("w%d-y", i)}
			}
			for j := range keys {
				keys[j] = tag + keys[j]
			}
			err := multilock.WithLock(sctx, pr.ml, keys, func(context.Context, *multilock.Lease) error {
				t1 = time.Now()
				time.Sleep(h)
				return nil
			}, opts)
			return t1.Sub(t0), err
		default:
			key := tag + "global"
			if v == KSetMutexDisj {
				key = fmt.Sprintf("%sw%d", tag, i)
			}
			err := syncguard.WithLock(sctx, pr.mx, key, func(context.Context, *syncguard.Lease) error {
				t1 = time.Now()
				time.Sleep(h)
				return nil
			}, opts)
			return t1.Sub(t0), err
		}
	}
	const warm = 300 * time.Millisecond
	seg := func(v, tag string, d time.Duration, acc *ksetAcc) {
		sctx, cancel := context.WithCancel(ctx)
		defer cancel()
		start := time.Now().Add(warm)
		end := start.Add(d)
		time.AfterFunc(warm+d, cancel) // waits still running at the end are not counted
		var wg sync.WaitGroup
		for i := range p.Workers {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(i), uint64(time.Now().UnixNano())))
				for sctx.Err() == nil {
					t0 := time.Now()
					wait, err := hold(sctx, v, i, rng, tag)
					acc.mu.Lock()
					switch {
					case t0.Before(start) || time.Now().After(end) && err == nil:
					case err == nil:
						acc.waits = append(acc.waits, wait)
					case sctx.Err() != nil:
					case errors.Is(err, syncguard.ErrAcquisitionTimeout):
						acc.timeouts++
					default:
						acc.errs++
						if acc.firstErr == nil {
							acc.firstErr = err
						}
					}
					acc.mu.Unlock()
				}
			})
		}
		wg.Wait()
		acc.wall += d
	}
	variants := []string{KSetMLCross, KSetMutexCross, KSetMLDisj, KSetMutexDisj}
	accs := map[string]*ksetAcc{}
	for i, v := range variants {
		accs[v] = &ksetAcc{}
		seg(v, fmt.Sprintf("warm%d:", i), 300*time.Millisecond, &ksetAcc{})
	}
	d := p.Duration / time.Duration(p.Rounds)
	for r := range p.Rounds {
		for _, v := range rotate(variants, r) {
			seg(v, fmt.Sprintf("r%d:", r), d, accs[v])
		}
	}
	name := "k-set"
	if w.Via != "" {
		name += "_" + w.Via
	}
	res := &WaitResult{Bench: "syncguard", Driver: w.Driver, Workload: name,
		Title:   fmt.Sprintf("%d workers (a pool and locker each) loop Lock, hold 0-%v, release: multilock vs the mutex", p.Workers, p.MaxHold),
		Measure: "wait: from calling WithLock to fn starting, acquired calls only; utilization column: holdings/s",
		Params: map[string]any{"workers": p.Workers, "max_hold_ms": msf(p.MaxHold), "seconds_per_variant": p.Duration.Seconds(),
			"rounds": p.Rounds}}
	rate := map[string]float64{}
	p99 := map[string]float64{}
	for _, v := range variants {
		a := accs[v]
		row := WaitRow{Variant: v, Acquired: len(a.waits), Timeouts: a.timeouts, Errors: a.errs}
		if a.firstErr != nil {
			row.FirstError = a.firstErr.Error()
		}
		if a.wall > 0 {
			rate[v] = float64(len(a.waits)) / a.wall.Seconds()
			row.Utilization = rate[v]
		}
		row.P50, row.P99, row.Max = summarizeMs(a.waits)
		p99[v] = row.P99
		res.Rows = append(res.Rows, row)
	}
	ratio := func(a, b string) float64 {
		if rate[b] == 0 {
			return 0
		}
		return rate[a] / rate[b]
	}
	cross, disj := ratio(KSetMLCross, KSetMutexCross), ratio(KSetMLDisj, KSetMutexDisj)
	res.Params["crossing_ratio"], res.Params["disjoint_ratio"] = cross, disj
	res.Targets = append(res.Targets,
		Target{Name: "k-set crossing: multilock holdings/s / one global mutex's", Value: cross, Goal: ">= 1.5", Met: cross >= 1.5},
		Target{Name: "k-set crossing: multilock wait p99 ms", Value: p99[KSetMLCross], Goal: "<= 200", Met: p99[KSetMLCross] <= 200},
		Target{Name: "k-set disjoint: multilock holdings/s / independent mutexes'", Value: disj, Goal: ">= 0.8", Met: disj >= 0.8},
		Target{Name: "k-set errors and timeouts", Value: float64(errsOf(res)), Goal: "0", Met: errsOf(res) == 0})
	return res, nil
}

func errsOf(r *WaitResult) int {
	n := 0
	for _, x := range r.Rows {
		n += x.Errors + x.Timeouts
	}
	return n
}
