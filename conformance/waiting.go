package conformance

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/syncguard/syncguard-go/driver"
	"github.com/syncguard/syncguard-go/syncguard"
)

// Cases of waiting for a contended key (syncguard.Lock, WithLock): woken on
// release, across pools and processes, when notifications reach the
// Backend; after the holder's expiry, always; never losing a wake-up;
// falling back to polling where notifications cannot work. See the waiting
// section of docs/design.md.
//
// Every wait here is given options under which only the property checked
// can end it before its timeout (a retry delay of an hour, a holder's TTL
// longer than the timeout), and the timeout is far longer than the
// property needs: a broken rule shows as an acquisition timeout, a slow
// machine does not.

// waitTimeout bounds every wait of these cases.
const waitTimeout = 15 * time.Second

// wakeOnly returns options under which a wait ends before its timeout only
// by a wake-up (a release or the holder's expiry): its one retry is due in
// an hour.
func wakeOnly() *syncguard.LockOptions {
	return &syncguard.LockOptions{TTL: 30 * time.Second, Acquisition: syncguard.AcquisitionOptions{
		MaxRetries: 1, RetryDelay: time.Hour, Backoff: "fixed",
		Jitter: "none", Timeout: waitTimeout}}
}

// polling returns options that retry every 100 ms up to the timeout.
func polling() *syncguard.LockOptions {
	return &syncguard.LockOptions{TTL: 30 * time.Second, Acquisition: syncguard.AcquisitionOptions{
		MaxRetries: 1 << 20, RetryDelay: 100 * time.Millisecond, Backoff: "fixed",
		Jitter: "none", Timeout: waitTimeout}}
}

// wakeOnRelease holds a key on pb, lets waiter (on pb2's Backend) wait for
// it with its only retry an hour away, releases, and checks that the
// waiter gets the key: woken by the release (rule), or, when pb2 gets no
// notifications, found by polling (fallbackRule).
func (e *sqlEnv) wakeOnRelease(waiter syncguard.Locker, rule, fallbackRule string) {
	e.t.Helper()
	st := e.notifications(e.pb2)
	k := e.key("wake")
	held := e.mustAcquire(e.pb, k, 60*time.Second)
	opts := wakeOnly()
	rule += " (its only retry was an hour away, the holder's TTL a minute)"
	if !st.Active {
		opts, rule = polling(), fallbackRule
	}
	ch := e.lockAsync(waiter, k, opts)
	e.pause(200 * time.Millisecond)
	if r := e.release(e.pb, held.LockID); !r.OK {
		e.t.Fatalf("rule: the holder's release succeeds; got %+v", r)
	}
	e.mustGet(ch, held.Fence, rule, e.pb2).Close()
}

// takeOverCrashed holds a key on pb with a TTL of 1.5 s and never releases
// it; waiter (on pb2's Backend), whose only retry is an hour away, must get
// it once the lock is no longer live, and not before.
func (e *sqlEnv) takeOverCrashed(waiter syncguard.Locker, rule string) {
	e.t.Helper()
	e.notifications(e.pb2)
	k := e.key("crashed")
	held := e.mustAcquire(e.pb, k, 1500*time.Millisecond)
	lease := e.mustGet(e.lockAsync(waiter, k, wakeOnly()), held.Fence,
		rule+" (the holder's TTL was 1.5 s, the waiter's only retry an hour away)")
	defer lease.Close()
	info, err := e.pb.LookupKey(e.ctx, k)
	e.must(err, "LookupKey")
	if info == nil {
		e.t.Fatalf("rule: the waiter holds the key; LookupKey found no live lock")
	}
	if !info.AcquiredAt.After(held.ExpiresAt.Add(tolMs * time.Millisecond)) {
		e.t.Errorf("rule: a waiter takes over only once the holder's lock is no longer live (expires_at_ms + %d ms); acquired at %d, holder expired at %d",
			tolMs, ms(info.AcquiredAt), ms(held.ExpiresAt))
	}
}

// callersLocker is a Locker of a caller's own around a Backend, as a team
// writes for tracing: it counts acquires and passes ctx on.
type callersLocker struct {
	syncguard.Locker
	rebuild  bool // return a result of its own making, field by field
	acquires atomic.Int64
}

func (c *callersLocker) Acquire(ctx context.Context, key string, ttl time.Duration) (syncguard.AcquireResult, error) {
	c.acquires.Add(1)
	r, err := c.Locker.Acquire(ctx, key, ttl)
	if c.rebuild {
		r = syncguard.AcquireResult{OK: r.OK, Reason: r.Reason, LockID: r.LockID, Fence: r.Fence, ExpiresAt: r.ExpiresAt}
	}
	return r, err
}

// noListen hides a dialect's optional capabilities (driver.Listener).
type noListen struct{ driver.Dialect }

