package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/syncguard/syncguard-go/internal/rules"
	"github.com/syncguard/syncguard-go/rwlock"
	"github.com/syncguard/syncguard-go/syncguard"
	"github.com/syncguard/syncguard-go/tests/pgtest/history"
	"github.com/syncguard/syncguard-go/tests/pgtest/kindcheck"
)

// The read-write lock under the same faults (issue 30): per adapter, four
// workers take shared or exclusive leases (one in five exclusive) of two
// keys through syncguard.Lock, hold them briefly, release them or abandon
// them (a crash: the lease expires). An audit trigger on the leases table
// records every row change with the server's clock; after the load the
// check rebuilds each lease's life on that clock, [admitted, min(deleted,
// expiry + 1 s tolerance)), and requires that no writer's lease overlaps
// any other lease of its key, that writer fences strictly increase, and
// that a reader's fence is the latest writer fence at its admission.

const rwWorkersPerAdapter = 4

// startRWLock sets up the read-write lock tables of the run, starts its
// workers on r.ctx and, when they have stopped, checks the audit and
// reports violations (r.violate); wg covers all of it.
func (r *runner) startRWLock(wg *sync.WaitGroup) {
	ctx := r.ctx
	cfg := r.cfg
	table := cfg.TableName + "_rw"
	audit, _ := kindcheck.RWLockAudit(cfg.TableName)
	drop := func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = r.admin.ExecContext(cctx, fmt.Sprintf(`DROP TABLE IF EXISTS %s, %s, %s, %s`, rules.QuoteIdent(table), audit,
			rules.QuoteIdent(cfg.TableName+"_rw_keys"), rules.QuoteIdent(cfg.TableName+"_rw_waiters")))
		for _, f := range []string{"_rw_acquire", "_rw_release", "_rw_grant", "_rw_hint", "_rw_lock", "_rw_audit_fn"} {
			_, _ = r.admin.ExecContext(cctx, `DROP FUNCTION IF EXISTS `+rules.QuoteIdent(cfg.TableName+f)+` CASCADE`)
		}
	}
	fail := func(err error) {
		r.violate(history.Violation{Rule: "the read-write lock's chaos run sets up", Detail: err.Error()})
	}
	if err := rwlock.SetupSchema(ctx, r.admin, &cfg); err != nil {
		fail(err)
		return
	}
	if err := kindcheck.InstallRWLockAudit(ctx, r.admin, cfg.TableName); err != nil {
		fail(err)
		drop()
		return
	}
	var workers sync.WaitGroup
	var locks []*rwlock.RWLock
	for ai, a := range r.adapt {
		c := cfg
		c.Dialect = nil
		rw, err := rwlock.New(a.db, &c)
		if err != nil {
			r.opts.Logf("chaos: rwlock on %s: %v (skipped)", a.name, err)
			continue
		}
		locks = append(locks, rw)
		for i := range rwWorkersPerAdapter {
			rng := rand.New(rand.NewPCG(r.opts.Seed, uint64(100+ai*10+i)))
			workers.Add(1)
			go func() { defer workers.Done(); r.rwWorker(ctx, rw, rng) }()
		}
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		workers.Wait()
		for _, rw := range locks {
			rw.Close()
		}
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		vs, n, err := kindcheck.CheckRWLock(cctx, r.admin, cfg.TableName)
		if err != nil {
			fail(err)
		}
		for _, v := range vs {
			r.violate(v)
		}
		r.opts.Logf("chaos: rwlock: %d leases checked on the server's clock, %d violations", n, len(vs))
		drop()
	}()
}

func (r *runner) rwWorker(ctx context.Context, rw *rwlock.RWLock, rng *rand.Rand) {
	for ctx.Err() == nil {
		excl := rng.IntN(5) == 0
		side := rw.Shared()
		if excl {
			side = rw.Exclusive()
		}
		key := fmt.Sprintf("rw-%d", rng.IntN(2))
		opts := &syncguard.LockOptions{TTL: r.opts.TTL, AutoExtend: rng.IntN(2) == 0,
			Acquisition: syncguard.AcquisitionOptions{Timeout: 3 * time.Second}}
		l, err := syncguard.Lock(ctx, side, key, opts)
		if err != nil {
			time.Sleep(time.Duration(10+rng.IntN(40)) * time.Millisecond)
			continue
		}
		select {
		case <-time.After(time.Duration(rng.IntN(80)) * time.Millisecond):
		case <-ctx.Done():
		}
		if !opts.AutoExtend && rng.IntN(20) == 0 {
			continue // abandoned: it expires at its TTL
		}
		l.Close()
	}
}
