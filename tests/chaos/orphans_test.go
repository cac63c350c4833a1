package chaos

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/syncguard/syncguard-go/syncguard"
	"github.com/syncguard/syncguard-go/tests/pgtest"
)

// TestCancelledAcquireOrphans is the workload of issue 14, item 3: 8
// workers on 3 keys, each acquire with a deadline of 0 to 3 ms, a 30 s TTL,
// pools of 2 connections. An acquire cut by its deadline may still commit
// on the server; the Backend must then release it in the background, so
// that no lock row nobody knows about outlives the background release by
// more than a few seconds (instead of its 30 s TTL).
//
// A monitor reads the lock table every 100 ms; a row whose lockId no worker
// was told about, and that is older than half a second, is an orphan. The
// test fails when an orphan is still there 8 s after the load stopped
// (Config.ReleaseTimeout and the retry schedule end well before), and logs
// the counts. SYNCGUARD_ORPHAN_DURATION (default 5s) sets the load time;
// docs/failure-model.md has the numbers of a long run.
func TestCancelledAcquireOrphans(t *testing.T) {
	srv := pgtest.Require(t)
	d := envDuration(t, "SYNCGUARD_ORPHAN_DURATION")
	if d <= 0 {
		d = 5 * time.Second
	}
	for _, drv := range []string{"pgx", "postgres"} {
		t.Run(drv, func(t *testing.T) { orphanRun(t, srv, drv, d) })
	}
}

func orphanRun(t *testing.T, srv *pgtest.Server, drv string, d time.Duration) {
	ctx := context.Background()
	db, err := sql.Open(drv, srv.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(2)
	suffix := fmt.Sprintf("%x", rand.Uint32())
	cfg := &syncguard.Config{TableName: "orph_" + suffix + "_locks", FenceTableName: "orph_" + suffix + "_fences"}
	if err := syncguard.SetupSchema(ctx, db, cfg); err != nil {
		t.Fatal(err)
	}
	defer db.ExecContext(ctx, `DROP TABLE IF EXISTS "`+cfg.TableName+`", "`+cfg.FenceTableName+`"`)
	b, err := syncguard.New(db, cfg)
	if err != nil {
		t.Fatal(err)
	}
	// The monitor has a pool of its own, so the load cannot starve it.
	mon, err := sql.Open(drv, srv.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer mon.Close()

	var known sync.Map // lockIds returned to a worker
	var cancelled, acquired, locked, other atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			keys := []string{"orphan:a", "orphan:b", "orphan:c"}
			for {
				select {
				case <-stop:
					return
				default:
				}
				actx, cancel := context.WithTimeout(ctx, time.Duration(rand.N(3001))*time.Microsecond)
				r, err := b.Acquire(actx, keys[(w+int(rand.N(3)))%3], 30*time.Second)
				cancel()
				switch {
				case err != nil && (syncguard.CodeOf(err) == syncguard.ErrNetworkTimeout || syncguard.CodeOf(err) == syncguard.ErrAborted):
					cancelled.Add(1)
				case err != nil:
					other.Add(1)
				case !r.OK:
					locked.Add(1)
				default:
					known.Store(r.LockID, true)
					acquired.Add(1)
					rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
					_, _ = b.Release(rctx, r.LockID)
					rcancel()
				}
			}
		})
	}

	type seen struct{ first, last time.Time }
	orphans := map[string]*seen{}
	scan := func() int {
		rows, err := mon.QueryContext(ctx, `SELECT "lock_id", "acquired_at_ms", floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint
FROM "`+cfg.TableName+`" WHERE "expires_at_ms" > floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint - 1000`)
		if err != nil {
			t.Errorf("monitor: %v", err)
			return 0
		}
		defer rows.Close()
		live := 0
		now := time.Now()
		for rows.Next() {
			var id string
			var acq, srvNow int64
			if err := rows.Scan(&id, &acq, &srvNow); err != nil {
				t.Errorf("monitor: %v", err)
				return 0
			}
			if _, ok := known.Load(id); ok || srvNow-acq < 500 {
				continue
			}
			live++
			s := orphans[id]
			if s == nil {
				s = &seen{first: now.Add(-time.Duration(srvNow-acq) * time.Millisecond)}
				orphans[id] = s
			}
			s.last = now
		}
		return live
	}
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		scan()
		time.Sleep(100 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	// The background release has Config.ReleaseTimeout per attempt and a
	// retry schedule of a few seconds; give it 8 s, then nothing may be left.
	var left int
	for end := time.Now().Add(8 * time.Second); time.Now().Before(end); {
		if left = scan(); left == 0 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	var longest time.Duration
	for _, s := range orphans {
		longest = max(longest, s.last.Sub(s.first))
	}
	t.Logf("%s: %v of load: %d acquired, %d locked, %d cancelled, %d other errors; %d orphans seen (older than 500 ms and unknown), longest seen alive %v, %d left",
		drv, d, acquired.Load(), locked.Load(), cancelled.Load(), other.Load(), len(orphans), longest.Round(time.Millisecond), left)
	if left > 0 {
		t.Errorf("rule: a lock taken by an acquire whose caller gave up is released in the background within seconds, not left until its TTL; %d still held 8 s after the load stopped", left)
	}
}