// dialect returns the dialect the case's backends use.
func (e *sqlEnv) dialect() driver.Dialect {
	if e.h.Dialect != nil {
		return e.h.Dialect
	}
	d, ok := driver.Lookup(e.db.Driver())
	if !ok {
		e.t.Fatalf("setup: no dialect registered for %T", e.db.Driver())
	}
	return d
}

// notifications settles b's LISTEN connection and checks its status against
// what the harness allows: a dialect with driver.Listener on a connection
// that keeps session state must be woken by notifications.
func (e *sqlEnv) notifications(b *syncguard.Backend) syncguard.NotificationStatus {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.ctx, 10*time.Second)
	defer cancel()
	e.t.Cleanup(func() { b.Close() }) // its LISTEN connection would linger 30 s
	st := b.NotificationStatus(ctx, true)
	_, can := e.dialect().(driver.Listener)
	switch {
	case st.Active:
	case can && !e.h.NoSessionState:
		e.t.Fatalf("rule: a Backend whose dialect implements driver.Listener, on connections that keep session state, is woken by notifications; it falls back to polling: %s", st.Reason)
	case st.Reason == "":
		e.t.Errorf("rule: a Backend whose waiting falls back to polling says why; NotificationStatus.Reason is empty")
	default:
		e.t.Logf("notifications unavailable here (%s): checking the polling fallback", st.Reason)
	}
	return st
}

type lockOutcome struct {
	lease *syncguard.Lease
	err   error
}

// lockAsync starts Lock on b in a goroutine.
func (e *env) lockAsync(b syncguard.Locker, key string, opts *syncguard.LockOptions) <-chan lockOutcome {
	ch := make(chan lockOutcome, 1)
	go func() {
		l, err := syncguard.Lock(e.ctx, b, key, opts)
		ch <- lockOutcome{l, err}
	}()
	return ch
}

// mustGet waits for a Lock started by lockAsync; it must succeed with a
// fence above after's. A failure reports the waiters' Backends' status.
func (e *env) mustGet(ch <-chan lockOutcome, after syncguard.Fence, rule string, waiters ...*syncguard.Backend) *syncguard.Lease {
	e.t.Helper()
	status := func() string {
		var b strings.Builder
		for _, w := range waiters {
			fmt.Fprintf(&b, "; waiter's Backend: %+v", w.NotificationStatus(e.ctx, false))
		}
		return b.String()
	}
	var o lockOutcome
	select {
	case o = <-ch:
	case <-e.ctx.Done():
		e.t.Fatalf("rule: %s; the waiter had not returned when the case timed out%s", rule, status())
	}
	if o.err != nil {
		e.t.Fatalf("rule: %s; the waiter got %v%s", rule, o.err, status())
	}
	if o.lease.Fence() <= after {
		e.t.Errorf("rule: the next holder gets a greater fence; %s after %s", o.lease.Fence(), after)
	}
	return o.lease
}

// pause lets a waiter started just before reach its wait. It is pacing,
// not an assertion: the cases hold whatever the interleaving.
func (e *env) pause(d time.Duration) {
	select {
	case <-time.After(d):
	case <-e.ctx.Done():
	}
}

