package ha

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/syncguard/syncguard-go/syncguard"
	"github.com/syncguard/syncguard-go/tests/pgtest/history"
)

// sentinel is one of an adapter's long-lived locks: acquired with a long
// TTL, then extended, then released and taken again, in a ring.
type sentinel struct {
	key    string
	held   bool
	lockID string
	fence  syncguard.Fence
	expiry time.Time // last acknowledged expiry
	acked  time.Time // when the last acquire or extend was acknowledged
}

const (
	sentinelSlots = 12
	sentinelTTL   = 10 * time.Minute
)

// sentinelWorker keeps sentinelSlots locks held, renewing them one after
// the other (release, acquire, extend) so that acknowledged acquires and
// extends happen right up to every fault. checkSentinels looks them up
// after each failover.
func (r *runner) sentinelWorker(a *adapter) {
	gen := 0
	a.sentinelMu.Lock()
	for i := range sentinelSlots {
		a.sentinels = append(a.sentinels, &sentinel{key: fmt.Sprintf("ha-sentinel-%s-%d-%d", a.name, i, gen)})
	}
	a.sentinelMu.Unlock()
	rng := rand.New(rand.NewPCG(r.o.Seed, uint64(len(a.name))))
	fails := 0
	for i := 0; r.ctx.Err() == nil; i++ {
		a.sentinelMu.Lock()
		s := a.sentinels[i%sentinelSlots]
		ok := r.renewSentinel(a, s, &gen)
		a.sentinelMu.Unlock()
		if !ok {
			fails++
			backoff(r.ctx, rng, fails)
			continue
		}
		fails = 0
		sleepCtx(r.ctx, 10*time.Millisecond)
	}
}

// renewSentinel releases s (if held), acquires it again and extends it.
// After an error whose outcome is unknown the slot moves to a fresh key.
func (r *runner) renewSentinel(a *adapter, s *sentinel, gen *int) bool {
	fresh := func() {
		*gen++
		base := s.key[:strings.LastIndexByte(s.key, '-')]
		*s = sentinel{key: fmt.Sprintf("%s-%d", base, *gen)}
	}
	ctx, cancel := context.WithTimeout(r.ctx, opTimeout)
	defer cancel()
	if s.held {
		res, err := a.b.Release(ctx, s.lockID)
		if err != nil {
			r.note(a, "sentinel-release", "", err)
			fresh()
			return false
		}
		r.note(a, "sentinel-release", map[bool]string{true: "ok", false: res.Reason}[res.OK], nil)
		if !res.OK {
			r.addViolation(history.Violation{Rule: RuleAcked, Key: s.key,
				Detail: fmt.Sprintf("%s: release of the held sentinel lock (fence %s, acknowledged expiry %s) found it %s",
					a.name, s.fence, s.expiry.Format(time.StampMilli), res.Reason)})
		}
		s.held = false
	}
	sent := time.Now()
	res, err := a.b.Acquire(ctx, s.key, sentinelTTL)
	if err != nil {
		r.note(a, "sentinel-acquire", "", err)
		fresh()
		return false
	}
	if !res.OK {
		// Held by an acquire of ours whose outcome was unknown: move on.
		r.note(a, "sentinel-acquire", "locked", nil)
		fresh()
		return true
	}
	a.succeeded(sent)
	r.note(a, "sentinel-acquire", "ok", nil)
	*s = sentinel{key: s.key, held: true, lockID: res.LockID, fence: res.Fence, expiry: res.ExpiresAt, acked: time.Now()}
	x, err := a.b.Extend(ctx, s.lockID, sentinelTTL+time.Minute)
	if err != nil {
		// Unknown outcome: the lock is held with at least the acquire's
		// expiry.
		r.note(a, "sentinel-extend", "", err)
		return false
	}
	r.note(a, "sentinel-extend", map[bool]string{true: "ok", false: x.Reason}[x.OK], nil)
	if !x.OK {
		r.addViolation(history.Violation{Rule: RuleAcked, Key: s.key,
			Detail: fmt.Sprintf("%s: extend of the just acquired sentinel lock (fence %s) found it %s", a.name, s.fence, x.Reason)})
		s.held = false
		return true
	}
	s.expiry, s.acked = x.ExpiresAt, time.Now()
	return true
}

// checkSentinels verifies, through each adapter, that every sentinel lock
// acknowledged before t is held on the current primary with the same
// lockId and fence and an expiry no earlier than the acknowledged one.
func (r *runner) checkSentinels(ctx context.Context, t time.Time) (int, error) {
	n := 0
	for _, a := range r.ad {
		a.sentinelMu.Lock()
		for _, s := range a.sentinels {
			if !s.held || !s.acked.Before(t) {
				continue
			}
			var info *syncguard.LockInfo
			var err error
			for attempt := 0; ; attempt++ {
				info, err = a.b.LookupIDDebug(ctx, s.lockID)
				if err == nil || attempt == 20 || !syncguard.CodeOf(err).Retryable() {
					break
				}
				sleepCtx(ctx, 250*time.Millisecond)
			}
			if err != nil {
				a.sentinelMu.Unlock()
				return n, fmt.Errorf("looking up sentinel %s: %w", s.key, err)
			}
			n++
			switch {
			case info == nil:
				r.addViolation(history.Violation{Rule: RuleAcked, Key: s.key,
					Detail: fmt.Sprintf("%s: sentinel lock (fence %s, acknowledged %s, expiry %s) is gone from the new primary",
						a.name, s.fence, s.acked.Format(time.StampMilli), s.expiry.Format(time.StampMilli))})
			case info.Fence != s.fence:
				r.addViolation(history.Violation{Rule: RuleAcked, Key: s.key,
					Detail: fmt.Sprintf("%s: sentinel lock acknowledged with fence %s has fence %s on the new primary", a.name, s.fence, info.Fence)})
			case info.ExpiresAt.Before(s.expiry):
				r.addViolation(history.Violation{Rule: RuleAcked, Key: s.key,
					Detail: fmt.Sprintf("%s: sentinel lock (fence %s) acknowledged until %s expires at %s on the new primary (an acknowledged extend was lost)",
						a.name, s.fence, s.expiry.Format(time.StampMilli), info.ExpiresAt.Format(time.StampMilli))})
			}
		}
		a.sentinelMu.Unlock()
	}
	return n, nil
}
