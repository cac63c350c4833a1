package sgbench

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
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

// W1 is workload 1: sequential acquire + release on distinct keys.
func (e *Env) W1(ctx context.Context) (*WorkloadResult, error) {
	per := max(e.Cfg.Pairs/e.Cfg.Rounds, 1)
	next := map[string]int{}
	run := func(n int) func(i int, v *Variant, r *VariantResult) error {
		return func(i int, v *Variant, r *VariantResult) error {
			return e.segment(ctx, v, r, 1, func(_ int, a *acc) {
				for range n {
					next[v.Name]++
					key := fmt.Sprintf("%s:w1:%s:%d:order-%08d", e.Cfg.RunID, v.Role, i+1, next[v.Name])
					pair(ctx, v.L, key, e.Cfg.TTL, a)
				}
			})
		}
	}
	vs, err := e.runRounds(ctx, e.lockVariants(), run(50), run(per))
	if err != nil {
		return nil, err
	}
	s1, err := e.Select1Sequential(ctx, per*e.Cfg.Rounds)
	if err != nil {
		return nil, err
	}
	vs = append(vs, s1)
	res := e.result("w1_sequential", "sequential acquire + release, distinct keys", "ops/s (acquire and release each count 1)",
		map[string]any{"pairs": per * e.Cfg.Rounds, "workers": 1}, vs)
	s := subject(vs)
	res.Targets = []Target{
		{Name: "w1 throughput vs durable floor", Value: s.RatioFloor, Goal: ">= 0.85", Met: s.RatioFloor >= 0.85},
		{Name: "w1 throughput vs reference design", Value: s.RatioRef, Goal: ">= 2.5", Met: s.RatioRef >= 2.5},
	}
	return res, nil
}

// timedPairs returns a segment that runs Workers workers doing pair() on
// random keys of keys for d.
func (e *Env) timedPairs(ctx context.Context, keys []string, d time.Duration) func(i int, v *Variant, r *VariantResult) error {
	return func(i int, v *Variant, r *VariantResult) error {
		deadline := time.Now().Add(d)
		return e.segment(ctx, v, r, e.Cfg.Workers, func(w int, a *acc) {
			rng := rand.New(rand.NewPCG(uint64(w), uint64(i+7)))
			for time.Now().Before(deadline) && ctx.Err() == nil {
				pair(ctx, v.L, keys[rng.IntN(len(keys))], e.Cfg.TTL, a)
			}
		})
	}
}

// W2 is workload 2: Workers workers acquire + release over Keys keys.
func (e *Env) W2(ctx context.Context) (*WorkloadResult, error) {
	keys := make([]string, e.Cfg.Keys)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s:w2:resource-%04d", e.Cfg.RunID, i)
	}
	d := e.Cfg.Duration / time.Duration(e.Cfg.Rounds)
	vs, err := e.runRounds(ctx, e.lockVariants(), e.timedPairs(ctx, keys, 200*time.Millisecond), e.timedPairs(ctx, keys, d))
	if err != nil {
		return nil, err
	}
	res := e.result("w2_concurrent", fmt.Sprintf("%d workers, acquire + release over %d keys", e.Cfg.Workers, e.Cfg.Keys),
		"ops/s (acquire attempts and releases)", map[string]any{"workers": e.Cfg.Workers, "keys": e.Cfg.Keys, "seconds_per_variant": e.Cfg.Duration.Seconds()}, vs)
	s := subject(vs)
	res.Targets = []Target{
		{Name: "w2 throughput vs durable floor", Value: s.RatioFloor, Goal: ">= 0.75", Met: s.RatioFloor >= 0.75},
		{Name: "w2 throughput vs reference design", Value: s.RatioRef, Goal: ">= 2.5", Met: s.RatioRef >= 2.5},
	}
	return res, nil
}

