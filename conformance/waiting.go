package conformance

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/syncguard/syncguard-go/driver"
	"github.com/syncguard/syncguard-go/internal/rules"
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
	// Release once the waiter's first attempt found the key held (however
	// long a loaded server takes to answer it).
	first := make(chan struct{})
	var once sync.Once
	opts.OnAttempt = func(r syncguard.AcquireResult, err error) {
		if err == nil && !r.OK {
			once.Do(func() { close(first) })
		}
	}
	ch := e.lockAsync(waiter, k, opts)
	select {
	case <-first:
	case <-e.ctx.Done():
		e.t.Fatalf("rule: %s; the waiter's first attempt did not find the key held before the case timed out", rule)
	}
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
	// Not live from expires_at_ms + tolerance on (rules.IsLive): a waiter
	// that polls may take it in that very millisecond.
	if rules.IsLive(ms(held.ExpiresAt), ms(info.AcquiredAt)) {
		e.t.Errorf("rule: a waiter takes over only once the holder's lock is no longer live (expires_at_ms + %d ms); acquired at %d, holder expired at %d",
			tolMs, ms(info.AcquiredAt), ms(held.ExpiresAt))
	}
}

// noListen returns d without driver.Listener, keeping its other optional
// capabilities: without driver.BackendPIDReader a Backend behind a
// transaction-mode pooler could not tell, and would prepare statements,
// which the pooler may run as another client's statement of the same name
// (an earlier case's, on its own tables: CI once saw a fence 1 after 1).
func noListen(d driver.Dialect) driver.Dialect {
	type pid = driver.BackendPIDReader
	type one = driver.OneShot
	p, isP := d.(pid)
	o, isO := d.(one)
	switch {
	case isP && isO:
		return struct {
			driver.Dialect
			pid
			one
		}{d, p, o}
	case isP:
		return struct {
			driver.Dialect
			pid
		}{d, p}
	case isO:
		return struct {
			driver.Dialect
			one
		}{d, o}
	}
	return struct{ driver.Dialect }{d}
}

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
	st := b.NotificationStatus(ctx)
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
			ctx, cancel := context.WithTimeout(e.ctx, time.Second)
			fmt.Fprintf(&b, "; waiter's Backend: %+v", w.NotificationStatus(ctx))
			cancel()
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
		// (tracing, metrics) that forwards Queue: waiting
		// through it is woken on release as on the Backend itself, and
		// every attempt goes through the wrapper.
		w := &callersLocker{Locker: e.pb2, queue: true}
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

	registerSQL("Waiting/WakeAfterExpiryThroughPlainWrapper", func(e *sqlEnv) {
		// The same through a caller's wrapper that forwards only Acquire
		// (no Queue): Lock polls through it, and what the
		// failed attempt's result says of the holder's expiry (RetryIn)
		// still ends the wait then, not at the retry an hour away.
		e.takeOverCrashed(&callersLocker{Locker: e.pb2},
			"a waiter through a wrapper without Queue gets the key of a crashed holder once that lock expired")
	})

	registerSQL("Waiting/FallbackWhenNotificationsUnavailable", func(e *sqlEnv) {
		// A dialect without driver.Listener: waiting polls, wakes the
		// waiters of its own Backend on release at once, and says so once.
		logs := &captureHandler{}
		bf := e.newBackend(e.db2, func(c *syncguard.Config) {
			c.Dialect = noListen(e.dialect())
			c.Logger = slog.New(logs)
		})
		if st := bf.NotificationStatus(e.ctx); st.Active || !strings.Contains(st.Reason, "driver.Listener") {
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

	registerSQL("Waiting/OrderAcrossProcesses", func(e *sqlEnv) {
		// Four processes (a Backend on a pool of its own each) start
		// waiting for a held key one after the other, each once the one
		// before has queued. The key goes to them in that order, every
		// round: the queue is rows in the tables, whatever each process
		// hears (the order is read from the fences, not from timing).
		const rounds = 3
		for r := range rounds {
			if got := e.orderRound(4); !slices.IsSorted(got) {
				e.t.Fatalf("rule: the key is handed on in the order the waiters queued, across processes; round %d: rank of waiters 1..4 by fence: %v", r+1, got)
			}
		}
	})

	registerSQL("Waiting/HandOffInTheReleaseCommit", func(e *sqlEnv) {
		// The release hands the key to the first waiter in its own commit:
		// right after it returns, the key is held again, with a greater
		// fence, although the waiter (whose attempts are held back here
		// once a notification reaches it) has not attempted since.
		if !e.notifications(e.pb2).Active {
			e.t.Logf("notifications unavailable here: a release hands the key only to a waiter they reach (Waiting/PollingHeadTakesTheFreeKey)")
			return
		}
		k := e.key("handoff")
		held := e.mustAcquire(e.pb, k, 60*time.Second)
		gate := &gatedLocker{Locker: e.pb2, open: make(chan struct{})}
		ch := e.lockAsync(gate, k, wakeOnly())
		e.awaitQueued(k, 1, true)
		gate.closed.Store(true)
		if r := e.release(e.pb, held.LockID); !r.OK {
			e.t.Fatalf("rule: the holder's release succeeds; got %+v", r)
		}
		released := time.Now()
		info, err := e.pb.LookupKey(e.ctx, k)
		e.must(err, "LookupKey")
		if info == nil || info.Fence <= held.Fence {
			e.t.Fatalf("rule: a release hands the key to the first live waiter in the same commit; right after it the key has %+v (released fence %s)", info, held.Fence)
		}
		close(gate.open)
		lease := e.mustGet(ch, held.Fence, "the waiter finds the key handed to it")
		if lease.Fence() != info.Fence {
			e.t.Errorf("rule: the waiter holds the lock the release created for it; fence %s, created %s", lease.Fence(), info.Fence)
		}
		if until := lease.HeldUntil(); until.After(released.Add(wakeOnly().TTL)) {
			e.t.Errorf("rule: a lease of a key handed over counts its TTL from the release, not from the waiter's later attempt; held until %v after the release, TTL %v",
				until.Sub(released), wakeOnly().TTL)
		}
		lease.Close()
	})

	registerSQL("Waiting/PollingHeadTakesTheFreeKey", func(e *sqlEnv) {
		// Waiters that no notification reaches (a dialect without
		// driver.Listener) are not handed the key, which would sit granted
		// until their next attempt: the first of them takes the free key
		// itself, and the one behind it cannot take it first.
		bf := e.newBackend(e.db2, func(c *syncguard.Config) { c.Dialect = noListen(e.dialect()) })
		k := e.key("pollhead")
		held := e.mustAcquire(e.pb, k, 60*time.Second)
		first := e.lockAsync(bf, k, wakeOnly())
		e.awaitQueued(k, 1, false)
		second := e.lockAsync(bf, k, wakeOnly())
		e.awaitQueued(k, 2, false)
		e.release(e.pb, held.LockID)
		l1 := e.mustGet(first, held.Fence, "the first waiter that polls takes the free key")
		select {
		case o := <-second:
			e.t.Fatalf("rule: a waiter behind a polling first waiter does not take the key before it; it got %v, %v", o.lease, o.err)
		default:
		}
		f1 := l1.Fence()
		l1.Close()
		e.mustGet(second, f1, "the second waiter gets the key after the first").Close()
	})

	registerSQL("Waiting/TwoKeysAtOnce", func(e *sqlEnv) {
		// A Backend's first waiters start on two keys at once, before its
		// LISTEN connection is open: it then listens on both channels
		// together and stays up (lib/pq's closed on two LISTENs in one
		// query), and each waiter gets its key.
		b := e.newBackend(e.db2, nil)
		k1, k2 := e.key("two-a"), e.key("two-b")
		h1, h2 := e.mustAcquire(e.pb, k1, 60*time.Second), e.mustAcquire(e.pb, k2, 60*time.Second)
		c1, c2 := e.lockAsync(b, k1, polling()), e.lockAsync(b, k2, polling())
		e.awaitQueued(k1, 1)
		e.awaitQueued(k2, 1)
		e.pause(200 * time.Millisecond) // the LISTENs, if any, are done
		e.notifications(b)              // a Backend that can listen still does
		e.release(e.pb, h1.LockID)
		e.release(e.pb, h2.LockID)
		e.mustGet(c1, h1.Fence, "a waiter on the first of two keys gets it").Close()
		e.mustGet(c2, h2.Fence, "a waiter on the second of two keys gets it").Close()
	})

	registerSQL("Waiting/GivingUpLeavesTheQueue", func(e *sqlEnv) {
		// A waiter that gives up (its context cancelled) leaves the queue:
		// the release hands the key to the waiter behind it.
		k := e.key("giveup")
		held := e.mustAcquire(e.pb, k, 60*time.Second)
		ctx, cancel := context.WithCancel(e.ctx)
		first := make(chan error, 1)
		go func() {
			_, err := syncguard.Lock(ctx, e.pb2, k, wakeOnly())
			first <- err
		}()
		e.awaitQueued(k, 1)
		ch := e.lockAsync(e.pb2, k, wakeOnly())
		e.awaitQueued(k, 2)
		cancel()
		if err := <-first; !errors.Is(err, syncguard.ErrAborted) {
			e.t.Fatalf("rule: a cancelled wait ends with Aborted; got %v", err)
		}
		e.awaitQueued(k, 1)
		e.release(e.pb, held.LockID)
		e.mustGet(ch, held.Fence, "the key goes to the waiter behind one that gave up").Close()
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

// orderRound is one round of Waiting/OrderAcrossProcesses with n waiting
// processes; it returns each waiter's rank in the acquisition order (1:
// first), read from the fences.
func (e *sqlEnv) orderRound(n int) []int {
	e.t.Helper()
	k := e.key("order")
	held := e.mustAcquire(e.pb, k, 60*time.Second)
	chs := make([]<-chan lockOutcome, n)
	for i := range n {
		db := e.h.Open(e.t)
		defer db.Close()
		b := e.newBackend(db, nil)
		defer b.Close()
		chs[i] = e.lockAsync(b, k, wakeOnly())
		e.awaitQueued(k, i+1)
	}
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
		e.pause(2 * time.Millisecond)
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

// awaitQueued waits until key has n rows in the queue of waiters (pacing
// between waiters that must queue in a known order), all of them notified
// when notified is set. The tombstone a waiter leaves when it gives up
// (ttl_ms 0) is not in the queue.
func (e *sqlEnv) awaitQueued(key string, n int, notified ...bool) {
	e.t.Helper()
	_, sk, _ := e.derive(key)
	q := fmt.Sprintf(`SELECT count(*) FROM %s WHERE "key" = $1 AND "ttl_ms" <> 0`, rules.QuoteIdent(e.cfg.TableName+"_waiters"))
	if len(notified) > 0 && notified[0] {
		q += ` AND "notified"`
	}
	for {
		var got int
		e.must(e.db.QueryRowContext(e.ctx, q, sk).Scan(&got), "counting the queue of waiters")
		if got == n {
			return
		}
		select {
		case <-time.After(2 * time.Millisecond):
		case <-e.ctx.Done():
			e.t.Fatalf("rule: a waiter whose attempt failed queues (a row in %s_waiters); %d rows for the key, want %d", e.cfg.TableName, got, n)
		}
	}
}
