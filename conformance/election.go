package conformance

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/syncguard/syncguard-go/election"
	"github.com/syncguard/syncguard-go/syncguard"
)

// Election: the election package (github.com/syncguard/syncguard-go/election)
// on the backend. Every bound below is a safety bound (a bug exceeds it);
// the orderings are read from the backend's clock and its lock rows, never
// from how fast this machine runs.

// failExtends is a backend whose extends fail (as in an outage) once fail
// is set; everything else, ctx included, passes through.
type failExtends struct {
	syncguard.LockBackend
	fail atomic.Bool
}

func (f *failExtends) Extend(ctx context.Context, lockID string, ttl time.Duration) (syncguard.ExtendResult, error) {
	if f.fail.Load() {
		return syncguard.ExtendResult{}, &syncguard.Error{Op: "extend", Code: syncguard.ErrServiceUnavailable, Msg: "conformance: extends fail"}
	}
	return f.LockBackend.Extend(ctx, lockID, ttl)
}

// countLookups counts the LookupKey calls through it (Observe's reads).
type countLookups struct {
	syncguard.LockBackend
	n atomic.Int64
}

func (c *countLookups) LookupKey(ctx context.Context, key string) (*syncguard.LockInfo, error) {
	c.n.Add(1)
	return c.LockBackend.LookupKey(ctx, key)
}

func (c *countLookups) Unwrap() syncguard.LockBackend { return c.LockBackend }

// nextLeader returns Observe's next report; the case fails (rule) when
// none comes before its deadline.
func (e *env) nextLeader(obs <-chan *election.Leader, rule string) *election.Leader {
	e.t.Helper()
	select {
	case l := <-obs:
		return l
	case <-e.ctx.Done():
		e.t.Fatal(rule + "; nothing came")
		return nil
	}
}

func (e *env) election(b syncguard.LockBackend, key, id string, ttl time.Duration) *election.Election {
	e.t.Helper()
	el, err := election.New(b, key, &election.Options{Identity: id, TTL: ttl, PollInterval: 10 * time.Millisecond, Recampaign: time.Millisecond})
	e.must(err, "election.New")
	return el
}

