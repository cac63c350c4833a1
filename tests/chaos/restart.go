package chaos

import (
	"context"
	"fmt"
	"time"

	"github.com/syncguard/syncguard-go/syncguard"
	"github.com/syncguard/syncguard-go/tests/pgtest/history"
)

// sentinel is a lock acknowledged just before a crash.
type sentinel struct {
	key    string
	res    syncguard.AcquireResult
	expiry time.Time // after the extend, for the extended one
}

// restart crashes and restarts the server, and checks that locks and
// fences acknowledged before the crash survive it.
func (r *runner) restart(ctx context.Context) string {
	if !r.srv.CanRestart() {
		return "skipped: server cannot restart"
	}
	sents, err := r.placeSentinels(ctx)
	if err != nil {
		return err.Error()
	}
	began := time.Now()
	maxAcked := r.hist.MaxAckedFences(began)
	rctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	if err := r.srv.Restart(rctx); err != nil {
		r.violate(history.Violation{Rule: "the server restarts", Detail: err.Error()})
		return "restart failed: " + err.Error()
	}
	ready := time.Now()
	for _, s := range sents {
		r.checkSentinel(ctx, s)
	}
	r.checkCounters(ctx, maxAcked)
	// Later holdings must have larger fences: checked at the end.
	r.mu.Lock()
	r.crashes = append(r.crashes, crashMark{ready: ready, maxAcked: maxAcked})
	r.mu.Unlock()
	return fmt.Sprintf("server down for %v; 2 sentinel locks and %d keys' fences checked", ready.Sub(began).Round(time.Millisecond), len(maxAcked))
}

// placeSentinels acquires two locks just before the crash and extends one.
func (r *runner) placeSentinels(ctx context.Context) ([]sentinel, error) {
	var sents []sentinel
	for i := 0; i < 2; i++ {
		k := fmt.Sprintf("%s:sentinel-%d-%d", r.keys[0], time.Now().UnixNano(), i)
		res, err := r.adminB.Acquire(ctx, k, 20*time.Second)
		if err != nil || !res.OK {
			return nil, fmt.Errorf("sentinel acquire failed: %+v %v", res, err)
		}
		s := sentinel{key: k, res: res, expiry: res.ExpiresAt}
		if i == 1 {
			x, err := r.adminB.Extend(ctx, res.LockID, 25*time.Second)
			if err != nil || !x.OK {
				return nil, fmt.Errorf("sentinel extend failed: %+v %v", x, err)
			}
			s.expiry = x.ExpiresAt
		}
		sents = append(sents, s)
	}
	return sents, nil
}

// retryAfterRestart runs fn until it succeeds or fails for good: operations
// on the admin pool fail until it has replaced its broken connections.
func retryAfterRestart(fn func() error) error {
	deadline := time.Now().Add(15 * time.Second)
	for {
		err := fn()
		if err == nil || !syncguard.CodeOf(err).Retryable() || time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// checkSentinel: a lock acknowledged before the crash is still held, with
// its fence and expiry, excludes others, can be released, and the next
// fence of its key is larger.
func (r *runner) checkSentinel(ctx context.Context, s sentinel) {
	const held = "a lock acknowledged before a crash is still held after it"
	var info *syncguard.LockInfo
	err := retryAfterRestart(func() (err error) { info, err = r.adminB.LookupIDDebug(ctx, s.res.LockID); return err })
	switch {
	case err != nil:
		r.violate(history.Violation{Rule: held, Key: s.key, Detail: "lookup failed: " + err.Error()})
	case info == nil:
		r.violate(history.Violation{Rule: held, Key: s.key,
			Detail: fmt.Sprintf("fence %s, expiry %v: not found after the restart", s.res.Fence, s.expiry)})
	case info.Fence != s.res.Fence || !info.ExpiresAt.Equal(s.expiry):
		r.violate(history.Violation{Rule: held, Key: s.key,
			Detail: fmt.Sprintf("acknowledged fence %s expiry %v; after the restart fence %s expiry %v", s.res.Fence, s.expiry, info.Fence, info.ExpiresAt)})
	}
	var again syncguard.AcquireResult
	if err := retryAfterRestart(func() (err error) { again, err = r.adminB.Acquire(ctx, s.key, time.Second); return err }); err != nil || again.OK {
		r.violate(history.Violation{Rule: "a lock acknowledged before a crash excludes others after it", Key: s.key,
			Detail: fmt.Sprintf("acquire after the restart: %+v, %v", again, err)})
	}
	if rel, err := r.adminB.Release(ctx, s.res.LockID); err != nil || !rel.OK {
		r.violate(history.Violation{Rule: "a lock acknowledged before a crash can be released after it", Key: s.key, Detail: fmt.Sprintf("%+v, %v", rel, err)})
	}
	next, err := r.adminB.Acquire(ctx, s.key, time.Second)
	if err != nil || !next.OK || next.Fence <= s.res.Fence {
		r.violate(history.Violation{Rule: history.RuleFenceAfter, Key: s.key,
			Detail: fmt.Sprintf("acknowledged %s; next acquire %+v, %v", s.res.Fence, next, err)})
	} else {
		_, _ = r.adminB.Release(ctx, next.LockID)
	}
}

// checkCounters: the fence counter of every worker key is at least the
// largest fence acknowledged before the crash.
func (r *runner) checkCounters(ctx context.Context, maxAcked map[string]int64) {
	for k, n := range maxAcked {
		var last syncguard.Fence
		err := retryAfterRestart(func() (err error) { last, _, err = r.adminB.LastFence(ctx, k); return err })
		if err != nil {
			r.violate(history.Violation{Rule: "fence counters are readable after a crash", Key: k, Detail: err.Error()})
			continue
		}
		got, _ := last.Int64() // "" (no counter) reads as 0
		if got < n {
			r.violate(history.Violation{Rule: "no acknowledged fence is lost across a crash", Key: k,
				Detail: fmt.Sprintf("fence %d acknowledged before the crash; counter %d after it", n, got)})
		}
	}
}
