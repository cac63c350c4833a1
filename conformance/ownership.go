package conformance

import (
	"strings"
	"sync"
	"time"

	"github.com/syncguard/syncguard-go/internal/rules"
	"github.com/syncguard/syncguard-go/syncguard"
)

func init() {
	register("Ownership/FakeLockIDChangesNothing", func(e *env) {
		k, other := e.key("owned"), e.key("bystander")
		r := e.mustAcquire(e.b, k, 30*time.Second)
		ro := e.mustAcquire(e.b, other, 30*time.Second)
		same := e.unchanged(k)
		fake := rules.GenerateLockID()
		if rel := e.release(e.b2, fake); rel.OK || rel.Reason != syncguard.ReasonNotFound {
			e.t.Errorf("rule: a lockId that never held the key cannot release it; got %+v", rel)
		}
		if ext := e.extend(e.b2, fake, time.Hour); ext.OK || ext.Reason != syncguard.ReasonNotFound {
			e.t.Errorf("rule: a lockId that never held the key cannot extend it; got %+v", ext)
		}
		// The holder of another key is no owner of this one either.
		if ext := e.extend(e.b2, ro.LockID, time.Hour); !ext.OK {
			e.t.Errorf("rule: the holder's extend succeeds; got %+v", ext)
		}
		same("release and extend by a non-owner change nothing")
		if rel := e.release(e.b, r.LockID); !rel.OK {
			e.t.Errorf("rule: the real holder's release still succeeds; got %+v", rel)
		}
	})

	register("Ownership/StaleLockIDAfterReleaseChangesNothing", func(e *env) {
		k, old := e.hold("stale", 30*time.Second)
		e.release(e.b, old.LockID)
		cur := e.mustAcquire(e.b2, k, 30*time.Second)
		before := e.snapshot(k)
		if rel := e.release(e.b, old.LockID); rel.OK || rel.Reason != syncguard.ReasonNotFound {
			e.t.Errorf("rule: a released lockId cannot release the key's next holding; got %+v", rel)
		}
		if ext := e.extend(e.b, old.LockID, time.Hour); ext.OK {
			e.t.Errorf("rule: a released lockId cannot extend the key's next holding; got %+v", ext)
		}
		if info, _ := e.b.LookupID(e.ctx, old.LockID); info != nil {
			e.t.Errorf("rule: LookupID of a released lockId is nil even while the key is held again; got %+v", info)
		}
		if after := e.snapshot(k); after != before || !strings.Contains(after, syncguard.HashKey(cur.LockID)) {
			e.t.Errorf("rule: a stale lockId changes nothing; lock before %s after %s, holder lock#%s", before, after, syncguard.HashKey(cur.LockID))
		}
		e.release(e.b2, cur.LockID)
	})

	register("Ownership/ConcurrentReleasesAtMostOneSucceeds", func(e *env) {
		for round := 0; round < 5; round++ {
			k, r := e.hold("manyreleases", 30*time.Second)
			const n = 16
			var (
				wg      sync.WaitGroup
				mu      sync.Mutex
				oks     int
				reasons = map[string]int{}
				start   = make(chan struct{})
			)
			for i := 0; i < n; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					b := e.pick(i)
					<-start
					rel, err := b.Release(e.ctx, r.LockID)
					if err != nil {
						e.t.Errorf("rule: a release of a well-formed lockId never errors under concurrency; got %v", err)
						return
					}
					mu.Lock()
					defer mu.Unlock()
					if rel.OK {
						oks++
					} else {
						reasons[rel.Reason]++
					}
				}()
			}
			close(start)
			wg.Wait()
			if oks != 1 {
				e.t.Errorf("rule: of %d concurrent releases of one live lock exactly one succeeds; round %d: %d succeeded, failures by reason %v", n, round, oks, reasons)
			}
			if e.isLocked(e.b, k) {
				e.t.Errorf("rule: a released key is free; round %d IsLocked(%q) = true", round, k)
			}
		}
	})

	register("Ownership/StaleLockIDAfterExpiryAndTakeover", func(e *env) {
		k, old := e.hold("takeover", 150*time.Millisecond)
		e.waitPast(ms(old.ExpiresAt) + tolMs)
		cur := e.mustAcquire(e.b2, k, 30*time.Second)
		before := e.snapshot(k)
		rel := e.release(e.b, old.LockID)
		ext := e.extend(e.b, old.LockID, time.Hour)
		if rel.OK || ext.OK {
			e.t.Errorf("rule: the lockId of an expired holding cannot release or extend the new holder's lock; release %+v, extend %+v", rel, ext)
		}
		if after := e.snapshot(k); after != before {
			e.t.Errorf("rule: a stale lockId after expiry and takeover changes nothing; lock before %s after %s, new holder fence %s", before, after, cur.Fence)
		}
		if info, _ := e.b.LookupKey(e.ctx, k); info == nil || info.LockIDHash != syncguard.HashKey(cur.LockID) {
			e.t.Errorf("rule: the new holder keeps the key; lookup %+v", info)
		}
		e.release(e.b2, cur.LockID)
	})
}