func init() {
	register("Election/OneLeaderAtATimeTermsIncrease", func(e *env) {
		k := e.key("election")
		const terms = 9
		ctx, stop := context.WithCancel(e.ctx)
		defer stop()
		var (
			mu      sync.Mutex
			active  int
			seen    []syncguard.Fence
			lastEnd int64 // the backend's clock when the last term's work ended
		)
		var wg sync.WaitGroup
		for i := range 3 {
			el := e.election(e.pick(i), k, fmt.Sprintf("candidate-%d", i), 30*time.Second)
			wg.Go(func() {
				err := el.Run(ctx, func(ctx context.Context, term *election.Term) error {
					mu.Lock()
					active++
					if active != 1 {
						e.t.Errorf("rule: one leader at a time; %d leaders' work runs at once", active)
					}
					if n := len(seen); n > 0 && term.Fence() <= seen[n-1] {
						e.t.Errorf("rule: terms strictly increase across leaders; %s after %s", term.Fence(), seen[n-1])
					}
					seen = append(seen, term.Fence())
					prevEnd, done := lastEnd, len(seen) >= terms
					mu.Unlock()
					l, err := el.Leader(ctx)
					if err == nil && (l == nil || l.Identity != el.Identity() || l.Term != term.Fence()) {
						e.t.Errorf("rule: the backend shows the leader (%s, term %s) during its term; got %+v", el.Identity(), term.Fence(), l)
					}
					if err == nil && l != nil && ms(l.Since) < prevEnd {
						e.t.Errorf("rule: by the backend's clock a term begins after the previous one ended; began %d, previous ended %d", ms(l.Since), prevEnd)
					}
					mu.Lock()
					active--
					lastEnd = e.nowMs()
					mu.Unlock()
					if done {
						stop()
					}
					return nil
				})
				if err != nil {
					e.t.Errorf("rule: Run returns nil when its context ends; got %v", err)
				}
			})
		}
		wg.Wait()
		if len(seen) < terms {
			e.t.Errorf("rule: candidates are elected in turn; %d terms", len(seen))
		}
	})

	register("Election/LeaderContextEndsBeforeTheLeaseWhenExtendsFail", func(e *env) {
		k := e.key("election-loss")
		fb := &failExtends{LockBackend: e.b}
		const ttl = 3 * time.Second
		term, err := e.election(fb, k, "leader", ttl).Campaign(e.ctx)
		e.must(err, "Campaign")
		lockExpiry := term.Lease().ExpiresAt()
		fb.fail.Store(true)
		// A follower campaigns meanwhile: it is elected only once the
		// leader's lock has expired by the backend's clock.
		got := make(chan *election.Term, 1)
		go func() {
			t, err := e.election(e.b2, k, "follower", ttl).Campaign(e.ctx)
			if err != nil {
				e.t.Errorf("follower: %v", err)
			}
			got <- t
		}()
		select {
		case <-term.Done():
		case t := <-got:
			e.t.Fatalf("rule: the leader's context ends before its lease does; the follower was elected (term %v) while it had not", t.Fence())
		}
		if !errors.Is(term.Err(), syncguard.ErrLockLost) {
			e.t.Errorf("rule: a term whose extends fail ends with ErrLockLost; got %v", term.Err())
		}
		next := <-got
		if next == nil {
			return
		}
		defer next.Resign(e.ctx) //nolint:errcheck
		l, err := e.election(e.b, k, "observer", ttl).Leader(e.ctx)
		e.must(err, "Leader")
		if l == nil || l.Term <= term.Fence() || ms(l.Since) < ms(lockExpiry)+tolMs {
			e.t.Errorf("rule: the follower's term (higher) begins once the lost leader's lock expired (%d + tolerance); got %+v", ms(lockExpiry), l)
		}
	})

	register("Election/CrashedLeaderReplacedAtItsExpiry", func(e *env) {
		k := e.key("election-crash")
		// A leader that crashed: its lock is never extended nor released.
		// Its TTL leaves the Leader check below room on a loaded machine
		// (with 2 s the lock had expired before Leader read it, at load 30).
		crashed, err := syncguard.Lock(e.ctx, e.b, k, &syncguard.LockOptions{TTL: 5 * time.Second, Identity: "crashed"})
		e.must(err, "Lock")
		defer crashed.Close()
		el := e.election(e.b2, k, "follower", 10*time.Second)
		if l, err := el.Leader(e.ctx); err != nil || l == nil || l.Identity != "crashed" || l.Term != crashed.Fence() {
			e.t.Errorf("rule: Leader reports the current leader's identity and term; got %+v, %v", l, err)
		}
		term, err := el.Campaign(e.ctx)
		e.must(err, "Campaign")
		defer term.Resign(e.ctx) //nolint:errcheck
		l, err := el.Leader(e.ctx)
		e.must(err, "Leader")
		if l == nil || l.Identity != "follower" || l.Term <= crashed.Fence() || ms(l.Since) < ms(crashed.ExpiresAt())+tolMs {
			e.t.Errorf("rule: a crashed leader's follower takes over at its expiry (%d + tolerance), with a higher term; got %+v", ms(crashed.ExpiresAt()), l)
		}
	})

	register("Election/ObserverSeesEveryChangeInOrder", func(e *env) {
		k := e.key("election-observe")
		ctx, stop := context.WithCancel(e.ctx)
		defer stop()
		obs := e.election(e.b2, k, "observer", 10*time.Second).Observe(ctx)
		next := func() *election.Leader { return e.nextLeader(obs, "rule: Observe reports a change") }
		if l := next(); l != nil {
			e.t.Fatalf("rule: Observe reports no leader first when there is none; got %+v", l)
		}
		var last syncguard.Fence
		for i := range 4 {
			el := e.election(e.pick(i), k, fmt.Sprintf("leader-%d", i), 10*time.Second)
			term, err := el.Campaign(e.ctx)
			e.must(err, "Campaign")
			l := next()
			if l == nil || l.Identity != el.Identity() || l.Term != term.Fence() || l.Term <= last {
				e.t.Fatalf("rule: Observe reports each new leader and term, in order; want %s term %s, got %+v", el.Identity(), term.Fence(), l)
			}
			last = l.Term
			e.must(term.Resign(e.ctx), "Resign")
			if l := next(); l != nil {
				e.t.Fatalf("rule: Observe reports \"no leader\" after a resignation with no candidate; got %+v", l)
			}
		}
	})

	registerSQL("Election/ObserverReadsWhenAResignHandsOver", func(e *sqlEnv) {
		// The observer's polls are an hour apart: it sees the hand-off of a
		// resignation only through its notification (Backend.WatchKey).
		// Without notifications it polls (every 10 ms here).
		k := e.key("election-observe-handoff")
		active := e.notifications(e.pb2).Active && e.notifications(e.pb).Active
		poll, rule := time.Hour, "rule: Observe reads the leader when a resignation hands the election over (its notification); its next poll was an hour away"
		if !active {
			poll, rule = 10*time.Millisecond, "rule: without notifications Observe sees the resignation's hand-off at its next poll"
		}
		ta, err := e.election(e.pb, k, "a", 30*time.Second).Campaign(e.ctx)
		e.must(err, "Campaign")
		ctx, stop := context.WithCancel(e.ctx)
		defer stop()
		counted := &countLookups{LockBackend: e.pb2}
		observer, err := election.New(counted, k, &election.Options{Identity: "observer", PollInterval: poll})
		e.must(err, "election.New")
		obs := observer.Observe(ctx)
		next := func() *election.Leader { return e.nextLeader(obs, rule) }
		if l := next(); l == nil || l.Identity != "a" {
			e.t.Fatalf("rule: Observe reports the current leader first; got %+v", l)
		}
		// Its second read follows the LISTEN on the key's channel: from then
		// on a hand-off's notification reaches it.
		for active && counted.n.Load() < 2 && e.ctx.Err() == nil {
			time.Sleep(5 * time.Millisecond)
		}
		got := make(chan *election.Term, 1)
		go func() {
			t, err := e.election(e.pb, k, "b", 30*time.Second).Campaign(e.ctx)
			if err != nil {
				e.t.Errorf("follower: %v", err)
			}
			got <- t
		}()
		e.awaitQueued(k, 1, active)
		e.must(ta.Resign(e.ctx), "Resign")
		tb := <-got
		if tb == nil {
			return
		}
		defer tb.Resign(e.ctx) //nolint:errcheck
		l := next()
		if !active && l == nil {
			l = next() // polling may see the key free before b takes it
		}
		if l == nil || l.Identity != "b" || l.Term != tb.Fence() {
			e.t.Errorf("%s; want b term %s, got %+v", rule, tb.Fence(), l)
		}
	})

	registerSQL("Election/ResignHandsOverInOneHandOff", func(e *sqlEnv) {
		k := e.key("election-resign")
		a := e.election(e.pb, k, "a", 30*time.Second)
		b := e.election(e.pb2, k, "b", 30*time.Second)
		ta, err := a.Campaign(e.ctx)
		e.must(err, "Campaign")
		got := make(chan *election.Term, 1)
		go func() {
			t, err := b.Campaign(e.ctx)
			if err != nil {
				e.t.Errorf("follower: %v", err)
			}
			got <- t
		}()
		// A release hands the key over only to a follower that a
		// notification reaches; one that polls takes it at its next look.
		notified := e.notifications(e.pb2).Active
		e.awaitQueued(k, 1, notified)
		e.must(ta.Resign(e.ctx), "Resign")
		var handed *election.Leader
		if notified {
			// The release that resigned handed the key over in its commit:
			// the follower leads before it even heard of it.
			l, err := a.Leader(e.ctx)
			e.must(err, "Leader")
			if l == nil || l.Identity != "b" || l.Term <= ta.Fence() {
				e.t.Errorf("rule: Resign hands the election to the queued follower in its own commit, with a higher term; right after it the leader is %+v", l)
			}
			handed = l
		}
		tb := <-got
		if tb == nil {
			return
		}
		if tb.Fence() <= ta.Fence() || (handed != nil && tb.Fence() != handed.Term) {
			e.t.Errorf("rule: the follower's term is higher, and the one handed over; %s after %s (handed over: %+v)", tb.Fence(), ta.Fence(), handed)
		}
		e.must(tb.Resign(e.ctx), "Resign")
	})
}
