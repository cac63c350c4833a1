package conformance

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"strings"
	"sync"
	"time"

	"github.com/syncguard/syncguard-go/internal/rules"
	"github.com/syncguard/syncguard-go/syncguard"
)

func init() {
	register("Fences/FifteenDigitsStartingAtOne", func(e *env) {
		k, r := e.hold("format", 30*time.Second)
		if r.Fence != "000000000000001" {
			e.t.Errorf("rule: the first fence of a key is 000000000000001 (15 digits, zero-padded); got %q", r.Fence)
		}
		e.release(e.b, r.LockID)
		r = e.mustAcquire(e.b2, k, 30*time.Second)
		if r.Fence != "000000000000002" {
			e.t.Errorf("rule: fences are 15-digit zero-padded counters; second acquire got %q", r.Fence)
		}
		e.release(e.b2, r.LockID)
	})

	register("Fences/IncreaseAcrossReleaseAndExpiry", func(e *env) {
		k := e.key("monotonic")
		var seen []syncguard.Fence
		check := func(how string, f syncguard.Fence) {
			e.t.Helper()
			n := fenceNum(e.t, f)
			if len(seen) > 0 {
				prev := seen[len(seen)-1]
				if f <= prev || n <= fenceNum(e.t, prev) {
					e.t.Errorf("rule: fences strictly increase per key, as strings and as numbers; after %s got %s following %s (all: %v)", how, f, prev, seen)
				}
			}
			seen = append(seen, f)
		}
		r := e.mustAcquire(e.b, k, 30*time.Second)
		check("first acquire", r.Fence)
		e.release(e.b, r.LockID)
		r = e.mustAcquire(e.b2, k, 150*time.Millisecond)
		check("release and re-acquire", r.Fence)
		e.waitPast(ms(r.ExpiresAt) + tolMs)
		r = e.mustAcquire(e.b, k, 30*time.Second)
		check("expiry and takeover", r.Fence)
		e.release(e.b, r.LockID)
	})

	register("Fences/IndependentPerKey", func(e *env) {
		a, b := e.key("a"), e.key("b")
		for i := 1; i <= 3; i++ {
			r := e.mustAcquire(e.b, a, 30*time.Second)
			e.release(e.b, r.LockID)
		}
		r := e.mustAcquire(e.b2, b, 30*time.Second)
		if r.Fence != "000000000000001" {
			e.t.Errorf("rule: each key has its own fence counter; key %q starts at %s after 3 acquires of another key", b, r.Fence)
		}
		ra := e.mustAcquire(e.b, a, 30*time.Second)
		if ra.Fence != "000000000000004" {
			e.t.Errorf("rule: acquires of one key do not advance another's fences; key %q got %s on its 4th acquire", a, ra.Fence)
		}
	})

	register("Fences/OverflowFailsWithInternal", func(e *env) {
		e.skipUnless(e.tg.SetFence != nil, "SetFence")
		k := e.key("overflow")
		setCounter := func(n int64) { e.must(e.tg.SetFence(e.ctx, k, n), "Target.SetFence") }
		setCounter(rules.FenceMax)
		res, err := e.b.Acquire(e.ctx, k, 30*time.Second)
		if !errIs(err, syncguard.ErrInternal) || res.OK {
			e.t.Errorf("rule: an acquire whose fence would pass %d fails with ErrInternal; counter at %d got %+v, %v", int64(rules.FenceMax), int64(rules.FenceMax), res, err)
		}
		if e.isLocked(e.b2, k) {
			e.t.Errorf("rule: a failed overflowing acquire takes no lock; key %q is locked", k)
		}
		setCounter(rules.FenceMax - 1)
		r := e.mustAcquire(e.b, k, 30*time.Second)
		if r.Fence != "900000000000000" {
			e.t.Errorf("rule: the fence may reach exactly %d; counter at %d, acquire got fence %s", int64(rules.FenceMax), int64(rules.FenceMax-1), r.Fence)
		}
		e.release(e.b, r.LockID)
		if _, err := e.b.Acquire(e.ctx, k, 30*time.Second); !errIs(err, syncguard.ErrInternal) {
			e.t.Errorf("rule: once a key's fence reached %d, further acquires fail with ErrInternal; got %v", int64(rules.FenceMax), err)
		}
	})
}

