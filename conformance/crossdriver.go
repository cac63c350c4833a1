package conformance

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/syncguard/syncguard-go/syncguard"
)

// CrossDriver cases need Harness.OpenOther: a pool on the same database
// through a second driver. Both backends share the case's tables.

func init() {
	registerSQL("CrossDriver/InterleavedOpsIdenticalOutcomes", func(e *sqlEnv) {
		bo := e.otherBackend()
		// script runs the same interleaving with x and y in either role and
		// returns a transcript of the outcomes (values that must match are
		// checked inside).
		script := func(x, y syncguard.LockBackend) []string {
			k := e.key("interleave")
			var out []string
			add := func(f string, a ...any) { out = append(out, fmt.Sprintf(f, a...)) }
			r := e.acquire(x, k, 30*time.Second)
			add("x.acquire ok=%v fence=%s", r.OK, r.Fence)
			c := e.acquire(y, k, 30*time.Second)
			add("y.acquire ok=%v reason=%s", c.OK, c.Reason)
			add("y.isLocked %v", e.isLocked(y, k))
			info, err := y.LookupKey(e.ctx, k)
			e.must(err, "LookupKey")
			add("y.lookupKey same=%v", info != nil && info.Fence == r.Fence && info.ExpiresAt.Equal(r.ExpiresAt) && info.LockIDHash == syncguard.HashKey(r.LockID))
			info, err = y.LookupID(e.ctx, r.LockID)
			e.must(err, "LookupID")
			add("y.lookupID found=%v", info != nil)
			ext := e.extend(y, r.LockID, 20*time.Second)
			add("y.extend ok=%v", ext.OK)
			info, _ = x.LookupKey(e.ctx, k)
			add("x.lookupKey sees extend=%v", info != nil && info.ExpiresAt.Equal(ext.ExpiresAt))
			rel := e.release(y, r.LockID)
			add("y.release ok=%v", rel.OK)
			rel = e.release(x, r.LockID)
			add("x.release ok=%v reason=%s", rel.OK, rel.Reason)
			add("x.isLocked %v", e.isLocked(x, k))
			n := e.acquire(y, k, 30*time.Second)
			add("y.acquire ok=%v fence=%s", n.OK, n.Fence)
			ext = e.extend(x, n.LockID, 30*time.Second)
			add("x.extend ok=%v", ext.OK)
			rel = e.release(x, n.LockID)
			add("x.release ok=%v", rel.OK)
			return out
		}
		ab := script(e.b, bo)
		ba := script(bo, e.b)
		want := []string{
			"x.acquire ok=true fence=000000000000001", "y.acquire ok=false reason=locked", "y.isLocked true",
			"y.lookupKey same=true", "y.lookupID found=true", "y.extend ok=true", "x.lookupKey sees extend=true",
			"y.release ok=true", "x.release ok=false reason=not-found", "x.isLocked false",
			"y.acquire ok=true fence=000000000000002", "x.extend ok=true", "x.release ok=true",
		}
		if !slices.Equal(ab, ba) || !slices.Equal(ab, want) {
			e.t.Errorf("rule: backends on two drivers sharing tables interleave with identical outcomes; primary-then-other:\n  %s\nother-then-primary:\n  %s\nwant:\n  %s",
				strings.Join(ab, "\n  "), strings.Join(ba, "\n  "), strings.Join(want, "\n  "))
		}
	})

	registerSQL("CrossDriver/ExpiryJudgedAlike", func(e *sqlEnv) {
		bo := e.otherBackend()
		k, r := e.hold("crossexpiry", 150*time.Millisecond)
		e.waitPast(ms(r.ExpiresAt) + tolMs)
		for name, b := range map[string]syncguard.LockBackend{"primary": e.b, "other": bo} {
			byKey, _ := b.LookupKey(e.ctx, k)
			byID, _ := b.LookupID(e.ctx, r.LockID)
			ext := e.extend(b, r.LockID, time.Second)
			rel := e.release(b, r.LockID)
			s := fmt.Sprintf("isLocked=%v lookupKey=%v lookupID=%v extend=%v/%s release=%v/%s",
				e.isLocked(b, k), byKey != nil, byID != nil, ext.OK, ext.Reason, rel.OK, rel.Reason)
			if s != "isLocked=false lookupKey=false lookupID=false extend=false/expired release=false/expired" {
				e.t.Errorf("rule: both drivers judge an expired lock alike (free, nil lookups, extend and release fail with reason expired); %s driver: %s", name, s)
			}
		}
		n := e.mustAcquire(bo, k, 30*time.Second)
		if n.Fence <= r.Fence {
			e.t.Errorf("rule: fences increase across drivers; %s after %s", n.Fence, r.Fence)
		}
		e.release(e.b, n.LockID)
	})

	registerSQL("CrossDriver/OneWinnerAndMonotonicFences", func(e *sqlEnv) {
		bo := e.otherBackend()
		k := e.key("crossrace")
		var last syncguard.Fence
		for round := 0; round < 8; round++ {
			winners := e.race([]syncguard.LockBackend{e.b, bo}, 12, k, "contention across drivers is a result, not an error")
			if len(winners) != 1 {
				e.t.Fatalf("rule: exactly one of the racing acquires on two drivers wins; round %d had %d winners", round, len(winners))
			}
			if winners[0].Fence <= last {
				e.t.Errorf("rule: fences strictly increase whichever driver wins; round %d got %s after %s", round, winners[0].Fence, last)
			}
			last = winners[0].Fence
			var releaser syncguard.LockBackend = bo
			if round%2 == 1 {
				releaser = e.b
			}
			if rel := e.release(releaser, winners[0].LockID); !rel.OK {
				e.t.Errorf("rule: a lock taken through one driver is released through the other; got %+v", rel)
			}
		}
	})

	registerSQL("CrossDriver/ErrorsClassifiedAlike", func(e *sqlEnv) {
		bo := e.otherBackend()
		k, r := e.hold("crosserr", 30*time.Second)
		cancelled, cancel := context.WithCancel(e.ctx)
		cancel()
		expired, cancel2 := context.WithDeadline(e.ctx, time.Now().Add(-time.Second))
		defer cancel2()
		base := strings.TrimSuffix(suiteTable("x"), "_x")
		missing := e.config(base+"_nolocks", base+"_nofences")
		for name, b := range map[string]syncguard.LockBackend{"primary": e.b, "other": bo} {
			for what, c := range map[string]struct {
				err  error
				want syncguard.Code
			}{
				"cancelled context": {second(b.Acquire(cancelled, k, time.Second)), syncguard.ErrAborted},
				"past deadline":     {second(b.Release(expired, r.LockID)), syncguard.ErrNetworkTimeout},
				"malformed lockId":  {second(b.Extend(e.ctx, "nope", time.Second)), syncguard.ErrInvalidArgument},
			} {
				if got := syncguard.CodeOf(c.err); got != c.want {
					e.t.Errorf("rule: both drivers classify errors alike; %s on the %s driver gave %q (%v), want %q", what, name, got, c.err, c.want)
				}
			}
		}
		for name, db := range map[string]func() *syncguard.Backend{
			"primary": func() *syncguard.Backend {
				return e.newBackend(e.db, func(c *syncguard.Config) { *c = *missing })
			},
			"other": func() *syncguard.Backend {
				return e.newBackend(e.h.OpenOther(e.t), func(c *syncguard.Config) { *c = *missing; c.Dialect = e.h.OtherDialect })
			},
		} {
			_, err := db().IsLocked(e.ctx, k)
			if syncguard.CodeOf(err) != syncguard.ErrInternal || !strings.Contains(fmt.Sprint(err), "SetupSchema") {
				e.t.Errorf("rule: both drivers report missing tables as Internal naming SetupSchema; %s driver gave %v", name, err)
			}
		}
		e.release(bo, r.LockID)
	})
}
