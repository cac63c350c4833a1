package election_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/syncguard/syncguard-go/election"
	"github.com/syncguard/syncguard-go/syncguard"
	"github.com/syncguard/syncguard-go/syncguardtest"
)

// Every test runs in a synctest bubble: the fake's clock is the bubble's,
// so no bound here depends on the machine's speed.

func newElection(t *testing.T, fake *syncguardtest.Backend, key, id string) *election.Election {
	t.Helper()
	e, err := election.New(fake, key, &election.Options{Identity: id, TTL: 3 * time.Second, PollInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func TestOneLeaderAtATimeTermsIncrease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := syncguardtest.New()
		ctx, cancel := context.WithCancel(t.Context())
		var active atomic.Int32
		var mu sync.Mutex
		var terms []syncguard.Fence
		leaders := map[string]int{}
		var wg sync.WaitGroup
		for _, id := range []string{"a", "b", "c"} {
			e := newElection(t, fake, "jobs:leader", id)
			wg.Go(func() {
				err := e.Run(ctx, func(ctx context.Context, term *election.Term) error {
					if n := active.Add(1); n != 1 {
						t.Errorf("%d leaders at once", n)
					}
					defer active.Add(-1)
					mu.Lock()
					if len(terms) > 0 && term.Fence() <= terms[len(terms)-1] {
						t.Errorf("term %s after %s: terms must increase", term.Fence(), terms[len(terms)-1])
					}
					terms = append(terms, term.Fence())
					leaders[id]++
					mu.Unlock()
					info, err := fake.LookupKey(ctx, "jobs:leader")
					if err != nil || info == nil || info.Identity != id || info.Fence != term.Fence() {
						t.Errorf("the lock shows the leader %q, term %s; got %+v, %v", id, term.Fence(), info, err)
					}
					select {
					case <-time.After(2 * time.Second): // shorter than the TTL: no loss
					case <-ctx.Done():
					}
					return nil
				})
				if err != nil {
					t.Errorf("Run: %v", err)
				}
			})
		}
		time.Sleep(time.Minute)
		cancel()
		wg.Wait()
		if len(terms) < 10 || len(leaders) < 2 {
			t.Errorf("terms %v, leaders %v: want many terms and more than one leader", terms, leaders)
		}
	})
}

func TestLeaderContextEndsBeforeExpiryWhenExtendsFail(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := syncguardtest.New()
		ctx := t.Context()
		lead := newElection(t, fake, "k", "leader")
		term, err := lead.Campaign(ctx)
		if err != nil {
			t.Fatal(err)
		}
		fake.Fail(syncguardtest.OpExtend, syncguard.ErrServiceUnavailable, -1)
		<-term.Done()
		if !errors.Is(term.Err(), syncguard.ErrLockLost) {
			t.Errorf("the term ends with ErrLockLost; got %v", term.Err())
		}
		if now := fake.Now(); !now.Before(term.Lease().ExpiresAt()) {
			t.Errorf("the term's context ends before the lock expires: now %v, expiry %v", now, term.Lease().ExpiresAt())
		}
		// A follower is elected once the lock is no longer live, with a
		// higher term.
		next, err := newElection(t, fake, "k", "follower").Campaign(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if next.Fence() <= term.Fence() || fake.Now().Before(term.Lease().ExpiresAt().Add(time.Second)) {
			t.Errorf("follower: term %s after %s at %v (the old lock expired at %v)", next.Fence(), term.Fence(), fake.Now(), term.Lease().ExpiresAt())
		}
		fake.Fail(syncguardtest.OpExtend, syncguard.ErrServiceUnavailable, 0)
		_ = next.Resign(ctx)
		_ = term.Resign(ctx)
	})
}

