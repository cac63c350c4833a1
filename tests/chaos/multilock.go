package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/syncguard/syncguard-go/internal/rules"
	"github.com/syncguard/syncguard-go/multilock"
	"github.com/syncguard/syncguard-go/syncguard"
	"github.com/syncguard/syncguard-go/tests/pgtest/history"
	"github.com/syncguard/syncguard-go/tests/pgtest/kindcheck"
)

// Several keys at once under the same faults (issue 30): per adapter,
// three workers lock random sets of one to three of four keys, named in
// random order, through multilock.Lock; hold them briefly; release them
// or abandon them (a crash: the set expires). An audit trigger on the
// set lock table records every row change with the server's clock and
// its transaction; after the load the check rebuilds each key's holdings
// on that clock, [written, min(deleted or overwritten, expiry + 1 s
// tolerance)), and requires that no key has two holders at a server time,
// that each key's fences strictly increase, and that every holding's rows
// were all written by one transaction, one per key of its set.

const mlWorkersPerAdapter = 3

// startMultiLock sets up multilock's tables with the audit, starts the
// workers on r.ctx and, when they have stopped, checks the audit
// (r.violate); wg covers all of it.
func (r *runner) startMultiLock(wg *sync.WaitGroup) {
	ctx, cfg := r.ctx, r.cfg
	tb, err := multilock.TablesOf(&cfg)
	fail := func(err error) {
		r.violate(history.Violation{Rule: "the multilock chaos run sets up", Detail: err.Error()})
	}
	if err != nil {
		fail(err)
		return
	}
	audit, fn := kindcheck.MultiLockAudit(cfg.TableName)
	drop := func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = r.admin.ExecContext(cctx, fmt.Sprintf(`DROP TABLE IF EXISTS %s, %s, %s, %s`, rules.QuoteIdent(tb.Locks),
			rules.QuoteIdent(tb.Fences), rules.QuoteIdent(tb.Waiters), audit))
		_, _ = r.admin.ExecContext(cctx, `DROP FUNCTION IF EXISTS `+fn+` CASCADE`)
	}
	if err := multilock.SetupSchema(ctx, r.admin, &cfg); err != nil {
		fail(err)
		return
	}
	if err := kindcheck.InstallMultiLockAudit(ctx, r.admin, &cfg); err != nil {
		fail(err)
		drop()
		return
	}
	var workers sync.WaitGroup
	var lockers []*multilock.Locker
	for ai, a := range r.adapt {
		c := cfg
		c.Dialect = nil
		l, err := multilock.New(a.db, &c)
		if err != nil {
			r.opts.Logf("chaos: multilock on %s: %v (skipped)", a.name, err)
			continue
		}
		lockers = append(lockers, l)
		for i := range mlWorkersPerAdapter {
			rng := rand.New(rand.NewPCG(r.opts.Seed, uint64(300+ai*10+i)))
			workers.Add(1)
			go func() { defer workers.Done(); r.mlWorker(ctx, l, rng) }()
		}
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		workers.Wait()
		for _, l := range lockers {
			l.Close()
		}
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		vs, n, err := kindcheck.CheckMultiLock(cctx, r.admin, cfg.TableName)
		if err != nil {
			fail(err)
		}
		for _, v := range vs {
			r.violate(v)
		}
		r.opts.Logf("chaos: multilock: %d key holdings checked on the server's clock, %d violations", n, len(vs))
		drop()
	}()
}

func (r *runner) mlWorker(ctx context.Context, l *multilock.Locker, rng *rand.Rand) {
	names := []string{"ml-0", "ml-1", "ml-2", "ml-3"}
	for ctx.Err() == nil {
		rng.Shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })
		set := append([]string(nil), names[:1+rng.IntN(3)]...)
		opts := &syncguard.LockOptions{TTL: r.opts.TTL, AutoExtend: rng.IntN(2) == 0,
			Acquisition: syncguard.AcquisitionOptions{Timeout: 3 * time.Second}}
		lease, err := multilock.Lock(ctx, l, set, opts)
		if err != nil {
			time.Sleep(time.Duration(10+rng.IntN(40)) * time.Millisecond)
			continue
		}
		select {
		case <-time.After(time.Duration(rng.IntN(60)) * time.Millisecond):
		case <-ctx.Done():
		}
		if !opts.AutoExtend && rng.IntN(20) == 0 {
			continue // abandoned: it expires at its TTL
		}
		lease.Close()
	}
}
