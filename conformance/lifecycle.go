package conformance

import (
	"fmt"
	"sync"
	"time"

	"github.com/syncguard/syncguard-go/internal/rules"
	"github.com/syncguard/syncguard-go/syncguard"
)

func init() {
	register("Lifecycle/AcquireIsLockedLookupRelease", func(e *env) {
		k, r := e.hold("life", 10*time.Second)
		if len(r.LockID) != 22 || rules.ValidateLockID(r.LockID) != nil {
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

func init() {
	register("Lifecycle/UnknownLockIDReleaseExtendNotFound", func(e *env) {
		id := rules.GenerateLockID()
		if rel := e.release(e.b, id); rel.OK || rel.Reason != syncguard.ReasonNotFound {
			e.t.Errorf("rule: release of a well-formed unknown lockId returns OK=false reason %q; got %+v", syncguard.ReasonNotFound, rel)
		}
		if ext := e.extend(e.b, id, time.Second); ext.OK || ext.Reason != syncguard.ReasonNotFound {
			e.t.Errorf("rule: extend of a well-formed unknown lockId returns OK=false reason %q; got %+v", syncguard.ReasonNotFound, ext)
		}
		info, err := e.b.LookupID(e.ctx, id)
		e.must(err, "LookupID of an unknown lockId")
		if info != nil {
			e.t.Errorf("rule: LookupID of an unknown lockId is nil; got %+v", info)
		}
		if n, ok := e.count(); ok && n != 0 {
			e.t.Errorf("rule: release and extend of an unknown lockId write nothing; %d lock records stored", n)
		}
	})

	register("Lifecycle/ManyKeysInParallel", func(e *env) {
		const n = 40
		keys := make([]string, n)
		for i := range keys {
			keys[i] = e.key(fmt.Sprintf("many%02d", i))
		}
		results := make([]syncguard.AcquireResult, n)
		var wg sync.WaitGroup
		for i := range keys {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r, err := e.pick(i).Acquire(e.ctx, keys[i], 30*time.Second)
				if err != nil || !r.OK {
					e.t.Errorf("rule: acquiring distinct free keys in parallel always succeeds; key %q got %+v, %v", keys[i], r, err)
				}
				results[i] = r
			}()
		}
		wg.Wait()
		if e.t.Failed() {
			return
		}
		ids := map[string]string{}
		for i, r := range results {
			if other, dup := ids[r.LockID]; dup {
				e.t.Errorf("rule: every acquisition gets its own lockId; keys %q and %q share %q", other, keys[i], r.LockID)
			}
			ids[r.LockID] = keys[i]
			if r.Fence != "000000000000001" {
				e.t.Errorf("rule: fences are per key, starting at 000000000000001; key %q got %s", keys[i], r.Fence)
			}
			if !e.isLocked(e.b2, keys[i]) {
				e.t.Errorf("rule: an acquired key is locked; IsLocked(%q) = false", keys[i])
			}
		}
		for i, r := range results {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if rel, err := e.pick(i+1).Release(e.ctx, r.LockID); err != nil || !rel.OK {
					e.t.Errorf("rule: the holder's release succeeds from any pool; key %q got %+v, %v", keys[i], rel, err)
				}
			}()
		}
		wg.Wait()
		for _, k := range keys {
			if e.isLocked(e.b, k) {
				e.t.Errorf("rule: a released key is free; IsLocked(%q) = true", k)
			}
		}
		if rows, ok := e.count(); ok && rows != 0 {
			e.t.Errorf("rule: release deletes the lock record; %d left after releasing all %d keys", rows, n)
		}
	})

	register("Lifecycle/Capabilities", func(e *env) {
		c := e.b.Capabilities()
		if want := e.tg.Capabilities; want != nil && c != *want {
			e.t.Errorf("rule: capabilities are %+v; got %+v", *want, c)
		}
		if !c.SupportsFencing || c.Backend == "" || (c.TimeAuthority != "server" && c.TimeAuthority != "client") {
			e.t.Errorf(`rule: a backend names itself, supports fencing and has TimeAuthority "server" or "client"; got %+v`, c)
		}
	})
}
