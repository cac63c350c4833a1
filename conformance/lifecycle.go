package conformance

import (
	"time"

	"github.com/syncguard/syncguard-go/syncguard"
)

func init() {
	register("Lifecycle/AcquireIsLockedLookupRelease", func(e *env) {
		k := e.key("life")
		r := e.mustAcquire(e.b, k, 10*time.Second)
		if len(r.LockID) != 22 || syncguard.ValidateLockID(r.LockID) != nil {
			e.t.Errorf("rule: lockIds are 22 base64url characters; got %q", r.LockID)
		}
		if len(r.Fence) != 15 {
			e.t.Errorf("rule: fences are 15 digits; got %q", r.Fence)
		}
		if !e.isLocked(e.b2, k) {
			e.t.Errorf("rule: an acquired key is locked for every pool; IsLocked(%q) = false on the second pool", k)
		}
		info, err := e.b2.LookupKey(e.ctx, k)
		e.must(err, "LookupKey")
		if info == nil || info.Fence != r.Fence || !info.ExpiresAt.Equal(r.ExpiresAt) {
			e.t.Errorf("rule: LookupKey returns the acquire's fence and expiry; acquire fence %s expires %v, lookup %+v", r.Fence, r.ExpiresAt, info)
		}
		info, err = e.b2.LookupID(e.ctx, r.LockID)
		e.must(err, "LookupID")
		if info == nil || info.Fence != r.Fence {
			e.t.Errorf("rule: LookupID finds a live lock by its lockId; got %+v", info)
		}
		if rel := e.release(e.b, r.LockID); !rel.OK {
			e.t.Errorf("rule: the holder's release succeeds; got %+v", rel)
		}
		if e.isLocked(e.b2, k) {
			e.t.Errorf("rule: a released key is free; IsLocked(%q) = true after release", k)
		}
	})

	register("Lifecycle/DoubleReleaseTrueThenFalse", func(e *env) {
		r := e.mustAcquire(e.b, e.key("double"), 10*time.Second)
		first, second := e.release(e.b, r.LockID), e.release(e.b2, r.LockID)
		if !first.OK || second.OK {
			e.t.Errorf("rule: releasing twice gives true then false; got %v then %v", first.OK, second.OK)
		}
		if second.Reason != syncguard.ReasonNotFound {
			e.t.Errorf("rule: a second release reports reason %q; got %q", syncguard.ReasonNotFound, second.Reason)
		}
	})
}
