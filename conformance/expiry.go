package conformance

import (
	"time"

	"github.com/syncguard/syncguard-go/syncguard"
)

// Expiry is decided by the backend's clock only (for PostgreSQL, the
// server's). Every check here brackets the operations between two reads of
// that clock, so it holds however slow the client or the machine is; a
// window that was missed is retried, never asserted on.

func init() {
	register("Expiry/AcquireExpiresAtIsServerNowPlusTTL", func(e *env) {
		const ttl = 7 * time.Second
		k := e.key("expiresat")
		before := e.nowMs()
		r := e.mustAcquire(e.b, k, ttl)
		after := e.nowMs()
		got := ms(r.ExpiresAt)
		if got < before+ttlMs(ttl) || got > after+ttlMs(ttl) {
			e.t.Errorf("rule: acquire's ExpiresAt is server now + ttl; ttl %v, server clock %d..%d, ExpiresAt %d (%+d ms outside)", ttl, before, after, got, outside(got, before+ttlMs(ttl), after+ttlMs(ttl)))
		}
		info, err := e.b2.LookupKey(e.ctx, k)
		e.must(err, "LookupKey")
		if info == nil || !info.ExpiresAt.Equal(r.ExpiresAt) || ms(info.ExpiresAt)-ms(info.AcquiredAt) != ttlMs(ttl) {
			e.t.Errorf("rule: the stored lock expires at the returned ExpiresAt, ttl after AcquiredAt; acquire %d, lookup %+v", got, info)
		}
	})

	register("Expiry/LiveUntilExpiryPlusTolerance", func(e *env) {
		const ttl = 200 * time.Millisecond
		for attempt := 1; ; attempt++ {
			k, r := e.hold("tolerance", ttl)
			exp := ms(r.ExpiresAt)
			e.waitPast(exp)
			before := e.nowMs()
			locked, byKey, byID := e.reads(k, r.LockID, e.b2)
			other := e.acquire(e.b2, k, ttl)
			after := e.nowMs()
			if after >= exp+tolMs {
				if attempt < 3 {
					e.t.Logf("server clock left the window (expiry %d, checks ran %d..%d); retrying", exp, before, after)
					continue
				}
				e.t.Fatalf("setup: could not run four statements within 1 s of server time in 3 attempts (last: %d..%d)", before, after)
			}
			if !locked || byKey == nil || byID == nil {
				e.t.Errorf("rule: a lock stays live for %d ms after its expiry (server time %d..%d, expiry %d); IsLocked %v, LookupKey %v, LookupID %v",
					tolMs, before, after, exp, locked, byKey != nil, byID != nil)
			}
			if other.OK {
				e.t.Errorf("rule: a lock inside its tolerance window cannot be taken; key %q taken at server time %d..%d, expiry %d", k, before, after, exp)
			}
			return
		}
	})

	register("Expiry/FreeAfterExpiryPlusTolerance", func(e *env) {
		const ttl = 150 * time.Millisecond
		k, r := e.hold("expired", ttl)
		exp := ms(r.ExpiresAt)
		e.waitPast(exp + tolMs)
		now := e.nowMs()
		locked, byKey, byID := e.reads(k, r.LockID, e.b)
		if locked || byKey != nil || byID != nil {
			e.t.Errorf("rule: a lock is free once server time reaches expiry + %d ms, and IsLocked, LookupKey and LookupID agree; expiry %d, server time >= %d: IsLocked %v, LookupKey %+v, LookupID %+v",
				tolMs, exp, now, locked, byKey, byID)
		}
		n := e.acquire(e.b2, k, 30*time.Second)
		if !n.OK {
			e.t.Fatalf("rule: an expired lock can be taken by anyone; expiry %d, server time >= %d, got %+v", exp, now, n)
		}
		if n.Fence <= r.Fence {
			e.t.Errorf("rule: taking over an expired lock gives a greater fence; %s after %s", n.Fence, r.Fence)
		}
		locked = e.isLocked(e.b, k)
		byKey, _ = e.b.LookupKey(e.ctx, k)
		byID, _ = e.b.LookupID(e.ctx, n.LockID)
		if !locked || byKey == nil || byID == nil || byKey.Fence != n.Fence {
			e.t.Errorf("rule: IsLocked, LookupKey and LookupID agree on the new holder; IsLocked %v, LookupKey %+v, LookupID %+v, fence %s", locked, byKey, byID, n.Fence)
		}
		e.release(e.b2, n.LockID)
	})

	register("Expiry/ExpiredLockCannotBeExtendedOrReleased", func(e *env) {
		const ttl = 150 * time.Millisecond
		k, r := e.hold("noresurrect", ttl)
		exp := ms(r.ExpiresAt)
		e.waitPast(exp + tolMs)
		ext := e.extend(e.b, r.LockID, 30*time.Second)
		if ext.OK || ext.Reason != syncguard.ReasonExpired {
			e.t.Errorf("rule: extending an expired lock returns OK=false reason %q and never revives it; expiry %d, got %+v", syncguard.ReasonExpired, exp, ext)
		}
		if e.isLocked(e.b2, k) {
			e.t.Errorf("rule: a failed extend does not revive an expired lock; IsLocked(%q) = true", k)
		}
		rel := e.release(e.b, r.LockID)
		if rel.OK || rel.Reason != syncguard.ReasonExpired {
			e.t.Errorf("rule: releasing an expired lock returns OK=false reason %q; expiry %d, got %+v", syncguard.ReasonExpired, exp, rel)
		}
		if s := e.snapshot(k); s != "<no live lock>" {
			e.t.Errorf("rule: extend and release of an expired lock change nothing; it is live again: %s", s)
		}
	})

	register("Expiry/ExtendResetsToServerNowPlusTTL", func(e *env) {
		k, r := e.hold("extend", 20*time.Second)
		// A shorter ttl shortens the lock: extend replaces the remaining
		// time, it does not add to it.
		const ttl = 5 * time.Second
		before := e.nowMs()
		x := e.extend(e.b2, r.LockID, ttl)
		after := e.nowMs()
		if !x.OK {
			e.t.Fatalf("rule: the holder's extend of a live lock succeeds; got %+v", x)
		}
		got := ms(x.ExpiresAt)
		if got < before+ttlMs(ttl) || got > after+ttlMs(ttl) {
			e.t.Errorf("rule: extend sets expiry to server now + ttl and returns it; ttl %v, server clock %d..%d, ExpiresAt %d (%+d ms outside); acquire's expiry was %d",
				ttl, before, after, got, outside(got, before+ttlMs(ttl), after+ttlMs(ttl)), ms(r.ExpiresAt))
		}
		info, err := e.b.LookupKey(e.ctx, k)
		e.must(err, "LookupKey")
		if info == nil || !info.ExpiresAt.Equal(x.ExpiresAt) || info.Fence != r.Fence || !info.AcquiredAt.Equal(r.ExpiresAt.Add(-20*time.Second)) {
			e.t.Errorf("rule: the stored expiry is the one extend returned, and extend keeps fence and AcquiredAt; extend %d, acquire %+v, lookup %+v", got, r, info)
		}
	})

	register("Expiry/TwoExtendsInARow", func(e *env) {
		_, r := e.hold("twice", 10*time.Second)
		first := e.extend(e.b, r.LockID, 15*time.Second)
		before := e.nowMs()
		second := e.extend(e.b2, r.LockID, 15*time.Second)
		after := e.nowMs()
		if !first.OK || !second.OK {
			e.t.Fatalf("rule: a live lock can be extended again and again by its holder; got %+v then %+v", first, second)
		}
		if second.ExpiresAt.Before(first.ExpiresAt) {
			e.t.Errorf("rule: with the same ttl, a later extend never moves expiry back; %d then %d", ms(first.ExpiresAt), ms(second.ExpiresAt))
		}
		if got := ms(second.ExpiresAt); got < before+15000 || got > after+15000 {
			e.t.Errorf("rule: extend sets expiry to server now + ttl; server clock %d..%d, ttl 15s, ExpiresAt %d", before, after, got)
		}
		info, err := e.b.LookupID(e.ctx, r.LockID)
		e.must(err, "LookupID")
		if info == nil || !info.ExpiresAt.Equal(second.ExpiresAt) {
			e.t.Errorf("rule: the stored expiry is the last extend's; want %d, lookup %+v", ms(second.ExpiresAt), info)
		}
	})

	register("Expiry/ExtendKeepsLockPastOriginalExpiry", func(e *env) {
		const ttl = 200 * time.Millisecond
		k, r := e.hold("keepalive", ttl)
		x := e.extend(e.b, r.LockID, 10*time.Second)
		if !x.OK {
			e.t.Fatalf("rule: the holder's extend of a live lock succeeds; got %+v", x)
		}
		e.waitPast(ms(r.ExpiresAt) + tolMs)
		now := e.nowMs()
		if !e.isLocked(e.b2, k) {
			e.t.Errorf("rule: an extended lock lives to its new expiry; original expiry %d, new %d, server time %d, IsLocked false", ms(r.ExpiresAt), ms(x.ExpiresAt), now)
		}
		if c := e.acquire(e.b2, k, time.Second); c.OK {
			e.t.Errorf("rule: an extended lock cannot be taken before its new expiry; taken at server time >= %d, new expiry %d", now, ms(x.ExpiresAt))
		}
		if rel := e.release(e.b, r.LockID); !rel.OK {
			e.t.Errorf("rule: the holder can release an extended lock; got %+v", rel)
		}
	})
}
