package itest_test

import (
	"context"
	"database/sql"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/syncguard/syncguard-go/syncguard"
	"github.com/syncguard/syncguard-go/tests/pgtest"
)

// waitEnv is a lock table of its own on the shared test server, and
// Backends on pools of their own (processes, as far as the library can
// tell).
type waitEnv struct {
	t     *testing.T
	ctx   context.Context
	dsn   string
	admin *sql.DB
	cfg   *syncguard.Config
}

func newWaitEnv(t *testing.T, name string) *waitEnv {
	srv := pgtest.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	admin := open(t, srv.DSN)
	cfg := &syncguard.Config{TableName: name + "_locks", FenceTableName: name + "_fences"}
	drop := `DROP TABLE IF EXISTS ` + name + `_locks, ` + name + `_fences, ` + name + `_locks_waiters, ` + name + `_locks_holders`
	mustExec(ctx, t, admin, drop)
	if err := syncguard.SetupSchema(ctx, admin, cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = admin.Exec(drop) })
	return &waitEnv{t: t, ctx: ctx, dsn: srv.DSN, admin: admin, cfg: cfg}
}

func (e *waitEnv) backend() *syncguard.Backend {
	b, err := syncguard.New(open(e.t, e.dsn), e.cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { b.Close() })
	return b
}

// TestOrderHoldsThroughLongAutoExtendedHold: while a holder keeps its lock
// for ten TTLs with AutoExtend (hold 6 s, TTL 600 ms), waiters on three
// pools arriving 200 ms apart get it in arrival order: their attempts at
// each stale expiry find the holder extended, and the queue is not theirs
// to lose.
func TestOrderHoldsThroughLongAutoExtendedHold(t *testing.T) {
	e := newWaitEnv(t, "order_ae")
	holder := e.backend()
	lease, err := syncguard.Lock(e.ctx, holder, "ae:key", &syncguard.LockOptions{TTL: 600 * time.Millisecond, AutoExtend: true})
	if err != nil {
		t.Fatal(err)
	}
	type got struct {
		i     int
		fence syncguard.Fence
		err   error
	}
	out := make(chan got, 3)
	for i := range 3 {
		b := e.backend()
		go func() {
			l, err := syncguard.Lock(e.ctx, b, "ae:key", &syncguard.LockOptions{TTL: 5 * time.Second, Acquisition: syncguard.AcquisitionOptions{Timeout: time.Minute}})
			if err != nil {
				out <- got{i, "", err}
				return
			}
			out <- got{i, l.Fence(), nil}
			l.Close()
		}()
		time.Sleep(200 * time.Millisecond)
	}
	time.Sleep(6 * time.Second)
	select {
	case <-lease.Done():
		t.Fatalf("setup: the holder's auto-extension must keep the lock for 6 s: %v", lease.Err())
	default:
	}
	lease.Close()
	fences := make([]syncguard.Fence, 3)
	for range 3 {
		g := <-out
		if g.err != nil {
			t.Fatalf("rule: every waiter gets the key; waiter %d: %v", g.i+1, g.err)
		}
		fences[g.i] = g.fence
	}
	if !slices.IsSorted(fences) {
		t.Fatalf("rule: waiters get the key in arrival order through a long auto-extended hold; fences in arrival order: %v", fences)
	}
}

// TestNoStarvationWhenListenConnectionsDrop: six workers on three pools
// take a hot key in turn while every LISTEN connection is terminated,
// twice. No wait fails and every worker keeps getting the key: a waiter
// whose hint was lost finds its hand-off at its next attempt, and nobody
// can take its turn.
func TestNoStarvationWhenListenConnectionsDrop(t *testing.T) {
	e := newWaitEnv(t, "drop_listen")
	var counts [6]atomic.Int64
	var failed atomic.Int64
	busy, stop := context.WithTimeout(e.ctx, 6*time.Second)
	defer stop()
	var wg sync.WaitGroup
	for p := range 3 {
		b := e.backend()
		for w := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for busy.Err() == nil {
					err := syncguard.WithLock(e.ctx, b, "drop:hot", func(context.Context, *syncguard.Lease) error {
						time.Sleep(5 * time.Millisecond)
						return nil
					}, &syncguard.LockOptions{TTL: 10 * time.Second, Acquisition: syncguard.AcquisitionOptions{Timeout: 30 * time.Second}})
					if err != nil {
						t.Errorf("rule: no wait fails when LISTEN connections drop: %v", err)
						failed.Add(1)
						return
					}
					counts[p*2+w].Add(1)
				}
			}()
		}
	}
	killed := 0
	for range 2 {
		time.Sleep(1500 * time.Millisecond)
		var n int
		if err := e.admin.QueryRowContext(e.ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
			WHERE pid <> pg_backend_pid() AND query ILIKE 'LISTEN%'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		killed += n
	}
	wg.Wait()
	var total int64
	per := make([]int64, len(counts))
	for i := range counts {
		per[i] = counts[i].Load()
		total += per[i]
	}
	t.Logf("LISTEN connections terminated: %d; acquisitions per worker: %v", killed, per)
	if killed == 0 {
		t.Errorf("setup: the test must terminate LISTEN connections; found none")
	}
	for i, n := range per {
		if n*4*int64(len(per)) < total {
			t.Errorf("rule: no waiter starves while others take the key after LISTEN connections drop; worker %d got %d of %d (%v)", i+1, n, total, per)
		}
	}
}
