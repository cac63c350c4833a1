package conformance

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/syncguard/syncguard-go/syncguard"
)

func init() {
	register("MutualExclusion/UnguardedCounterExact", func(e *env) {
		// The counter is read, the goroutine sleeps, then writes: without
		// mutual exclusion increments get lost. (It is an atomic only so that
		// the race detector, which cannot see a lock held in PostgreSQL, stays
		// quiet; the read-modify-write itself is unguarded.)
		const workers = 8
		perWorker := e.slow().rounds(20, 6) // fewer on a slow machine
		k := e.key("counter")
		var (
			counter, inside atomic.Int64
			fencesMu        sync.Mutex
			fences          []syncguard.Fence
			attempts        atomic.Int64
		)
		e.parallel(workers, func(_ int, b syncguard.LockBackend) {
			for i := 0; i < perWorker; i++ {
				var r syncguard.AcquireResult
				for {
					var err error
					attempts.Add(1)
					r, err = b.Acquire(e.ctx, k, 30*time.Second)
					if err != nil {
						e.t.Errorf("rule: acquire under contention never errors; %v", err)
						return
					}
					if r.OK {
						break
					}
					time.Sleep(time.Duration(200+rand.IntN(1000)) * time.Microsecond)
				}
				if n := inside.Add(1); n != 1 {
					e.t.Errorf("rule: at most one holder is inside the critical section; %d inside, fence %s", n, r.Fence)
				}
				fencesMu.Lock()
				fences = append(fences, r.Fence)
				fencesMu.Unlock()
				v := counter.Load()
				time.Sleep(time.Millisecond)
				counter.Store(v + 1)
				inside.Add(-1)
				if rel, err := b.Release(e.ctx, r.LockID); err != nil || !rel.OK {
					e.t.Errorf("rule: the holder's release succeeds; got %+v, %v", rel, err)
					return
				}
			}
		})
		if got := counter.Load(); got != int64(workers*perWorker) {
			e.t.Errorf("rule: a lock gives mutual exclusion; %d workers x %d guarded increments left the counter at %d, want %d", workers, perWorker, got, workers*perWorker)
		}
		for i := 1; i < len(fences); i++ {
			if fences[i] <= fences[i-1] {
				e.t.Errorf("rule: fences increase in the order holders enter; entry %d got %s after %s", i, fences[i], fences[i-1])
			}
		}
		e.t.Logf("%d acquire attempts for %d critical sections", attempts.Load(), workers*perWorker)
	})

	register("MutualExclusion/TightAcquireReleaseLeavesNothingHeld", func(e *env) {
		const workers, nKeys = 6, 3
		iterations := e.slow().rounds(40, 12)
		keys := make([]string, nKeys)
		for i := range keys {
			keys[i] = e.key(fmt.Sprintf("tight%d", i))
		}
		var wins atomic.Int64
		e.parallel(workers, func(w int, b syncguard.LockBackend) {
			for i := 0; i < iterations; i++ {
				k := keys[(w+i)%nKeys]
				r, err := b.Acquire(e.ctx, k, 30*time.Second)
				if err != nil {
					e.t.Errorf("rule: acquire never errors; %v", err)
					return
				}
				if !r.OK {
					continue
				}
				wins.Add(1)
				if rel, err := b.Release(e.ctx, r.LockID); err != nil || !rel.OK {
					e.t.Errorf("rule: a release right after a successful acquire succeeds; key %q got %+v, %v", k, rel, err)
				}
			}
		})
		for _, k := range keys {
			if e.isLocked(e.b, k) {
				e.t.Errorf("rule: after every acquire was released, no key is held; IsLocked(%q) = true", k)
			}
		}
		if n, ok := e.count(); ok && n != 0 {
			e.t.Errorf("rule: release deletes the lock record; %d left after %d acquire/release pairs", n, wins.Load())
		}
		if wins.Load() == 0 {
			e.t.Errorf("rule: free keys can be acquired; no acquire succeeded in %d attempts", workers*iterations)
		}
	})
}
