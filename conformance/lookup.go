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
		norm := nfc(k)
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
		k, r := e.hold("match", ttl)
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
		k, r := e.hold("expiredlookup", 150*time.Millisecond)
		e.waitPast(ms(r.ExpiresAt) + tolMs)
		byKey, err := e.b.LookupKey(e.ctx, k)
		e.must(err, "LookupKey")
		byID, err := e.b2.LookupID(e.ctx, r.LockID)
		e.must(err, "LookupID")
		if byKey != nil || byID != nil {
			e.t.Errorf("rule: lookup of an expired lock is nil in both modes (like an absent one); expiry %d, by key %+v, by lockId %+v", ms(r.ExpiresAt), byKey, byID)
		}
	})

	register("Lookup/ReadOnly", func(e *env) {
		k, r := e.hold("readonly", 30*time.Second)
		same := e.unchanged(k)
		dl, debug := e.b2.(debugLookuper)
		for i := 0; i < 5; i++ {
			_, err := e.b2.LookupKey(e.ctx, k)
			e.must(err, "LookupKey")
			_, err = e.b2.LookupID(e.ctx, r.LockID)
			e.must(err, "LookupID")
			if debug {
				_, err = dl.LookupKeyDebug(e.ctx, k)
				e.must(err, "LookupKeyDebug")
				_, err = dl.LookupIDDebug(e.ctx, r.LockID)
				e.must(err, "LookupIDDebug")
			}
			e.isLocked(e.b2, k)
			time.Sleep(5 * time.Millisecond)
		}
		same("lookups and IsLocked are read-only (expiry and every field unchanged)")
		e.release(e.b, r.LockID)
	})

	register("Lookup/DebugVariantsCarryRawValues", func(e *env) {
		dl, ok := e.b2.(debugLookuper)
		if !ok {
			e.t.Skipf("the backend (%T) has no debug lookups (LookupKeyDebug, LookupIDDebug)", e.b2)
		}
		k := e.key("Cafe\u0301debug")
		norm := nfc(k)
		r := e.mustAcquire(e.b, k, 30*time.Second)
		dk, err := dl.LookupKeyDebug(e.ctx, k)
		e.must(err, "LookupKeyDebug")
		di, err := dl.LookupIDDebug(e.ctx, r.LockID)
		e.must(err, "LookupIDDebug")
		for mode, d := range map[string]*syncguard.LockInfo{"key": dk, "lockId": di} {
			if d == nil || d.Key != norm || d.LockID != r.LockID || d.Fence != r.Fence || d.KeyHash != syncguard.HashKey(norm) {
				e.t.Errorf("rule: the debug lookups add the normalized key and the lockId to LockInfo; by %s got %+v, want key %q lockId %q fence %s", mode, d, norm, r.LockID, r.Fence)
			}
		}
		e.release(e.b, r.LockID)
		if d, _ := dl.LookupIDDebug(e.ctx, r.LockID); d != nil {
			e.t.Errorf("rule: the debug lookup of a released lock is nil; got %+v", d)
		}
	})
}