func init() {
	registerSQL("Fences/IncreaseWithANewBackendOnANewPool", func(e *sqlEnv) {
		k, r := e.hold("newbackend", 30*time.Second)
		e.release(e.b, r.LockID)
		nb := e.newBackend(e.h.Open(e.t), nil)
		n := e.mustAcquire(nb, k, 30*time.Second)
		if n.Fence <= r.Fence {
			e.t.Errorf("rule: fences strictly increase per key, also for a new Backend on a new pool; got %s after %s", n.Fence, r.Fence)
		}
		e.release(nb, n.LockID)
	})

	registerSQL("Fences/CounterRowHoldsLastFence", func(e *sqlEnv) {
		k, r := e.hold("counter", 30*time.Second)
		e.release(e.b, r.LockID)
		r = e.mustAcquire(e.b, k, 30*time.Second)
		if n, ok := e.fenceCounter(k); !ok || n != 2 {
			e.t.Errorf("rule: the fence counter row holds the last fence handed out; counter %d (present %v), last fence %s", n, ok, r.Fence)
		}
		e.release(e.b, r.LockID)
	})

	registerSerial("Fences/SurviveServerRestart", func(e *sqlEnv) {
		e.skipUnless(e.h.Restart != nil, "Restart")
		k, heldKey := e.key("restart"), e.key("heldacrossrestart")
		var last syncguard.Fence
		for i := 0; i < 3; i++ {
			r := e.mustAcquire(e.b, k, 30*time.Second)
			last = r.Fence
			e.release(e.b, r.LockID)
		}
		held := e.mustAcquire(e.b, heldKey, 60*time.Second)
		ctx, cancel := context.WithTimeout(e.ctx, e.slow().scale(20*time.Second))
		err := e.h.Restart(ctx)
		cancel()
		if err != nil {
			e.t.Fatalf("setup: Harness.Restart: %v", err)
		}
		var locked bool
		err = e.retryTransient(15*time.Second, func() (err error) {
			locked, err = e.b2.IsLocked(e.ctx, heldKey)
			return err
		})
		e.must(err, "IsLocked after a server restart (retrying transient errors)")
		if !locked {
			e.t.Errorf("rule: a lock acquired before a server crash and restart is still held after it; IsLocked(%q) = false", heldKey)
		}
		var r syncguard.AcquireResult
		err = e.retryTransient(15*time.Second, func() (err error) {
			r, err = e.b.Acquire(e.ctx, k, 30*time.Second)
			return err
		})
		e.must(err, "acquire after a server restart (retrying transient errors)")
		if !r.OK || r.Fence <= last {
			e.t.Errorf("rule: fences strictly increase across a server restart; got %+v after %s", r, last)
		}
		if c, _ := e.b.Acquire(e.ctx, heldKey, time.Second); c.OK {
			e.t.Errorf("rule: a lock held across a restart stays exclusive; acquire of %q succeeded with fence %s (holder fence %s)", heldKey, c.Fence, held.Fence)
		}
		if rel := e.release(e.b2, held.LockID); !rel.OK {
			e.t.Errorf("rule: a lock held across a restart can be released by its lockId; got %+v", rel)
		}
	})

	registerSQL("Fences/CountersNeverDeletedByCleanupInIsLocked", func(e *sqlEnv) {
		cb := e.newBackend(e.db, func(c *syncguard.Config) {
			c.CleanupInIsLocked = true
			c.CleanupInterval = 50 * time.Millisecond
		})
		expiring, live, released := e.key("expiring"), e.key("live"), e.key("released")
		rExp := e.mustAcquire(cb, expiring, 100*time.Millisecond)
		rLive := e.mustAcquire(cb, live, 60*time.Second)
		rRel := e.mustAcquire(cb, released, 30*time.Second)
		e.release(cb, rRel.LockID)
		fencesBefore := e.fenceTable()
		liveRow, _ := e.rawLockRow(live)
		// Cleanup may delete only rows expired more than 2 s ago (the spec's
		// guard); wait past that on the server clock, then poll.
		e.waitPast(ms(rExp.ExpiresAt) + 2000 + 50)
		deadline := time.Now().Add(e.slow().scale(5 * time.Second))
		deleted := false
		for !deleted && time.Now().Before(deadline) {
			if e.isLocked(cb, expiring) {
				e.t.Fatalf("rule: an expired lock is not locked; IsLocked(%q) = true", expiring)
			}
			if !e.isLocked(cb, live) {
				e.t.Fatalf("rule: cleanup never touches a live lock; IsLocked(%q) = false", live)
			}
			_, found := e.rawLockRow(expiring)
			deleted = !found
			if !deleted {
				time.Sleep(100 * time.Millisecond)
			}
		}
		if !deleted {
			e.t.Errorf("rule: with CleanupInIsLocked, IsLocked eventually deletes a lock row expired more than 2 s ago; row of %q still there %v later (%s)", expiring, e.slow().scale(5*time.Second), e.slow())
		}
		if after := e.fenceTable(); !maps.Equal(after, fencesBefore) {
			e.t.Errorf("rule: fence counter rows are never deleted or changed by cleanup; before %v after %v", fencesBefore, after)
		}
		if row, ok := e.rawLockRow(live); !ok || row != liveRow {
			e.t.Errorf("rule: cleanup never changes a live lock; before %+v after %+v (present %v)", liveRow, row, ok)
		}
		r := e.mustAcquire(cb, expiring, 30*time.Second)
		if r.Fence <= rExp.Fence {
			e.t.Errorf("rule: fences keep increasing after cleanup deleted the lock row; got %s after %s", r.Fence, rExp.Fence)
		}
		e.release(cb, r.LockID)
		e.release(cb, rLive.LockID)
	})

	registerSQL("Fences/CountersNeverDeletedByAnyOperation", func(e *sqlEnv) {
		keys := []string{e.key("ops1"), e.key("ops2"), e.key("ops3")}
		prev := map[string]int64{}
		checkpoint := func(step string) {
			e.t.Helper()
			cur := e.fenceTable()
			for k, v := range prev {
				if n, ok := cur[k]; !ok || n < v {
					e.t.Errorf("rule: fence counter rows are never deleted and never decrease; after %s counter %q went from %d to %d (present %v)", step, k, v, n, ok)
				}
			}
			prev = cur
		}
		var ids []string
		for _, k := range keys {
			ids = append(ids, e.mustAcquire(e.b, k, 150*time.Millisecond).LockID)
		}
		checkpoint("acquire")
		for _, k := range keys {
			e.isLocked(e.b, k)
			_, _ = e.b.LookupKey(e.ctx, k)
		}
		e.extend(e.b, ids[0], 150*time.Millisecond)
		checkpoint("isLocked, lookup and extend")
		e.release(e.b, ids[1])
		checkpoint("release")
		r, _ := e.b.LookupID(e.ctx, ids[0])
		if r != nil {
			e.waitPast(ms(r.ExpiresAt) + tolMs)
		} else {
			e.waitPast(e.serverNowMs() + 150 + tolMs)
		}
		for _, id := range ids {
			_, _ = e.b.Release(e.ctx, id)
			_, _ = e.b.Extend(e.ctx, id, time.Second)
		}
		checkpoint("release and extend of expired locks")
		if len(prev) != len(keys) {
			e.t.Errorf("rule: one fence counter row per key; %d rows for %d keys", len(prev), len(keys))
		}
	})

	registerSQL("Fences/OverflowLeavesCounterUnchanged", func(e *sqlEnv) {
		k := e.key("overflow")
		_, _, fk := e.derive(k)
		r := e.mustAcquire(e.b, k, 30*time.Second)
		e.release(e.b, r.LockID)
		setCounter := func(n int64) {
			e.exec(`UPDATE `+e.fencesTable()+` SET "fence" = $1 WHERE "fence_key" = $2`, n, fk)
		}
		setCounter(rules.FenceMax)
		res, err := e.b.Acquire(e.ctx, k, 30*time.Second)
		if !errIs(err, syncguard.ErrInternal) || res.OK {
			e.t.Errorf("rule: an acquire whose fence would pass %d fails with ErrInternal; counter at %d got %+v, %v", int64(rules.FenceMax), int64(rules.FenceMax), res, err)
		}
		if n, _ := e.fenceCounter(k); n != rules.FenceMax {
			e.t.Errorf("rule: a failed overflowing acquire leaves the counter unchanged; counter %d, want %d", n, int64(rules.FenceMax))
		}
		if _, ok := e.rawLockRow(k); ok || e.isLocked(e.b2, k) {
			e.t.Errorf("rule: a failed overflowing acquire writes no lock; key %q is locked or has a row", k)
		}
		setCounter(rules.FenceMax - 1)
		r = e.mustAcquire(e.b, k, 30*time.Second)
		if r.Fence != "900000000000000" {
			e.t.Errorf("rule: the fence may reach exactly %d; counter at %d, acquire got fence %s", int64(rules.FenceMax), int64(rules.FenceMax-1), r.Fence)
		}
		if n, _ := e.fenceCounter(k); n != rules.FenceMax {
			e.t.Errorf("rule: the counter holds the last fence handed out; counter %d after fence %s", n, r.Fence)
		}
		e.release(e.b, r.LockID)
		if _, err := e.b.Acquire(e.ctx, k, 30*time.Second); !errIs(err, syncguard.ErrInternal) {
			e.t.Errorf("rule: once a key's fence reached %d, further acquires fail with ErrInternal; got %v", int64(rules.FenceMax), err)
		}
	})

	registerSQL("Fences/WarnAboveThreshold", func(e *sqlEnv) {
		logs := &captureHandler{}
		lb := e.newBackend(e.db, func(c *syncguard.Config) { c.Logger = slog.New(logs) })
		k := e.key("warn")
		_, _, fk := e.derive(k)
		r := e.mustAcquire(lb, k, 30*time.Second)
		e.release(lb, r.LockID)
		e.exec(`UPDATE `+e.fencesTable()+` SET "fence" = $1 WHERE "fence_key" = $2`, int64(rules.FenceWarn-1), fk)
		r = e.mustAcquire(lb, k, 30*time.Second)
		if n := logs.warnings(); len(n) != 0 {
			e.t.Errorf("rule: a fence equal to the warning threshold %d is not warned about; fence %s logged %q", int64(rules.FenceWarn), r.Fence, n)
		}
		e.release(lb, r.LockID)
		r = e.mustAcquire(lb, k, 30*time.Second)
		w := logs.warnings()
		if len(w) == 0 {
			e.t.Errorf("rule: a fence above %d is logged as a warning; fence %s logged nothing", int64(rules.FenceWarn), r.Fence)
		}
		for _, line := range w {
			if strings.Contains(line, k) || strings.Contains(line, r.LockID) {
				e.t.Errorf("rule: warnings never contain a raw key or lockId; got %q", line)
			}
		}
		e.release(lb, r.LockID)
	})
}

// captureHandler records log lines (message and attributes) at Warn and above.
type captureHandler struct {
	mu    sync.Mutex
	lines []string
}

func (h *captureHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *captureHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Level < slog.LevelWarn {
		return nil
	}
	var b strings.Builder
	b.WriteString(r.Message)
	r.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	})
	h.mu.Lock()
	h.lines = append(h.lines, b.String())
	h.mu.Unlock()
	return nil
}
func (h *captureHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *captureHandler) WithGroup(string) slog.Handler      { return h }
func (h *captureHandler) warnings() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.lines...)
}