func TestCrashedLeaderReplacedAtExpiry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := syncguardtest.New()
		ctx := t.Context()
		// A leader that crashed: its lock is never extended nor released.
		crashed, err := fake.WithIdentity("crashed").Acquire(ctx, "k", 5*time.Second)
		if err != nil || !crashed.OK {
			t.Fatal(crashed, err)
		}
		e := newElection(t, fake, "k", "follower")
		if l, _ := e.Leader(ctx); l == nil || l.Identity != "crashed" || l.Term != crashed.Fence {
			t.Errorf("Leader: %+v", l)
		}
		term, err := e.Campaign(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if now := fake.Now(); now.Before(crashed.ExpiresAt.Add(time.Second)) || term.Fence() <= crashed.Fence {
			t.Errorf("taken over at %v with term %s; the crashed leader's lock (term %s) was live until %v", now, term.Fence(), crashed.Fence, crashed.ExpiresAt.Add(time.Second))
		}
		_ = term.Resign(ctx)
	})
}

func TestResignHandsOverAndObserveSeesEveryChange(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := syncguardtest.New()
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		a, b := newElection(t, fake, "k", "a"), newElection(t, fake, "k", "b")
		obs := a.Observe(ctx)
		if l := <-obs; l != nil {
			t.Fatalf("no leader yet; got %+v", l)
		}
		ta, err := a.Campaign(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if l := <-obs; l == nil || l.Identity != "a" || l.Term != ta.Fence() {
			t.Fatalf("observe: leader a; got %+v", l)
		}
		got := make(chan *election.Term, 1)
		go func() {
			tb, err := b.Campaign(ctx)
			if err != nil {
				t.Error(err)
			}
			got <- tb
		}()
		time.Sleep(time.Second)
		if err := ta.Resign(ctx); err != nil {
			t.Fatal(err)
		}
		if !errors.Is(ta.Err(), election.ErrResigned) || ta.Context().Err() == nil {
			t.Errorf("Resign ends the term's context with ErrResigned; got %v", ta.Err())
		}
		tb := <-got
		if tb.Fence() <= ta.Fence() {
			t.Errorf("term %s after %s", tb.Fence(), ta.Fence())
		}
		// The observer may see the gap between the two terms (no leader),
		// then b; never a again.
		l := <-obs
		if l == nil {
			l = <-obs
		}
		if l == nil || l.Identity != "b" || l.Term != tb.Fence() {
			t.Errorf("observe: leader b; got %+v", l)
		}
		_ = tb.Resign(ctx)
		if l := <-obs; l != nil {
			t.Errorf("observe: no leader after b resigned; got %+v", l)
		}
		cancel()
		for range obs {
		}
	})
}

func TestCampaignEndsWithItsContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := syncguardtest.New()
		ctx, cancel := context.WithCancel(t.Context())
		lead := newElection(t, fake, "k", "a")
		term, err := lead.Campaign(ctx)
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() {
			_, err := newElection(t, fake, "k", "b").Campaign(ctx)
			done <- err
		}()
		time.Sleep(time.Minute) // the leader keeps its lock meanwhile
		if term.Err() != nil {
			t.Fatalf("the term ended: %v", term.Err())
		}
		cancel()
		if err := <-done; !errors.Is(err, syncguard.ErrAborted) {
			t.Errorf("a campaign whose context ends: ErrAborted; got %v", err)
		}
		// The campaign's context ended: the term resigns.
		<-term.Done()
		synctest.Wait()
		if n := fake.Len(); n != 0 {
			t.Errorf("the term's lock is released when the campaign's context ends; %d locks", n)
		}
	})
}

func TestElectionsByKeyAreIndependent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := syncguardtest.New()
		ctx := t.Context()
		a, err := newElection(t, fake, "leader:billing", "a").Campaign(ctx)
		if err != nil {
			t.Fatal(err)
		}
		b, err := newElection(t, fake, "leader:reports", "b").Campaign(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for key, want := range map[string]string{"leader:billing": "a", "leader:reports": "b"} {
			if l, _ := newElection(t, fake, key, "x").Leader(ctx); l == nil || l.Identity != want {
				t.Errorf("%s: leader %+v, want %s", key, l, want)
			}
		}
		_ = a.Resign(ctx)
		if l, _ := newElection(t, fake, "leader:reports", "x").Leader(ctx); l == nil || l.Identity != "b" || b.Err() != nil {
			t.Errorf("a resignation in one election leaves the other: %+v, %v", l, b.Err())
		}
		_ = b.Resign(ctx)
	})
}

