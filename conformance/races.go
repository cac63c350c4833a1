package conformance

import (
	"database/sql"
	"sort"
	"sync"
	"time"

	"github.com/syncguard/syncguard-go/syncguard"
)

func init() {
	register("Races/OneWinnerPerRoundAcrossPools", func(e *env) {
		const goroutines, rounds, pools = 50, 8, 4
		backends := make([]*syncguard.Backend, pools)
		for i := range backends {
			db := e.h.Open(e.t)
			db.SetMaxOpenConns(goroutines / pools)
			backends[i] = e.newBackend(db, nil)
		}
		var fences []int64
		for round := 0; round < rounds; round++ {
			k := e.key("race")
			var (
				mu      sync.Mutex
				winners []syncguard.AcquireResult
				wg      sync.WaitGroup
				start   = make(chan struct{})
			)
			for g := 0; g < goroutines; g++ {
				wg.Add(1)
				go func(b *syncguard.Backend) {
					defer wg.Done()
					<-start
					r, err := b.Acquire(e.ctx, k, 30*time.Second)
					if err != nil {
						e.t.Errorf("rule: contention is a result, not an error; acquire failed: %v", err)
						return
					}
					if r.OK {
						mu.Lock()
						winners = append(winners, r)
						mu.Unlock()
					}
				}(backends[g%pools])
			}
			close(start)
			wg.Wait()
			if len(winners) != 1 {
				e.t.Errorf("rule: exactly one of %d racing acquires of a free key wins; round %d key %q had %d winners", goroutines, round, k, len(winners))
				continue
			}
			if n := fenceNum(e.t, winners[0].Fence); n != 1 {
				e.t.Errorf("rule: the first fence of a key is 000000000000001; round %d got %s", round, winners[0].Fence)
			}
			fences = append(fences, fenceNum(e.t, winners[0].Fence))
		}
		_ = fences
	})

	register("Races/FencesUniqueAndIncreasingUnderContention", func(e *env) {
		// Many goroutines over two pools acquire and release one key many
		// times. Every win's fence must be unique, and fences must increase
		// in the order the wins happened (each win starts after the previous
		// holder released).
		const workers, wins = 8, 120
		k := e.key("hot")
		var (
			mu     sync.Mutex
			order  []int64
			wg     sync.WaitGroup
			total  int
			failed bool
		)
		for w := 0; w < workers; w++ {
			wg.Add(1)
			b := e.b
			if w%2 == 1 {
				b = e.b2
			}
			go func() {
				defer wg.Done()
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
			}()
		}
		wg.Wait()
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

var _ *sql.DB
