package conformance

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/syncguard/syncguard-go/syncguard"
)

func init() {
	register("Races/OneWinnerPerRoundAcrossPools", func(e *env) {
		// The race is as wide on a slow machine, repeated fewer times.
		const goroutines = 50
		rounds := e.slow().rounds(8, 3)
		if rounds < 8 {
			e.t.Logf("%d rounds instead of 8: %s", rounds, e.slow())
		}
		backends := e.backends()
		// race lets every goroutine try k at once and returns the one winner.
		race := func(round int, k string) (syncguard.AcquireResult, bool) {
			winners := e.race(backends, goroutines, k, "contention is a result, not an error")
			if len(winners) != 1 {
				e.t.Errorf("rule: exactly one of %d racing acquires of a free key wins; round %d key %q had %d winners", goroutines, round, k, len(winners))
				return syncguard.AcquireResult{}, false
			}
			return winners[0], true
		}
		for round := 0; round < rounds; round++ {
			// A fresh key has no fence counter yet: the absent-row race.
			k := e.key("race")
			first, ok := race(round, k)
			if !ok {
				continue
			}
			if n := fenceNum(e.t, first.Fence); n != 1 {
				e.t.Errorf("rule: the first fence of a key is 000000000000001; key %q got %s", k, first.Fence)
			}
			if rel, err := e.b.Release(e.ctx, first.LockID); err != nil || !rel.OK {
				e.t.Fatalf("rule: the round's winner can release; key %q: %+v, %v", k, rel, err)
			}
			// The same key right after the release: the next fence is larger.
			second, ok := race(round, k)
			if !ok {
				continue
			}
			if fenceNum(e.t, second.Fence) <= fenceNum(e.t, first.Fence) {
				e.t.Errorf("rule: fences strictly increase per key; key %q got %s after %s", k, second.Fence, first.Fence)
			}
		}
	})

	register("Races/FencesUniqueAndIncreasingUnderContention", func(e *env) {
		// Many goroutines over two pools acquire and release one key many
		// times. Every win's fence must be unique, and fences must increase
		// in the order the wins happened (each win starts after the previous
		// holder released).
		const workers = 8
		wins := e.slow().rounds(120, 40)
		k := e.key("hot")
		var (
			mu     sync.Mutex
			order  []int64
			total  int
			failed bool
		)
		e.parallel(workers, func(_ int, b syncguard.LockBackend) {
			for e.ctx.Err() == nil {
				mu.Lock()
				done := total >= wins || failed
				mu.Unlock()
				if done {
					return
				}
				r, err := b.Acquire(e.ctx, k, 30*time.Second)
				if err != nil {
					e.t.Errorf("rule: acquire under contention never errors; got %v", err)
					mu.Lock()
					failed = true
					mu.Unlock()
					return
				}
				if !r.OK {
					continue
				}
				n := fenceNum(e.t, r.Fence)
				mu.Lock()
				order = append(order, n)
				total++
				mu.Unlock()
				if rel, err := b.Release(e.ctx, r.LockID); err != nil || !rel.OK {
					e.t.Errorf("rule: the holder's release succeeds; got %+v, %v", rel, err)
				}
			}
		})
		for i := 1; i < len(order); i++ {
			if order[i] <= order[i-1] {
				e.t.Errorf("rule: fences strictly increase in acquisition order; win %d got %d after %d", i, order[i], order[i-1])
			}
		}
		sorted := append([]int64(nil), order...)
		sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
		for i := 1; i < len(sorted); i++ {
			if sorted[i] == sorted[i-1] {
				e.t.Errorf("rule: fences are unique per key; %d handed out twice", sorted[i])
			}
		}
	})
}