// hinted is the fake with a WatchKey of the test's: hints are sent by
// hand, and LookupKey calls are counted.
type hinted struct {
	*syncguardtest.Backend
	hints   chan struct{}
	lookups atomic.Int64
	watches atomic.Int64
}

func (h *hinted) WatchKey(context.Context, string) (<-chan struct{}, error) {
	h.watches.Add(1)
	return h.hints, nil
}
func (h *hinted) LookupKey(ctx context.Context, key string) (*syncguard.LockInfo, error) {
	h.lookups.Add(1)
	return h.Backend.LookupKey(ctx, key)
}

// Observe is a plain loop: read, then wait for a hint or PollInterval.
func TestObserveReadsOnEachHint(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &hinted{Backend: syncguardtest.New(), hints: make(chan struct{}, 1)}
		observer, err := election.New(b, "jobs:leader", &election.Options{PollInterval: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		obs := observer.Observe(t.Context())
		if l := <-obs; l != nil {
			t.Fatalf("no leader first; got %+v", l)
		}
		term, err := newElection(t, b.Backend, "jobs:leader", "a").Campaign(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		b.hints <- struct{}{} // as a hand-off's notification would
		if l := <-obs; l == nil || l.Identity != "a" || time.Since(start) >= time.Second {
			t.Errorf("rule: a hint makes Observe read at once, not at its next poll (an hour away); got %+v after %v", l, time.Since(start))
		}
		// Hints that bring no change: one read each, at most one per
		// 10 ms (anyone can send them), nothing reported.
		synctest.Wait()
		before := b.lookups.Load()
		for range 10 {
			b.hints <- struct{}{}
			time.Sleep(10 * time.Millisecond)
			synctest.Wait()
		}
		if n := b.lookups.Load() - before; n != 10 {
			t.Errorf("rule: each hint makes one read; %d reads for 10 hints 10 ms apart", n)
		}
		// A flood: 100 hints in 100 ms make at most 11 reads.
		before = b.lookups.Load()
		for range 100 {
			select {
			case b.hints <- struct{}{}:
			default:
			}
			time.Sleep(time.Millisecond)
		}
		time.Sleep(10 * time.Millisecond)
		synctest.Wait()
		if n := b.lookups.Load() - before; n > 11 || n < 5 {
			t.Errorf("rule: hints cause at most one read per 10 ms, and do cause them; %d reads for a flood of 100 hints in 100 ms", n)
		}
		// No hint, no poll due: no read.
		before = b.lookups.Load()
		time.Sleep(30 * time.Minute)
		synctest.Wait()
		if n := b.lookups.Load() - before; n != 0 {
			t.Errorf("rule: Observe reads on a hint or at PollInterval only; %d reads in half an interval without hints", n)
		}
		select {
		case l := <-obs:
			t.Errorf("rule: reads that find no change report nothing; got %+v", l)
		default:
		}
		_ = term.Resign(t.Context())
	})
}

// Observe watches the key once, and reads every PollInterval besides.
func TestObserveWatchesOnceAndPolls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &hinted{Backend: syncguardtest.New(), hints: make(chan struct{}, 1)}
		observer, err := election.New(b, "jobs:leader", &election.Options{PollInterval: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		obs := observer.Observe(ctx)
		<-obs
		synctest.Wait()
		before := b.lookups.Load()
		time.Sleep(10*time.Second + time.Millisecond)
		synctest.Wait()
		if n := b.lookups.Load() - before; n != 10 {
			t.Errorf("rule: without hints Observe reads once every PollInterval; %d reads in 10 intervals", n)
		}
		if n := b.watches.Load(); n != 1 {
			t.Errorf("rule: Observe watches the key once (the Backend keeps the watch served); %d watches", n)
		}
		cancel()
		for range obs {
		}
	})
}
