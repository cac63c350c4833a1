package election_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/syncguard/syncguard-go/election"
	"github.com/syncguard/syncguard-go/syncguard"
	"github.com/syncguard/syncguard-go/syncguardtest"
)

// statuses records what OnStatus is told.
type statuses struct {
	mu  sync.Mutex
	all []election.Status
}

func (s *statuses) add(st election.Status) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.all = append(s.all, st)
}

func (s *statuses) last() (election.Status, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.all) == 0 {
		return election.Status{}, 0
	}
	return s.all[len(s.all)-1], len(s.all)
}

// A follower is told its status from the start of its campaign: not the
// leader, with the leader's term once its campaign observed it; when the
// leader dies (its lock expires), the follower's own term, newer.
func TestOnStatusFollowerSeesTheLeaderThenLeads(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := syncguardtest.New()
		ctx := t.Context()
		procA := fake.WithIdentity("a") // a simulated process of its own
		var stA, stB statuses
		opts := func(id string, s *statuses) *election.Options {
			return &election.Options{Identity: id, TTL: 3 * time.Second, PollInterval: 100 * time.Millisecond, OnStatus: s.add}
		}
		a, err := election.New(procA, "k", opts("a", &stA))
		if err != nil {
			t.Fatal(err)
		}
		b, err := election.New(fake, "k", opts("b", &stB))
		if err != nil {
			t.Fatal(err)
		}
		termA, err := a.Campaign(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := stA.last(); got != (election.Status{Leader: true, Term: termA.Fence()}) {
			t.Errorf("leader's status %+v, want leader of term %s", got, termA.Fence())
		}
		elected := make(chan *election.Term)
		go func() {
			term, err := b.Campaign(ctx)
			if err != nil {
				t.Error(err)
			}
			elected <- term
		}()
		synctest.Wait()
		stB.mu.Lock()
		first := stB.all
		stB.mu.Unlock()
		if len(first) != 2 || first[0] != (election.Status{}) || first[1] != (election.Status{Term: termA.Fence()}) {
			t.Errorf("follower's statuses %+v, want {false, \"\"} at the campaign's start, then {false, %s}", first, termA.Fence())
		}

		procA.Partition() // a's process dies: its lock expires at its TTL
		<-termA.Done()
		synctest.Wait()
		if got, _ := stA.last(); got.Leader {
			t.Errorf("the dead leader's status %+v: its term ended, want not the leader", got)
		}
		termB := <-elected
		synctest.Wait()
		got, _ := stB.last()
		if want := (election.Status{Leader: true, Term: termB.Fence()}); got != want || termB.Fence() <= termA.Fence() {
			t.Errorf("follower's status after the takeover %+v, want %+v (after term %s)", got, want, termA.Fence())
		}
		_ = termB.Resign(ctx)
		synctest.Wait()
		if got, _ := stB.last(); got != (election.Status{Term: termB.Fence()}) {
			t.Errorf("status after Resign %+v, want not the leader, the last term kept", got)
		}
		_ = termA.Resign(ctx)
	})
}

// Without OnStatus a campaign does not observe: no lookups.
func TestNoOnStatusNoLookups(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := syncguardtest.New()
		ctx := t.Context()
		held, err := fake.Acquire(ctx, "k", time.Hour)
		if err != nil || !held.OK {
			t.Fatal(held, err)
		}
		c := &countLookups{LockBackend: fake}
		e, err := election.New(c, "k", &election.Options{PollInterval: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if _, err := e.Campaign(cctx); err == nil {
			t.Fatal("elected while the key is held")
		}
		if n := c.n.Load(); n != 0 {
			t.Errorf("%d lookups during a campaign without OnStatus, want 0", n)
		}
	})
}

type countLookups struct {
	syncguard.LockBackend
	n atomic.Int64
}

func (c *countLookups) LookupKey(ctx context.Context, key string) (*syncguard.LockInfo, error) {
	c.n.Add(1)
	return c.LockBackend.LookupKey(ctx, key)
}
