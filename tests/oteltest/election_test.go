package oteltest

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/syncguard/syncguard-go/election"
	"github.com/syncguard/syncguard-go/otelsyncguard"
	"github.com/syncguard/syncguard-go/syncguard"
	"github.com/syncguard/syncguard-go/syncguardtest"
)

// An election's campaign is a Lock of its key: with the key mapped to a
// label, locks.held is this process's leader status, and the wait, hold
// and loss metrics count its terms won, ended and lost
// (docs/observability.md, "Elections").
func TestElectionLeaderStatus(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		locks := syncguardtest.New()
		r := newRig(t, locks, otelsyncguard.WithKeyLabel(func(key string) string {
			if key == "billing:leader" {
				return "billing-leader"
			}
			return ""
		}))
		const label = "syncguard.lock.label=billing-leader"
		e, err := election.New(r, "billing:leader", &election.Options{Identity: "a", TTL: 3 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		term, err := e.Campaign(ctx)
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		c := r.collect(t)
		if got := c.int("syncguard.locks.held", label); got != 1 {
			t.Errorf("leader status (locks.held{%s}) during the term = %d, want 1\n%s", label, got, c.dump())
		}
		if got := c.hist("syncguard.wait.duration", "syncguard.outcome=acquired", label).Count; got != 1 {
			t.Errorf("terms won (wait.duration{acquired} count) = %d, want 1", got)
		}
		time.Sleep(10 * time.Second) // auto-extended: still the leader
		if err := term.Resign(ctx); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		c = r.collect(t)
		if got := c.int("syncguard.locks.held", label); got != 0 {
			t.Errorf("leader status after Resign = %d, want 0", got)
		}
		if h := c.hist("syncguard.hold.duration", "syncguard.outcome=released", label); h.Count != 1 || h.Sum != 10 {
			t.Errorf("terms ended (hold.duration{released}): count %d, sum %gs; want 1 term of 10 s", h.Count, h.Sum)
		}

		// A term lost (its lock deleted by an operator): one loss, and
		// the status drops.
		term, err = e.Campaign(ctx)
		if err != nil {
			t.Fatal(err)
		}
		locks.Delete(term.Lease().LockID())
		<-term.Done()
		if !errors.Is(term.Err(), syncguard.ErrLockLost) {
			t.Fatalf("term ended with %v, want ErrLockLost", term.Err())
		}
		_ = term.Resign(context.Background())
		synctest.Wait()
		c = r.collect(t)
		if got := c.int("syncguard.losses", "syncguard.loss.reason=gone", label); got != 1 {
			t.Errorf("leadership lost (losses{gone}) = %d, want 1\n%s", got, c.dump())
		}
		if got := c.int("syncguard.locks.held", label); got != 0 {
			t.Errorf("leader status after the loss = %d, want 0", got)
		}
	})
}