func init() {
	registerSQL("Waiting/WakeOnReleaseAcrossPools", func(e *sqlEnv) {
		// A holder on one pool releases; a waiter on another pool (another
		// process, as far as the library can tell) whose only retry is an
		// hour away gets the key, so it was woken by the release.
		e.wakeOnRelease(e.pb2, "a release on one pool wakes a waiter on another pool",
			"without notifications, a release on another pool is found by the waiter's next retry")
	})

	registerSQL("Waiting/WakeThroughCallersWrapper", func(e *sqlEnv) {
		// The waiter's Backend is wrapped in a Locker of the caller's own
		// (tracing, metrics): waiting through it is woken on release as
		// on the Backend itself, and every attempt goes through the
		// wrapper.
		w := &callersLocker{Locker: e.pb2}
		e.wakeOnRelease(w, "a release wakes a waiter whose Backend is wrapped in a Locker of the caller's own",
			"without notifications, a waiter through a caller's wrapper finds the release by its next retry")
		if n := w.acquires.Load(); n < 2 {
			e.t.Errorf("rule: Lock's attempts go through the caller's wrapper; it saw %d acquires, want at least 2 (the failed one and the one after the release)", n)
		}
	})

	registerSQL("Waiting/WakeAfterCrashedHolderExpiry", func(e *sqlEnv) {
		// The holder never releases (it crashed). The waiter learned the
		// holder's expiry from its failed attempt and tries again once the
		// lock is no longer live: never before, and without waiting for its
		// retry, due in an hour.
		e.takeOverCrashed(e.pb2, "a waiter gets the key of a crashed holder once that lock expired")
	})

	registerSQL("Waiting/WakeAfterExpiryThroughRebuildingWrapper", func(e *sqlEnv) {
		// The same through a caller's wrapper that returns results of its
		// own making: what the failed attempt learned of the holder's
		// expiry still reaches the waiting.
		e.takeOverCrashed(&callersLocker{Locker: e.pb2, rebuild: true},
			"a waiter through a wrapper that rebuilds its results gets the key of a crashed holder once that lock expired")
	})

	registerSQL("Waiting/FallbackWhenNotificationsUnavailable", func(e *sqlEnv) {
		// A dialect without driver.Listener: waiting polls, wakes the
		// waiters of its own Backend on release at once, and says so once.
		logs := &captureHandler{}
		bf := e.newBackend(e.db2, func(c *syncguard.Config) {
			c.Dialect = noListen{e.dialect()}
			c.Logger = slog.New(logs)
		})
		if st := bf.NotificationStatus(e.ctx, true); st.Active || !strings.Contains(st.Reason, "driver.Listener") {
			e.t.Errorf("rule: a Backend whose dialect lacks driver.Listener reports that waiting polls, and why; got %+v", st)
		}

		// A release by the same Backend wakes its waiter without a retry.
		k := e.key("fallback-local")
		holder, err := syncguard.Lock(e.ctx, bf, k, &syncguard.LockOptions{TTL: 60 * time.Second})
		e.must(err, "Lock of a free key")
		ch := e.lockAsync(bf, k, wakeOnly())
		e.pause(200 * time.Millisecond)
		if _, err := holder.Release(e.ctx); err != nil {
			e.t.Fatalf("rule: the holder's release succeeds; got %v", err)
		}
		e.mustGet(ch, holder.Fence(), "without notifications, a release by the same Backend still wakes its waiter (its only retry was an hour away)").Close()

		// A release on another pool is found by the next retry.
		k2 := e.key("fallback-remote")
		held := e.mustAcquire(e.pb, k2, 60*time.Second)
		ch = e.lockAsync(bf, k2, polling())
		e.pause(200 * time.Millisecond)
		e.release(e.pb, held.LockID)
		e.mustGet(ch, held.Fence, "without notifications, a release on another pool is found by the waiter's next retry").Close()

		n := 0
		for _, w := range logs.warnings() {
			if strings.Contains(w, "falls back to polling") {
				n++
			}
		}
		if n != 1 {
			e.t.Errorf("rule: the fallback to polling is logged once per Backend; %d records after two waits: %q", n, logs.warnings())
		}
	})

	registerSQL("Waiting/OrderAcrossLateListeners", func(e *sqlEnv) {
		// Four processes (a Backend on a pool of its own each) start
		// waiting for a held key one after the other; each one's LISTEN
		// connection starts with its first wait, after the earlier ones
		// queued, so it never heard their q. The key must still go to them
		// in the order they started waiting (their q): a late listener
		// learns the earlier places by its sync request. The order is read
		// from the fences, not from timing. A waiter that does not attempt
		// within 20 ms of its turn loses it to the next, by design (a
		// stall on a loaded machine can do that), so the case plays
		// several rounds and asks for the order in most of them; a process
		// that ignores the queue breaks it in most rounds.
		if !e.notifications(e.pb2).Active {
			e.t.Logf("notifications unavailable here: the queue across processes needs them (see the claim in docs/design.md)")
			return
		}
		const rounds, need = 5, 3
		inOrder := 0
		var ranks [][]int
		for range rounds {
			got := e.lateListenersRound(4)
			ranks = append(ranks, got)
			if slices.IsSorted(got) {
				inOrder++
			}
		}
		e.t.Logf("acquisition rank of waiters 1..4 (by fence), per round: %v", ranks)
		if inOrder < need {
			e.t.Errorf("rule: the key is handed on in the order the waiters started waiting (their q), across processes, "+
				"even to processes that started listening after others queued; in order in %d of %d rounds (want at least %d); "+
				"rank of waiters 1..4 per round: %v", inOrder, rounds, need, ranks)
		}
	})

	registerSQL("Waiting/NoLostWakeupWhenReleaseRacesWaiter", func(e *sqlEnv) {
		// The release lands anywhere from before the waiter's first attempt
		// to after it started waiting. Whatever the interleaving, the waiter
		// (whose only retry is an hour away, the holder's TTL a minute) gets
		// the key: a release between its failed attempt and its wait is not
		// lost. Holder and waiter share a Backend (woken in-process), and,
		// with notifications, are on two pools (woken by notification).
		type pair struct {
			name             string
			holder, waiter   *syncguard.Backend
			needNotification bool
		}
		pairs := []pair{{"one Backend", e.pb, e.pb, false}, {"two pools", e.pb, e.pb2, true}}
		active := e.notifications(e.pb2).Active
		const rounds = 24
		for _, p := range pairs {
			if p.needNotification && !active {
				continue
			}
			k := e.key("race")
			for i := range rounds {
				held := e.mustAcquire(p.holder, k, 60*time.Second)
				ch := e.lockAsync(p.waiter, k, wakeOnly())
				// 0 to ~2.3 ms: before, during and after the first attempt.
				time.Sleep(time.Duration(i) * 100 * time.Microsecond)
				if r := e.release(p.holder, held.LockID); !r.OK {
					e.t.Fatalf("rule: the holder's release succeeds; got %+v", r)
				}
				lease := e.mustGet(ch, held.Fence, "a release racing a waiter that is starting to wait still wakes it ("+p.name+")", p.waiter)
				if _, err := lease.Release(e.ctx); err != nil {
					e.t.Fatalf("rule: the waiter's release succeeds; got %v", err)
				}
			}
		}
	})
}