func init() {
	register("Races/AcquireRacingExtendNearExpiry", func(e *env) {
		// Holders extend a short lock right around the end of its tolerance
		// window while contenders try to take it at that moment. Whatever the
		// interleaving, no two holders may be told they hold the key at the
		// same server time: a holding runs from its acquire (ExpiresAt - ttl)
		// to its last confirmed expiry, and the lock stays exclusive for the
		// 1000 ms tolerance after that.
		const (
			ttl       = 100 * time.Millisecond
			nKeys     = 3
			nWorkers  = 3 // per key
			nHoldings = 3 // per key
		)
		type holding struct {
			worker     int
			start, end int64
			fence      syncguard.Fence
			extends    []int64
		}
		clock := e.serverClock()
		budget := time.Now().Add(e.slow().scale(18 * time.Second))
		var outer sync.WaitGroup
		for ki := 0; ki < nKeys; ki++ {
			outer.Add(1)
			go func() {
				defer outer.Done()
				k := e.key(fmt.Sprintf("extendrace%d", ki))
				var (
					mu sync.Mutex
					hs []holding
					wg sync.WaitGroup
				)
				enough := func() bool {
					mu.Lock()
					defer mu.Unlock()
					return len(hs) >= nHoldings || time.Now().After(budget) || e.ctx.Err() != nil
				}
				for w := 0; w < nWorkers; w++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						b := e.pick(w + ki)
						for !enough() {
							r, err := b.Acquire(e.ctx, k, ttl)
							if err != nil {
								e.t.Errorf("rule: acquire under contention never errors; key %q: %v", k, err)
								return
							}
							if !r.OK {
								info, err := b.LookupKey(e.ctx, k)
								if err != nil {
									e.t.Errorf("rule: LookupKey never errors; key %q: %v", k, err)
									return
								}
								if info != nil {
									// Come back just before the holder's tolerance window ends.
									clock.sleepUntil(e.ctx, ms(info.ExpiresAt)+tolMs-30-int64(rand.IntN(20)))
								}
								time.Sleep(time.Duration(500+rand.IntN(1500)) * time.Microsecond)
								continue
							}
							h := holding{worker: w, start: ms(r.ExpiresAt) - ttlMs(ttl), end: ms(r.ExpiresAt), fence: r.Fence}
							for i, n := 0, rand.IntN(3); i < n; i++ {
								// Extend just before or just after the window closes.
								clock.sleepUntil(e.ctx, h.end+tolMs-40+int64(rand.IntN(60)))
								x, err := b.Extend(e.ctx, r.LockID, ttl)
								if err != nil {
									e.t.Errorf("rule: extend never errors; key %q: %v", k, err)
									break
								}
								if !x.OK {
									break
								}
								at := ms(x.ExpiresAt) - ttlMs(ttl)
								if at >= h.end+tolMs {
									e.t.Errorf("rule: extend never revives an expired lock; key %q extended at server time %d, but it expired at %d (+%d ms tolerance)", k, at, h.end, tolMs)
								}
								h.end = ms(x.ExpiresAt)
								h.extends = append(h.extends, h.end)
							}
							mu.Lock()
							hs = append(hs, h)
							mu.Unlock()
						}
					}()
				}
				wg.Wait()
				sort.Slice(hs, func(i, j int) bool { return hs[i].start < hs[j].start })
				for j := 1; j < len(hs); j++ {
					for i := 0; i < j; i++ {
						if hs[j].start < hs[i].end+tolMs {
							e.t.Errorf("rule: a lock is exclusive until its last confirmed expiry + %d ms; key %q: worker %d held [%d, %d] (extends %v), worker %d acquired at server time %d, %d ms early",
								tolMs, k, hs[i].worker, hs[i].start, hs[i].end, hs[i].extends, hs[j].worker, hs[j].start, hs[i].end+tolMs-hs[j].start)
						}
					}
					if hs[j].fence <= hs[j-1].fence {
						e.t.Errorf("rule: fences increase with acquisition time; key %q: %s at %d after %s at %d", k, hs[j].fence, hs[j].start, hs[j-1].fence, hs[j-1].start)
					}
				}
				e.t.Logf("key %q: holdings (worker, start, last confirmed expiry, extends): %v", k, hs)
			}()
		}
		outer.Wait()
	})

	register("Races/ReleaseRacingAcquireNeverDeletesNewHolder", func(e *env) {
		// Part 1: the holder releases a live lock while contenders spin on it.
		k := e.key("relacq")
		for round := range e.slow().rounds(10, 4) {
			old := e.mustAcquire(e.b, k, 30*time.Second)
			var (
				wg      sync.WaitGroup
				mu      sync.Mutex
				winners []syncguard.AcquireResult
				stop    atomic.Bool
			)
			deadline := time.Now().Add(e.slow().scale(5 * time.Second))
			for c := 0; c < 3; c++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					b := e.pick(c + 1)
					for !stop.Load() && time.Now().Before(deadline) {
						r, err := b.Acquire(e.ctx, k, 30*time.Second)
						if err != nil {
							e.t.Errorf("rule: acquire under contention never errors; %v", err)
							return
						}
						if r.OK {
							mu.Lock()
							winners = append(winners, r)
							mu.Unlock()
							stop.Store(true)
							return
						}
						time.Sleep(time.Duration(rand.IntN(1000)) * time.Microsecond)
					}
				}()
			}
			time.Sleep(time.Duration(rand.IntN(3000)) * time.Microsecond)
			if rel := e.release(e.b, old.LockID); !rel.OK {
				e.t.Errorf("rule: the holder's release of a live lock succeeds; round %d got %+v", round, rel)
			}
			wg.Wait()
			if len(winners) != 1 {
				e.t.Fatalf("rule: after a release exactly one of the spinning contenders takes the key; round %d had %d winners", round, len(winners))
			}
			w := winners[0]
			if snap := e.snapshot(k); !strings.Contains(snap, syncguard.HashKey(w.LockID)) {
				e.t.Errorf("rule: a release racing an acquire never deletes the new holder's lock; round %d new holder lock#%s, lock now %s", round, syncguard.HashKey(w.LockID), snap)
			}
			if rel := e.release(e.b2, w.LockID); !rel.OK {
				e.t.Errorf("rule: the new holder's release succeeds; round %d got %+v", round, rel)
			}
		}

		// Part 2: the old holder releases right as its lock's tolerance
		// window ends, while a contender takes the key at that moment.
		const n = 6
		clock := e.serverClock()
		olds := make([]syncguard.AcquireResult, n)
		keys := make([]string, n)
		for i := range keys {
			keys[i] = e.key(fmt.Sprintf("relexp%d", i))
			olds[i] = e.mustAcquire(e.b, keys[i], 100*time.Millisecond)
		}
		var wg sync.WaitGroup
		news := make([]syncguard.AcquireResult, n)
		rels := make([]syncguard.ReleaseResult, n)
		for i := range keys {
			boundary := ms(olds[i].ExpiresAt) + tolMs
			wg.Add(2)
			go func() {
				defer wg.Done()
				clock.sleepUntil(e.ctx, boundary-20+int64(rand.IntN(40)))
				rel, err := e.b.Release(e.ctx, olds[i].LockID)
				if err != nil {
					e.t.Errorf("rule: release never errors; %v", err)
				}
				rels[i] = rel
			}()
			go func() {
				defer wg.Done()
				clock.sleepUntil(e.ctx, boundary-20)
				deadline := time.Now().Add(e.slow().scale(5 * time.Second))
				for time.Now().Before(deadline) {
					r, err := e.b2.Acquire(e.ctx, keys[i], 30*time.Second)
					if err != nil {
						e.t.Errorf("rule: acquire never errors; %v", err)
						return
					}
					if r.OK {
						news[i] = r
						return
					}
					time.Sleep(time.Millisecond)
				}
			}()
		}
		wg.Wait()
		for i := range keys {
			if !news[i].OK {
				e.t.Errorf("rule: a key whose lock expired can be taken; key %q not taken within %v of its expiry + tolerance (%s)", keys[i], e.slow().scale(5*time.Second), e.slow())
				continue
			}
			if snap := e.snapshot(keys[i]); !strings.Contains(snap, syncguard.HashKey(news[i].LockID)) {
				e.t.Errorf("rule: a release racing an acquire never deletes the new holder's lock; key %q old expiry %d, old holder's release %+v, new holder lock#%s acquired at %d, lock now %s",
					keys[i], ms(olds[i].ExpiresAt), rels[i], syncguard.HashKey(news[i].LockID), ms(news[i].ExpiresAt)-30000, snap)
			}
		}
	})

	registerSQL("Races/ReleaseRacingTransactionalTakeoverNeverChangesIt", func(e *sqlEnv) {
		// Deterministic: the takeover of an expired lock is held open
		// in a transaction while the old holder releases and extends; then it
		// commits. The old lockId must touch nothing of the new holding.
		for _, op := range []string{"release", "extend"} {
			k := e.key("takeovertx" + op)
			old := e.mustAcquire(e.b, k, 100*time.Millisecond)
			e.waitPast(ms(old.ExpiresAt) + tolMs)
			tx := e.begin(e.db)
			nw, err := e.pb.WithTx(tx).Acquire(e.ctx, k, 30*time.Second)
			if err != nil || !nw.OK {
				e.t.Fatalf("rule: an expired lock can be taken over (inside a transaction too); got %+v, %v", nw, err)
			}
			type res struct {
				ok     bool
				reason string
				err    error
			}
			ch := make(chan res, 1)
			go func() {
				if op == "release" {
					r, err := e.b2.Release(e.ctx, old.LockID)
					ch <- res{r.OK, r.Reason, err}
				} else {
					r, err := e.b2.Extend(e.ctx, old.LockID, time.Hour)
					ch <- res{r.OK, r.Reason, err}
				}
			}()
			var got res
			select {
			case got = <-ch:
				e.must(tx.Commit(), "commit")
			case <-time.After(300 * time.Millisecond):
				// The old holder's statement waits on the new row: commit.
				e.must(tx.Commit(), "commit")
				got = <-ch
			}
			if got.err != nil || got.ok {
				e.t.Errorf("rule: the old holder's %s racing a takeover of its expired lock fails; got ok=%v reason=%q err=%v", op, got.ok, got.reason, got.err)
			}
			row, ok := e.rawLockRow(k)
			if !ok || row.LockID != nw.LockID || row.ExpiresAt != ms(nw.ExpiresAt) {
				e.t.Errorf("rule: a %s by the old holder racing a takeover never deletes or changes the new holder's lock; new holder %s (expires %d), row now %+v (present %v)",
					op, syncguard.HashKey(nw.LockID), ms(nw.ExpiresAt), row, ok)
			}
		}
	})

	registerSQL("Races/StampedNoEarlierThanTheReleaseItFollows", func(e *sqlEnv) {
		// Deterministic: an acquire that arrives while its key is held is
		// kept from running (a table lock on the fence table, which every
		// acquire plans with) until the holder's row is gone. It then sees
		// the key free: its lock must be stamped (acquired_at, and the
		// expiry computed from it) by the server's clock after the release
		// committed, not when the statement arrived. (An election's term,
		// Leader.Since, is this stamp.)
		k := e.key("stamp")
		old := e.mustAcquire(e.b, k, 30*time.Second)
		tx := e.begin(e.db2)
		e.txExec(tx, `LOCK TABLE `+e.fencesTable()+` IN ACCESS EXCLUSIVE MODE`)
		type res struct {
			r   syncguard.AcquireResult
			err error
		}
		ch := make(chan res, 1)
		returned := make(chan struct{})
		go func() {
			defer close(returned)
			r, err := e.pb.Acquire(e.ctx, k, 30*time.Second)
			ch <- res{r, err}
		}()
		// (Sent unprepared, the acquire is a call of its statement
		// function, named after the table: matched by the table's name.)
		if e.waitLockWaiter(e.cfg.TableName, returned) == 0 {
			_ = tx.Rollback()
			e.t.Fatalf("setup: the acquire did not wait for the table lock (returned: %+v)", <-ch)
		}
		e.waitPast(e.nowMs() + 20) // the gap a stamp taken at arrival would show
		released := e.nowMs()
		e.exec(`DELETE FROM `+e.locksTable()+` WHERE "lock_id" = $1`, old.LockID)
		e.must(tx.Commit(), "commit")
		got := <-ch
		if got.err == nil && !got.r.OK && e.isolation() != "read committed" {
			// Under a REPEATABLE READ or SERIALIZABLE default, an already
			// prepared statement takes its snapshot when bound, before it
			// waits for the table lock: it saw the key held, and the stamp
			// rule is not reached.
			e.t.Logf("default isolation %s: the acquire's snapshot predates the release (locked)", e.isolation())
			return
		}
		if got.err != nil || !got.r.OK {
			e.t.Fatalf("rule: an acquire that finds the key released takes it; got %+v, %v", got.r, got.err)
		}
		info, err := e.b.LookupKey(e.ctx, k)
		e.must(err, "LookupKey")
		if info == nil || ms(info.AcquiredAt) < released || ms(got.r.ExpiresAt)-30_000 < released {
			e.t.Errorf("rule: a lock is stamped by the server's clock no earlier than the release it follows (released after %d); got acquired %+v, expires %d",
				released, info, ms(got.r.ExpiresAt))
		}
	})
}

// isolation is the default transaction isolation of the pool's sessions.
func (e *sqlEnv) isolation() string {
	var level string
	e.must(e.db.QueryRowContext(e.ctx, `SELECT current_setting('transaction_isolation')`).Scan(&level), "reading the isolation level")
	return level
}
