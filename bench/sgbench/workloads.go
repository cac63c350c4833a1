package sgbench

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"time"

	"github.com/syncguard/syncguard-go/internal/rules"
)

// Config sets the size of a run.
type Config struct {
	Driver      string        // "pq" or "pgx", for the report
	Workers     int           // concurrent workers (workloads 2-5) and pool size
	Keys        int           // key space of workload 2 (and held locks of workload 5)
	Pairs       int           // acquire+release pairs of workload 1 per variant
	Duration    time.Duration // per variant, workloads 2 and 3
	AuxDuration time.Duration // per variant, workloads 4 and 5
	Rounds      int           // each variant's share is split into this many interleaved rounds
	TTL         time.Duration // lock TTL
	ExtendLocks int           // locks held per worker in workload 4
	RunID       string        // key prefix, unique per run
}

// Env is one driver's benchmark environment: a pool and the three lockers
// on it, plus a one-connection admin pool for measurements (WAL position,
// fence counters) taken between measured segments.
type Env struct {
	Cfg   Config
	DB    *sql.DB
	Admin *sql.DB
	*Lockers
}

// Roles of a variant in a comparison.
const (
	RoleSubject   = "subject"
	RoleFloor     = "floor"
	RoleReference = "reference"
	RoleBaseline  = "baseline"
)

// Variant is one implementation measured in a workload.
type Variant struct {
	Name string
	Role string
	L    Locker
	// fenceKey, when set, is the fence counter row (table, key) whose
	// increments workload 3 compares with the successful acquires.
	fenceTable, fenceKey string
	// countWrites: count the transaction ids assigned during each segment
	// and compare them with the successful acquires and releases
	// (workload 3).
	countWrites bool
}

// VariantResult is what one variant measured in one workload.
type VariantResult struct {
	Name          string  `json:"name"`
	Role          string  `json:"role"`
	Ops           int64   `json:"ops"`
	Seconds       float64 `json:"seconds"`
	OpsPerSec     float64 `json:"ops_per_sec"`
	Attempts      int64   `json:"attempts,omitempty"`
	Wins          int64   `json:"wins,omitempty"`
	WinsPerSec    float64 `json:"wins_per_sec,omitempty"` // pairs/s (w1, w2) or hand-offs/s (w3)
	Lat           Lat     `json:"lat"`
	Acquire       *Lat    `json:"acquire,omitempty"`
	Release       *Lat    `json:"release,omitempty"`
	WALBytesPerOp float64 `json:"wal_bytes_per_op"`
	// FenceBumpsLost counts fence increments committed by attempts that did
	// not get the lock (workload 3): gaps in the fence sequence.
	FenceBumpsLost *int64 `json:"fence_bumps_by_failed_attempts,omitempty"`
	// FailedWrites counts failed attempts that wrote anything (a row lock,
	// a fence, a speculative insertion), hence committed a transaction id,
	// WAL and a flush (workload 3): transaction ids assigned in the cluster
	// minus successful acquires minus successful releases, each of which
	// assigns one. Background work (autoanalyze) may add a few.
	FailedWrites   *int64  `json:"failed_attempts_that_wrote,omitempty"`
	RatioFloor     float64 `json:"ratio_floor,omitempty"`
	RatioRef       float64 `json:"ratio_reference,omitempty"`
	WinsRatioFloor float64 `json:"wins_ratio_floor,omitempty"`
	WinsRatioRef   float64 `json:"wins_ratio_reference,omitempty"`
	Errors         int64   `json:"errors"`
	FirstError     string  `json:"first_error,omitempty"`

	lat, acq, rel []time.Duration
	elapsed       time.Duration
	wal           int64
	fenceBumps    int64
	xids, relOK   int64
}

// WorkloadResult is one workload's comparison: one JSON line.
type WorkloadResult struct {
	Bench    string           `json:"bench"`
	Driver   string           `json:"driver"`
	Workload string           `json:"workload"`
	Title    string           `json:"title"`
	Unit     string           `json:"unit"`
	Params   map[string]any   `json:"params"`
	Variants []*VariantResult `json:"variants"`
	Targets  []Target         `json:"targets,omitempty"`
}