// lateListenersRound is one round of Waiting/OrderAcrossLateListeners with
// n waiting processes; it returns each waiter's rank in the acquisition
// order (1: first), read from the fences. Pacing (no rule depends on it):
// the round watches the channel itself, starts the next waiter once the
// last one's q is committed, and releases once every late listener's sync
// request was answered (so every process gets the answers before the
// release), and a while after.
func (e *sqlEnv) lateListenersRound(n int) []int {
	e.t.Helper()
	lst, _ := e.dialect().(driver.Listener)
	lctx, cancel := context.WithTimeout(e.ctx, 10*time.Second)
	nc, err := lst.Listen(lctx, e.db, "syncguard:"+e.cfg.TableName)
	cancel()
	e.must(err, "LISTEN on the lock table's channel (the case's own)")
	defer nc.Close()
	var order []string       // wids, in the order of their first q
	seen := map[string]int{} // q notifications seen, per wid
	k := e.key("order")
	kh := ""
	// awaitQ reads the channel until m wids are known and the i-th has
	// been announced times(i) times.
	awaitQ := func(m int, times func(i int) int, what string) {
		for {
			done := len(order) >= m
			for i := 0; done && i < m; i++ {
				done = seen[order[i]] >= times(i)
			}
			if done {
				return
			}
			p, err := nc.Wait(e.ctx)
			if err != nil {
				e.t.Fatalf("rule: %s; the channel had not shown it when the case ended (%v); q seen: %v", what, err, seen)
			}
			f := strings.Fields(p)
			if len(f) < 4 || f[0] != "q" || (kh != "" && f[1] != kh) {
				continue
			}
			kh = f[1]
			if seen[f[2]] == 0 {
				order = append(order, f[2])
			}
			seen[f[2]]++
		}
	}
	held := e.mustAcquire(e.pb, k, 60*time.Second)
	chs := make([]<-chan lockOutcome, n)
	for i := range n {
		db := e.h.Open(e.t)
		defer db.Close()
		// Connections opened ahead, so that no turn is spent dialling.
		var conns []*sql.Conn
		for range 2 {
			c, err := db.Conn(e.ctx)
			e.must(err, "opening a connection of a waiter's pool")
			conns = append(conns, c)
		}
		for _, c := range conns {
			c.Close()
		}
		b := e.newBackend(db, nil)
		defer b.Close()
		chs[i] = e.lockAsync(b, k, wakeOnly())
		awaitQ(i+1, func(int) int { return 1 }, fmt.Sprintf("waiter %d announces itself (q) once its LISTEN connection is confirmed", i+1))
	}
	// Waiter j's process answers the sync request of each later one.
	awaitQ(n, func(j int) int { return 1 + (n - 1 - j) },
		"a process that starts listening asks the others to announce their queued waiters again (s), and each does (q)")
	e.pause(300 * time.Millisecond) // the last process's attempts before it learned the queue end
	if r := e.release(e.pb, held.LockID); !r.OK {
		e.t.Fatalf("rule: the holder's release succeeds; got %+v", r)
	}
	fences := make([]syncguard.Fence, n)
	for pending := n; pending > 0; {
		for i, ch := range chs {
			if ch == nil {
				continue
			}
			select {
			case o := <-ch:
				chs[i] = nil
				pending--
				if o.err != nil {
					e.t.Fatalf("rule: every waiter gets the key in turn; waiter %d got %v", i+1, o.err)
				}
				fences[i] = o.lease.Fence()
				if _, err := o.lease.Release(e.ctx); err != nil {
					e.t.Fatalf("rule: the holder's release succeeds; waiter %d got %v", i+1, err)
				}
			default:
			}
		}
		e.pause(5 * time.Millisecond)
	}
	rank := make([]int, n)
	for i := range n {
		rank[i] = 1
		for j := range n {
			if fences[j] < fences[i] {
				rank[i]++
			}
		}
	}
	return rank
}