// W3 is workload 3: Workers workers on one hot key, acquire once and
// release if won.
func (e *Env) W3(ctx context.Context) (*WorkloadResult, error) {
	key := fmt.Sprintf("%s:w3:%d:hot", e.Cfg.RunID, e.Cfg.Workers)
	norm, _ := rules.NormalizeKey(key)
	_, fenceKey, err := rules.StorageKeys(norm)
	if err != nil {
		return nil, err
	}
	vars := e.lockVariants()
	for _, v := range vars {
		v.countWrites = true
		switch v.Role {
		case RoleSubject:
			v.fenceTable, v.fenceKey = SGFenceTable, fenceKey
		case RoleReference:
			v.fenceTable, v.fenceKey = RefFenceTable, fenceKey
		}
	}
	d := e.Cfg.Duration / time.Duration(e.Cfg.Rounds)
	vs, err := e.runRounds(ctx, vars, e.timedPairs(ctx, []string{key}, 200*time.Millisecond), e.timedPairs(ctx, []string{key}, d))
	if err != nil {
		return nil, err
	}
	for i, v := range vars {
		if v.fenceKey != "" {
			n := vs[i].fenceBumps
			vs[i].FenceBumpsLost = &n
		}
		w := vs[i].xids - vs[i].Wins - vs[i].relOK
		vs[i].FailedWrites = &w
	}
	name := "w3_hot_key"
	if e.Cfg.Workers != 8 {
		name = fmt.Sprintf("w3_hot_key_%dworkers", e.Cfg.Workers)
	}
	res := e.result(name, fmt.Sprintf("%d workers on one hot key, acquire once, release if won", e.Cfg.Workers),
		"ops/s (attempts and releases); wins = successful hand-offs", map[string]any{"workers": e.Cfg.Workers, "seconds_per_variant": e.Cfg.Duration.Seconds()}, vs)
	s := subject(vs)
	failed := float64(max(s.Attempts-s.Wins, 1))
	res.Targets = []Target{
		{Name: fmt.Sprintf("w3 (%d workers) hand-offs/s vs reference design", e.Cfg.Workers), Value: s.WinsRatioRef, Goal: ">= 1", Met: s.WinsRatioRef >= 1},
		{Name: fmt.Sprintf("w3 (%d workers) fence gaps (failed attempts that bumped the fence)", e.Cfg.Workers), Value: float64(*s.FenceBumpsLost), Goal: "0", Met: *s.FenceBumpsLost == 0},
		{Name: fmt.Sprintf("w3 (%d workers) failed attempts that wrote, %% of failed attempts", e.Cfg.Workers), Value: 100 * float64(*s.FailedWrites) / failed, Goal: "~ 0 (< 0.1)", Met: 100*float64(*s.FailedWrites)/failed < 0.1},
	}
	return res, nil
}

// holdLocks acquires n locks per worker for the long-running workloads and
// returns their keys and ids, per worker.
func holdLocks(ctx context.Context, l Locker, prefix string, workers, n int, ttl time.Duration) (keys, ids [][]string, err error) {
	keys = make([][]string, workers)
	ids = make([][]string, workers)
	for w := range workers {
		for j := range n {
			k := fmt.Sprintf("%s:w%d:session-%04d", prefix, w, j)
			id, ok, err := l.Acquire(ctx, k, ttl)
			if err != nil {
				return nil, nil, err
			}
			if !ok {
				return nil, nil, fmt.Errorf("holdLocks: %s is held", k)
			}
			keys[w] = append(keys[w], k)
			ids[w] = append(ids[w], id)
		}
	}
	return keys, ids, nil
}

func releaseAll(ctx context.Context, l Locker, ids [][]string) {
	for _, ws := range ids {
		for _, id := range ws {
			l.Release(ctx, id) //nolint:errcheck
		}
	}
}

// W4 is workload 4: extend (heartbeat) throughput; each worker renews its
// own ExtendLocks held locks round-robin.
func (e *Env) W4(ctx context.Context) (*WorkloadResult, error) {
	vars := []*Variant{
		{Name: "syncguard extend", Role: RoleSubject, L: e.SG},
		{Name: "floor (UPDATE autocommit)", Role: RoleFloor, L: e.Floor},
		{Name: "reference extend (spec transaction)", Role: RoleReference, L: e.Ref},
	}
	held := map[*Variant][][]string{}
	for _, v := range vars {
		_, ids, err := holdLocks(ctx, v.L, e.Cfg.RunID+":w4", e.Cfg.Workers, e.Cfg.ExtendLocks, 10*time.Minute)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", v.Name, err)
		}
		held[v] = ids
	}
	defer func() {
		for v, ids := range held {
			releaseAll(context.WithoutCancel(ctx), v.L, ids)
		}
	}()
	seg := func(d time.Duration) func(i int, v *Variant, r *VariantResult) error {
		return func(i int, v *Variant, r *VariantResult) error {
			deadline := time.Now().Add(d)
			ids := held[v]
			return e.segment(ctx, v, r, e.Cfg.Workers, func(w int, a *acc) {
				for j := 0; time.Now().Before(deadline) && ctx.Err() == nil; j++ {
					t0 := time.Now()
					ok, err := v.L.Extend(ctx, ids[w][j%len(ids[w])], 10*time.Minute)
					a.lat = append(a.lat, time.Since(t0))
					a.ops++
					if err != nil {
						a.fail(err)
					} else if !ok {
						a.fail(fmt.Errorf("extend of a held lock failed"))
					}
				}
			})
		}
	}
	vs, err := e.runRounds(ctx, vars, seg(200*time.Millisecond), seg(e.Cfg.AuxDuration/time.Duration(e.Cfg.Rounds)))
	if err != nil {
		return nil, err
	}
	return e.result("w4_extend", fmt.Sprintf("extend (heartbeat) of held locks, %d workers x %d locks each", e.Cfg.Workers, e.Cfg.ExtendLocks),
		"extends/s", map[string]any{"workers": e.Cfg.Workers, "locks_per_worker": e.Cfg.ExtendLocks, "seconds_per_variant": e.Cfg.AuxDuration.Seconds()}, vs), nil
}