// Target is one goal of the issue, evaluated on this run.
type Target struct {
	Name  string  `json:"name"`
	Value float64 `json:"value"`
	Goal  string  `json:"goal"`
	Met   bool    `json:"met"`
}

// acc accumulates one worker's measurements.
type acc struct {
	ops, attempts, wins, errs int64
	relOK                     int64 // successful releases
	firstErr                  error
	lat, acq, rel             []time.Duration
}

func (a *acc) fail(err error) {
	a.errs++
	if a.firstErr == nil {
		a.firstErr = err
	}
}

func (v *VariantResult) merge(a *acc) {
	v.Ops += a.ops
	v.Attempts += a.attempts
	v.Wins += a.wins
	v.relOK += a.relOK
	v.Errors += a.errs
	if a.firstErr != nil && v.FirstError == "" {
		v.FirstError = a.firstErr.Error()
	}
	v.lat = append(v.lat, a.lat...)
	v.acq = append(v.acq, a.acq...)
	v.rel = append(v.rel, a.rel...)
}

// LSN returns the server's current WAL insert position in bytes.
func (e *Env) LSN(ctx context.Context) (int64, error) {
	var n int64
	err := e.Admin.QueryRowContext(ctx, `SELECT (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::bigint`).Scan(&n)
	return n, err
}

// nextXid returns the next transaction id to be assigned (when no
// transaction is running), without assigning one.
func (e *Env) nextXid(ctx context.Context) (int64, error) {
	var n int64
	err := e.Admin.QueryRowContext(ctx, `SELECT txid_snapshot_xmax(txid_current_snapshot())`).Scan(&n)
	return n, err
}

func (e *Env) fenceValue(ctx context.Context, table, key string) (int64, error) {
	var n sql.NullInt64
	err := e.Admin.QueryRowContext(ctx, `SELECT max(fence) FROM `+rules.QuoteIdent(table)+` WHERE fence_key = $1`, key).Scan(&n)
	return n.Int64, err
}

// segment runs body once for each of n workers (n == 1: in this goroutine)
// and accounts elapsed time, WAL bytes and the workers' measurements to v.
func (e *Env) segment(ctx context.Context, v *Variant, r *VariantResult, n int, body func(w int, a *acc)) error {
	var before, fenceBefore, xidBefore int64
	var err error
	if before, err = e.LSN(ctx); err != nil {
		return err
	}
	if v.countWrites {
		if xidBefore, err = e.nextXid(ctx); err != nil {
			return err
		}
	}
	if v.fenceKey != "" {
		if fenceBefore, err = e.fenceValue(ctx, v.fenceTable, v.fenceKey); err != nil {
			return err
		}
	}
	accs := make([]acc, n)
	start := time.Now()
	if n == 1 {
		body(0, &accs[0])
	} else {
		var wg sync.WaitGroup
		for w := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				body(w, &accs[w])
			}()
		}
		wg.Wait()
	}
	r.elapsed += time.Since(start)
	after, err := e.LSN(ctx)
	if err != nil {
		return err
	}
	r.wal += after - before
	var wins int64
	for i := range accs {
		r.merge(&accs[i])
		wins += accs[i].wins
	}
	if v.fenceKey != "" {
		fenceAfter, err := e.fenceValue(ctx, v.fenceTable, v.fenceKey)
		if err != nil {
			return err
		}
		r.fenceBumps += (fenceAfter - fenceBefore) - wins
	}
	if v.countWrites {
		xidAfter, err := e.nextXid(ctx)
		if err != nil {
			return err
		}
		r.xids += xidAfter - xidBefore
	}
	return nil
}

// rotate returns the variants in the order of round i, so that no variant
// always runs first or last.
func rotate[T any](xs []T, i int) []T {
	out := make([]T, 0, len(xs))
	for j := range xs {
		out = append(out, xs[(i+j)%len(xs)])
	}
	return out
}

func (e *Env) lockVariants() []*Variant {
	return []*Variant{
		{Name: "syncguard", Role: RoleSubject, L: e.SG},
		{Name: "floor (INSERT + DELETE autocommit)", Role: RoleFloor, L: e.Floor},
		{Name: "reference (spec transactions)", Role: RoleReference, L: e.Ref},
	}
}

