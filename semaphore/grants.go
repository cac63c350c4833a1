package semaphore

import (
	"sync"
	"time"
)

// A grant is a hand-off that a release through this Semaphore made to a
// waiter of the same Semaphore: what release.sql returned of the slot it
// handed over, as committed (not a notification: those are hints only).
// The waiter's next attempt takes it without a statement, as the attempt
// that finds its lockId on a live slot would report it ('mine'). A grant
// to a waiter of another Semaphore or process is found by that waiter's
// attempt, which its notification causes.
type grant struct {
	slot      int
	fence     int64
	expiresMs int64     // server time
	ttlMs     int64     // the TTL it was handed with (the waiter's)
	sent      time.Time // the release statement's send: the permit's TTL started after it
}

// grants are the hand-offs to the waiters of one Semaphore, by lockId:
// kept only for a waiter that is waiting (between its first queued
// attempt and its success or Leave), so nothing outlives its waiter.
type grants struct {
	mu sync.Mutex
	m  map[string]*grant // a waiting waiter's lockId -> its grant, nil until one comes
}

// expect marks lockID as a waiter of this Semaphore.
func (g *grants) expect(lockID string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.m == nil {
		g.m = map[string]*grant{}
	}
	if _, ok := g.m[lockID]; !ok {
		g.m[lockID] = nil
	}
}

// put keeps x for lockID if it is a waiter of this Semaphore.
func (g *grants) put(lockID string, x grant) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, ok := g.m[lockID]; ok {
		g.m[lockID] = &x
	}
}

// take returns and forgets the grant to lockID, if one came.
func (g *grants) take(lockID string) (grant, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	x := g.m[lockID]
	if x == nil {
		return grant{}, false
	}
	g.m[lockID] = nil
	return *x, true
}

// done forgets lockID: it holds a permit, or left the queue.
func (g *grants) done(lockID string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.m, lockID)
}
