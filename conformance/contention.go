package conformance

import (
	"time"

	"github.com/syncguard/syncguard-go/syncguard"
)

func init() {
	register("Contention/HeldKeyReturnsLockedAndStaysHeld", func(e *env) {
		k, r := e.hold("held", 30*time.Second)
		same := e.unchanged(k)
		for _, b := range e.backends() {
			c := e.acquire(b, k, 30*time.Second)
			if c.OK || c.Reason != syncguard.ReasonLocked {
				e.t.Errorf("rule: acquiring a held key returns OK=false reason %q; key %q got %+v", syncguard.ReasonLocked, k, c)
			}
			if c.LockID != "" || c.Fence != "" {
				e.t.Errorf("rule: a contended acquire hands out no lockId and no fence; got lockId %q fence %q", c.LockID, c.Fence)
			}
		}
		if !e.isLocked(e.b2, k) {
			e.t.Errorf("rule: a contended acquire leaves the key held; IsLocked(%q) = false", k)
		}
		info, err := e.b2.LookupKey(e.ctx, k)
		e.must(err, "LookupKey")
		if info == nil || info.LockIDHash != syncguard.HashKey(r.LockID) || info.Fence != r.Fence || !info.ExpiresAt.Equal(r.ExpiresAt) {
			e.t.Errorf("rule: a contended acquire leaves the holder's lock unchanged; holder fence %s expires %d, lookup %+v", r.Fence, ms(r.ExpiresAt), info)
		}
		same("a contended acquire changes nothing of the holder's lock")
		if rel := e.release(e.b, r.LockID); !rel.OK {
			e.t.Errorf("rule: the holder's release succeeds; got %+v", rel)
		}
		if e.isLocked(e.b2, k) {
			e.t.Errorf("rule: a released key is free; IsLocked(%q) = true", k)
		}
		e.nextFenceAbove(k, r.Fence, "the next holder gets a greater fence")
	})

	register("Contention/ReacquireAfterRelease", func(e *env) {
		k := e.key("reacquire")
		var last syncguard.Fence
		ids := map[string]bool{}
		for i := 0; i < 5; i++ {
			b := e.pick(i)
			r := e.mustAcquire(b, k, 30*time.Second)
			if r.Fence <= last {
				e.t.Errorf("rule: each re-acquire gets a greater fence; round %d got %s after %s", i, r.Fence, last)
			}
			if ids[r.LockID] {
				e.t.Errorf("rule: a lockId is never reused; round %d got %q again", i, r.LockID)
			}
			ids[r.LockID], last = true, r.Fence
			if rel := e.release(b, r.LockID); !rel.OK {
				e.t.Errorf("rule: the holder's release succeeds; round %d got %+v", i, rel)
			}
		}
	})
}