// W5 is workload 5: IsLocked, LookupKey and LookupID of held locks, with
// the reference read, a primary-key read of the scratch table (the floor)
// and SELECT 1.
func (e *Env) W5(ctx context.Context) (*WorkloadResult, error) {
	n := e.Cfg.Keys
	sgKeys, sgIDs, err := holdLocks(ctx, e.SG, e.Cfg.RunID+":w5", 1, n, 10*time.Minute)
	if err != nil {
		return nil, err
	}
	defer releaseAll(context.WithoutCancel(ctx), e.SG, sgIDs)
	refKeys, refIDs, err := holdLocks(ctx, e.Ref, e.Cfg.RunID+":w5", 1, n, 10*time.Minute)
	if err != nil {
		return nil, err
	}
	defer releaseAll(context.WithoutCancel(ctx), e.Ref, refIDs)
	flKeys, flIDs, err := holdLocks(ctx, e.Floor, e.Cfg.RunID+":w5", 1, n, 0)
	if err != nil {
		return nil, err
	}
	defer releaseAll(context.WithoutCancel(ctx), e.Floor, flIDs)

	type rv struct {
		v         *Variant
		keys, ids []string
	}
	vars := []rv{
		{&Variant{Name: "syncguard IsLocked", Role: RoleSubject, L: e.SG.With("isLocked")}, sgKeys[0], sgIDs[0]},
		{&Variant{Name: "syncguard LookupKey", Role: RoleSubject, L: e.SG.With("lookupKey")}, sgKeys[0], sgIDs[0]},
		{&Variant{Name: "syncguard LookupID", Role: RoleSubject, L: e.SG.With("lookupID")}, sgKeys[0], sgIDs[0]},
		{&Variant{Name: "floor (SELECT by primary key)", Role: RoleFloor, L: e.Floor}, flKeys[0], flIDs[0]},
		{&Variant{Name: "reference read (SELECT * WHERE key)", Role: RoleReference, L: e.Ref}, refKeys[0], refIDs[0]},
		{&Variant{Name: "SELECT 1", Role: RoleBaseline, L: e.Floor.WithSelect1()}, flKeys[0], flIDs[0]},
	}
	byV := map[*Variant]rv{}
	vs := make([]*Variant, len(vars))
	for i, x := range vars {
		byV[x.v] = x
		vs[i] = x.v
	}
	seg := func(d time.Duration) func(i int, v *Variant, r *VariantResult) error {
		return func(i int, v *Variant, r *VariantResult) error {
			x := byV[v]
			deadline := time.Now().Add(d)
			return e.segment(ctx, v, r, e.Cfg.Workers, func(w int, a *acc) {
				rng := rand.New(rand.NewPCG(uint64(w), uint64(i+11)))
				for time.Now().Before(deadline) && ctx.Err() == nil {
					j := rng.IntN(len(x.keys))
					t0 := time.Now()
					err := v.L.Read(ctx, x.keys[j], x.ids[j])
					a.lat = append(a.lat, time.Since(t0))
					a.ops++
					if err != nil {
						a.fail(err)
					}
				}
			})
		}
	}
	res, err := e.runRounds(ctx, vs, seg(150*time.Millisecond), seg(e.Cfg.AuxDuration/time.Duration(e.Cfg.Rounds)))
	if err != nil {
		return nil, err
	}
	return e.result("w5_reads", fmt.Sprintf("IsLocked and lookups of %d held locks, %d workers", n, e.Cfg.Workers),
		"reads/s", map[string]any{"workers": e.Cfg.Workers, "held_locks": n, "seconds_per_variant": e.Cfg.AuxDuration.Seconds()}, res), nil
}

// Select1Sequential measures a bare SELECT 1 round trip from one goroutine,
// the latency floor of any one-round-trip operation.
func (e *Env) Select1Sequential(ctx context.Context, n int) (*VariantResult, error) {
	v := &Variant{Name: "SELECT 1 (sequential)", Role: RoleBaseline, L: e.Floor.WithSelect1()}
	r := &VariantResult{Name: v.Name, Role: v.Role}
	err := e.segment(ctx, v, r, 1, func(_ int, a *acc) {
		for range n {
			t0 := time.Now()
			err := v.L.Read(ctx, "", "")
			a.lat = append(a.lat, time.Since(t0))
			a.ops++
			if err != nil {
				a.fail(err)
			}
		}
	})
	if err != nil {
		return nil, err
	}
	return finish(r), nil
}
