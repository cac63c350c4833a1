package conformance

import (
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/syncguard/syncguard-go/internal/rules"
	"github.com/syncguard/syncguard-go/syncguard"
)

var hashRE = regexp.MustCompile(`^[0-9a-f]{24}$`)

func init() {
	register("Lookup/SanitizedHashesNoRawValues", func(e *env) {
		// A decomposed key: the hash is of the NFC form.
		k := e.key("Cafe\u0301")
		norm, _, _ := e.derive(k)
		r := e.mustAcquire(e.b, k, 30*time.Second)
		byKey, err := e.b2.LookupKey(e.ctx, k)
		e.must(err, "LookupKey")
		byID, err := e.b2.LookupID(e.ctx, r.LockID)
		e.must(err, "LookupID")
		for mode, info := range map[string]*syncguard.LockInfo{"key": byKey, "lockId": byID} {
			if info == nil {
				e.t.Errorf("rule: lookup by %s finds a live lock; got nil", mode)
				continue
			}
			if info.KeyHash != syncguard.HashKey(norm) || !hashRE.MatchString(info.KeyHash) {
				e.t.Errorf("rule: lookup's KeyHash is HashKey(NFC key), 24 lowercase hex; by %s got %q, want %q", mode, info.KeyHash, syncguard.HashKey(norm))
			}
			if info.LockIDHash != syncguard.HashKey(r.LockID) || !hashRE.MatchString(info.LockIDHash) {
				e.t.Errorf("rule: lookup's LockIDHash is HashKey(lockId); by %s got %q, want %q", mode, info.LockIDHash, syncguard.HashKey(r.LockID))
			}
			text := fmt.Sprintf("%+v %#v", *info, *info)
			if strings.Contains(text, r.LockID) || strings.Contains(text, norm) || strings.Contains(text, k) {
				e.t.Errorf("rule: lookup returns no raw key or lockId; by %s got %s", mode, text)
			}
		}
		if byKey != nil && byID != nil && *byKey != *byID {
			e.t.Errorf("rule: lookup by key and by lockId return the same information; %+v vs %+v", *byKey, *byID)
		}
	})

	register("Lookup/MatchesAcquire", func(e *env) {
		const ttl = 30 * time.Second
		k := e.key("match")
		r := e.mustAcquire(e.b, k, ttl)
		for mode, get := range map[string]func() (*syncguard.LockInfo, error){
			"key":    func() (*syncguard.LockInfo, error) { return e.b2.LookupKey(e.ctx, k) },
			"lockId": func() (*syncguard.LockInfo, error) { return e.b2.LookupID(e.ctx, r.LockID) },
		} {
			info, err := get()
			e.must(err, "lookup by "+mode)
			if info == nil {
				e.t.Errorf("rule: lookup by %s finds a live lock; got nil", mode)
				continue
			}
			if info.Fence != r.Fence || !info.ExpiresAt.Equal(r.ExpiresAt) || ms(info.ExpiresAt)-ms(info.AcquiredAt) != ttlMs(ttl) {
				e.t.Errorf("rule: lookup returns the acquire's fence and expiry, and AcquiredAt = expiry - ttl; acquire fence %s expires %d ttl %v, lookup by %s %+v",
					r.Fence, ms(r.ExpiresAt), ttl, mode, *info)
			}
		}
	})

	register("Lookup/NilForAbsent", func(e *env) {
		k := e.key("absent")
		byKey, err := e.b.LookupKey(e.ctx, k)
		e.must(err, "LookupKey")
		byID, err := e.b.LookupID(e.ctx, rules.GenerateLockID())
		e.must(err, "LookupID")
		if byKey != nil || byID != nil {
			e.t.Errorf("rule: lookup of an absent lock is nil in both modes; by key %+v, by lockId %+v", byKey, byID)
		}
		r := e.mustAcquire(e.b, k, 30*time.Second)
		e.release(e.b, r.LockID)
		byKey, _ = e.b.LookupKey(e.ctx, k)
		byID, _ = e.b.LookupID(e.ctx, r.LockID)
		if byKey != nil || byID != nil {
			e.t.Errorf("rule: lookup of a released lock is nil in both modes; by key %+v, by lockId %+v", byKey, byID)
		}
	})

	register("Lookup/NilForExpiredBothModes", func(e *env) {
		k := e.key("expiredlookup")
		r := e.mustAcquire(e.b, k, 150*time.Millisecond)
		e.waitServerPast(ms(r.ExpiresAt) + tolMs)
		byKey, err := e.b.LookupKey(e.ctx, k)
		e.must(err, "LookupKey")
		byID, err := e.b2.LookupID(e.ctx, r.LockID)
		e.must(err, "LookupID")
		if byKey != nil || byID != nil {
			e.t.Errorf("rule: lookup of an expired lock is nil in both modes (like an absent one); expiry %d, by key %+v, by lockId %+v", ms(r.ExpiresAt), byKey, byID)
		}
		if _, ok := e.rawLockRow(k); !ok {
			e.t.Logf("the expired row was already deleted; the case still checked lookups")
		}
	})

	register("Lookup/ReadOnly", func(e *env) {
		k := e.key("readonly")
		r := e.mustAcquire(e.b, k, 30*time.Second)
		rowBefore, _ := e.rawLockRow(k)
		counterBefore, _ := e.fenceCounter(k)
		for i := 0; i < 5; i++ {
			_, err := e.b2.LookupKey(e.ctx, k)
			e.must(err, "LookupKey")
			_, err = e.b2.LookupID(e.ctx, r.LockID)
			e.must(err, "LookupID")
			_, err = e.b2.LookupKeyDebug(e.ctx, k)
			e.must(err, "LookupKeyDebug")
			_, err = e.b2.LookupIDDebug(e.ctx, r.LockID)
			e.must(err, "LookupIDDebug")
			e.isLocked(e.b2, k)
			time.Sleep(5 * time.Millisecond)
		}
		rowAfter, ok := e.rawLockRow(k)
		counterAfter, _ := e.fenceCounter(k)
		if !ok || rowAfter != rowBefore || counterAfter != counterBefore {
			e.t.Errorf("rule: lookups and IsLocked are read-only (expires_at_ms and every column unchanged); row before %+v after %+v, counter %d then %d",
				rowBefore, rowAfter, counterBefore, counterAfter)
		}
	})

	register("Lookup/DebugVariantsCarryRawValues", func(e *env) {
		k := e.key("Cafe\u0301debug")
		norm, _, _ := e.derive(k)
		r := e.mustAcquire(e.b, k, 30*time.Second)
		dk, err := e.b2.LookupKeyDebug(e.ctx, k)
		e.must(err, "LookupKeyDebug")
		di, err := e.b2.LookupIDDebug(e.ctx, r.LockID)
		e.must(err, "LookupIDDebug")
		for mode, d := range map[string]*syncguard.LockInfoDebug{"key": dk, "lockId": di} {
			if d == nil || d.Key != norm || d.LockID != r.LockID || d.Fence != r.Fence || d.KeyHash != syncguard.HashKey(norm) {
				e.t.Errorf("rule: the debug lookups add the normalized key and the lockId to LockInfo; by %s got %+v, want key %q lockId %q fence %s", mode, d, norm, r.LockID, r.Fence)
			}
		}
		e.release(e.b, r.LockID)
		if d, _ := e.b2.LookupIDDebug(e.ctx, r.LockID); d != nil {
			e.t.Errorf("rule: the debug lookup of a released lock is nil; got %+v", d)
		}
	})
}