// pair runs one acquire (+ release if won) and records it.
func pair(ctx context.Context, l Locker, key string, ttl time.Duration, a *acc) {
	t0 := time.Now()
	id, ok, err := l.Acquire(ctx, key, ttl)
	d := time.Since(t0)
	a.attempts++
	a.ops++
	a.lat = append(a.lat, d)
	a.acq = append(a.acq, d)
	if err != nil {
		a.fail(err)
		return
	}
	if !ok {
		return
	}
	a.wins++
	t1 := time.Now()
	ok, err = l.Release(ctx, id)
	d = time.Since(t1)
	a.ops++
	a.lat = append(a.lat, d)
	a.rel = append(a.rel, d)
	if err != nil {
		a.fail(err)
	} else if !ok {
		a.fail(fmt.Errorf("release of a lock just acquired failed"))
	} else {
		a.relOK++
	}
}

// runRounds measures every variant in cfg.Rounds interleaved rounds; each
// round runs each variant's segment once. warm runs before the first round.
func (e *Env) runRounds(ctx context.Context, vs []*Variant, warm, seg func(i int, v *Variant, r *VariantResult) error) ([]*VariantResult, error) {
	res := map[*Variant]*VariantResult{}
	for _, v := range vs {
		res[v] = &VariantResult{Name: v.Name, Role: v.Role}
		if warm != nil {
			if err := warm(-1, v, &VariantResult{}); err != nil {
				return nil, err
			}
		}
	}
	for i := range e.Cfg.Rounds {
		for _, v := range rotate(vs, i) {
			if err := seg(i, v, res[v]); err != nil {
				return nil, err
			}
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
	}
	out := make([]*VariantResult, 0, len(vs))
	for _, v := range vs {
		out = append(out, finish(res[v]))
	}
	return out, nil
}

func finish(r *VariantResult) *VariantResult {
	r.Seconds = r.elapsed.Seconds()
	if r.Seconds > 0 {
		r.OpsPerSec = float64(r.Ops) / r.Seconds
		r.WinsPerSec = float64(r.Wins) / r.Seconds
	}
	if r.Ops > 0 {
		r.WALBytesPerOp = float64(r.wal) / float64(r.Ops)
	}
	r.Lat = Summarize(r.lat)
	if len(r.acq) > 0 {
		l := Summarize(r.acq)
		r.Acquire = &l
	}
	if len(r.rel) > 0 {
		l := Summarize(r.rel)
		r.Release = &l
	}
	r.lat, r.acq, r.rel = nil, nil, nil
	return r
}

// ratios fills the ratio fields against the floor and reference rows.
func ratios(vs []*VariantResult) {
	var floor, ref *VariantResult
	for _, v := range vs {
		switch v.Role {
		case RoleFloor:
			floor = v
		case RoleReference:
			ref = v
		}
	}
	div := func(a, b float64) float64 {
		if b == 0 {
			return 0
		}
		return a / b
	}
	for _, v := range vs {
		if floor != nil {
			v.RatioFloor = div(v.OpsPerSec, floor.OpsPerSec)
			v.WinsRatioFloor = div(v.WinsPerSec, floor.WinsPerSec)
		}
		if ref != nil {
			v.RatioRef = div(v.OpsPerSec, ref.OpsPerSec)
			v.WinsRatioRef = div(v.WinsPerSec, ref.WinsPerSec)
		}
	}
}

func subject(vs []*VariantResult) *VariantResult {
	for _, v := range vs {
		if v.Role == RoleSubject {
			return v
		}
	}
	return nil
}

func (e *Env) result(workload, title, unit string, params map[string]any, vs []*VariantResult) *WorkloadResult {
	ratios(vs)
	if params == nil {
		params = map[string]any{}
	}
	params["pool"] = e.Cfg.Workers
	params["rounds"] = e.Cfg.Rounds
	return &WorkloadResult{Bench: "syncguard", Driver: e.Cfg.Driver, Workload: workload, Title: title, Unit: unit, Params: params, Variants: vs}
}
