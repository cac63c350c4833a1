package sgbench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/syncguard/syncguard-go/internal/rules"
)

// Workloads 1 to 5: single operations, each variant against the baselines
// in the same interleaved rounds (Env.runRounds, workloads.go).

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
