package itest_test

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/syncguard/syncguard-go/internal/rules"
	"github.com/syncguard/syncguard-go/internal/waiting"
	"github.com/syncguard/syncguard-go/syncguard"
)

// TestForgedNotificationsChangeNothing: a role that can connect but has no
// privilege on the lock tables listens on the channels of the keys being
// waited for, replays every notification it sees several times, sends
// mutated copies and floods the channels with random payloads. Waiters
// still get the key in the order they queued, none starves while others
// take it, and a waiting process's memory stays bounded. (Notifications
// are hints: the queue and the hand-off are rows only the lock tables'
// grantees can write.)
func TestForgedNotificationsChangeNothing(t *testing.T) {
	srv := roleServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	admin := open(t, srv.DSN)
	cfg := &syncguard.Config{TableName: "forge_locks", FenceTableName: "forge_fences"}
	mustExec(ctx, t, admin, `DROP TABLE IF EXISTS forge_locks, forge_fences, forge_locks_waiters, forge_locks_holders`)
	if err := syncguard.SetupSchema(ctx, admin, cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = admin.Exec(`DROP TABLE IF EXISTS forge_locks, forge_fences, forge_locks_waiters, forge_locks_holders`)
	})
	evilDSN := roleWithoutCreate(ctx, t, srv, admin, "sg_evil", "sg-evil-pw")
	var denied int
	if err := admin.QueryRowContext(ctx, `SELECT count(*) FROM unnest(ARRAY['forge_locks','forge_fences','forge_locks_waiters']) AS tb
		WHERE NOT has_table_privilege('sg_evil', tb, 'SELECT,INSERT,UPDATE,DELETE')`).Scan(&denied); err != nil || denied != 3 {
		t.Fatalf("setup: the attacker must have no privilege on the three tables (%d without, %v)", denied, err)
	}

	backend := func() *syncguard.Backend {
		b, err := syncguard.New(open(t, srv.DSN), cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		return b
	}
	channel := func(key string) string {
		norm, _ := rules.NormalizeKey(key)
		storage, _, _ := rules.StorageKeys(norm)
		return waiting.Channel(waiting.Prefix(cfg.TableName), storage)
	}
	queued := func(key string) int {
		norm, _ := rules.NormalizeKey(key)
		storage, _, _ := rules.StorageKeys(norm)
		var n int
		if err := admin.QueryRowContext(ctx, `SELECT count(*) FROM forge_locks_waiters WHERE key = $1 AND ttl_ms <> 0`, storage).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	// The attacker: replays and mutates what it hears, and floods.
	keys := []string{"forge:order", "forge:hot"}
	var replays, floods atomic.Int64
	attack, stopAttack := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { stopAttack(); wg.Wait() }()
	listener, err := pgx.Connect(ctx, evilDSN)
	if err != nil {
		t.Fatal(err)
	}
	sender, err := pgx.Connect(ctx, evilDSN)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if _, err := listener.Exec(ctx, "LISTEN "+pgx.Identifier{channel(k)}.Sanitize()); err != nil {
			t.Fatal(err)
		}
	}
	heard := make(chan *struct{ ch, p string }, 1024)
	wg.Add(2)
	go func() {
		defer wg.Done()
		defer listener.Close(context.Background())
		for {
			n, err := listener.WaitForNotification(attack)
			if err != nil {
				return
			}
			select {
			case heard <- &struct{ ch, p string }{n.Channel, n.Payload}:
			default:
			}
		}
	}()
	go func() {
		defer wg.Done()
		defer sender.Close(context.Background())
		for attack.Err() == nil {
			select {
			case h := <-heard:
				// Replay five times, and a mutated copy.
				mut := []byte(h.p)
				if len(mut) > 0 {
					mut[rand.IntN(len(mut))] ^= 1
				}
				_, err := sender.Exec(attack, `SELECT pg_notify($1, $2) FROM generate_series(1, 5) UNION ALL SELECT pg_notify($1, $3)`, h.ch, h.p, string(mut))
				if err == nil {
					replays.Add(1)
				}
			default:
				// Flood every channel with random payloads.
				for _, k := range keys {
					if _, err := sender.Exec(attack, `SELECT pg_notify($1, md5(random()::text)) FROM generate_series(1, 200)`, channel(k)); err == nil {
						floods.Add(200)
					}
				}
			}
		}
	}()

	// 1. Order: four processes queue one after the other; the key goes to
	// them in that order, every round.
	wait := &syncguard.LockOptions{TTL: 30 * time.Second, Acquisition: syncguard.AcquisitionOptions{Timeout: 60 * time.Second}}
	holder := backend()
	waiters := []*syncguard.Backend{backend(), backend(), backend(), backend()}
	for round := range 3 {
		k := keys[0]
		held, err := syncguard.Lock(ctx, holder, k, wait)
		if err != nil {
			t.Fatal(err)
		}
		type got struct {
			i     int
			fence syncguard.Fence
			err   error
		}
		out := make(chan got, len(waiters))
		for i, b := range waiters {
			go func() {
				l, err := syncguard.Lock(ctx, b, k, wait)
				if err != nil {
					out <- got{i, "", err}
					return
				}
				out <- got{i, l.Fence(), nil}
				l.Close()
			}()
			for queued(k) != i+1 {
				time.Sleep(2 * time.Millisecond)
			}
		}
		held.Close()
		fences := make([]syncguard.Fence, len(waiters))
		for range waiters {
			g := <-out
			if g.err != nil {
				t.Fatalf("rule: under forged notifications every waiter still gets the key; waiter %d: %v", g.i+1, g.err)
			}
			fences[g.i] = g.fence
		}
		if !slices.IsSorted(fences) {
			t.Fatalf("rule: forged notifications cannot reorder the queue; round %d, fences of waiters 1..4 in queue order: %v", round+1, fences)
		}
	}

	// 2. No starvation: three processes, two workers each, take a hot key
	// in turn; every worker gets it, none times out.
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	counts := make([]atomic.Int64, 6)
	var timeouts atomic.Int64
	busy, stop := context.WithTimeout(ctx, 4*time.Second)
	defer stop()
	var workers sync.WaitGroup
	for p, b := range waiters[:3] {
		for w := range 2 {
			workers.Add(1)
			go func() {
				defer workers.Done()
				for busy.Err() == nil {
					err := syncguard.WithLock(ctx, b, keys[1], func(context.Context, *syncguard.Lease) error {
						time.Sleep(5 * time.Millisecond)
						return nil
					}, &syncguard.LockOptions{TTL: 10 * time.Second, Acquisition: syncguard.AcquisitionOptions{Timeout: 30 * time.Second}})
					if err != nil {
						timeouts.Add(1)
						return
					}
					counts[p*2+w].Add(1)
				}
			}()
		}
	}
	workers.Wait()
	var total int64
	per := make([]int64, len(counts))
	for i := range counts {
		per[i] = counts[i].Load()
		total += per[i]
	}
	t.Logf("under attack (%d replays, %d flood notifications): acquisitions per worker %v", replays.Load(), floods.Load(), per)
	if timeouts.Load() != 0 {
		t.Errorf("rule: forged notifications starve no waiter; %d waits failed", timeouts.Load())
	}
	for i, n := range per {
		if n*4*int64(len(per)) < total {
			t.Errorf("rule: the queue shares a hot key among its waiters under attack; worker %d got %d of %d acquisitions (%v)", i+1, n, total, per)
		}
	}
	if replays.Load() == 0 || floods.Load() == 0 {
		t.Errorf("setup: the attacker must have heard and replayed notifications (%d) and flooded (%d)", replays.Load(), floods.Load())
	}

	// 3. Memory: the flood kept nothing in the waiting processes.
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew > 32<<20 {
		t.Errorf("rule: forged notifications keep a bounded amount of memory in a waiting process; the heap grew by %d MB during %d forged notifications", grew>>20, floods.Load())
	}
	_ = fmt.Sprint
	_ = (*sql.DB)(nil)
}
