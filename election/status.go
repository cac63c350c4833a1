package election

import (
	"context"
	"sync"

	"github.com/syncguard/syncguard-go/syncguard"
)

// Status is a candidate's view of its election, as Options.OnStatus is
// told it.
type Status struct {
	// Leader is true while this candidate holds a term (from Campaign's
	// return until the term's context ends), false otherwise, from the
	// start of its first campaign on.
	Leader bool
	// Term is the newest term this candidate saw: its own, or the current
	// leader's as its campaign observed it (Observe's reads: a term that
	// began and ended between two reads is not seen). It never decreases,
	// and stays when the leader goes away; "" until a term is seen.
	Term syncguard.Fence
}

// status is an Election's Status, kept for OnStatus.
type status struct {
	mu      sync.Mutex
	leading int // terms of this Election held now
	term    syncguard.Fence
}

// update applies f to the status and tells OnStatus, serialized.
func (e *Election) update(f func(*status) bool) {
	if e.o.OnStatus == nil {
		return
	}
	e.st.mu.Lock()
	defer e.st.mu.Unlock()
	if f(&e.st) {
		e.o.OnStatus(Status{Leader: e.st.leading > 0, Term: e.st.term})
	}
}

// saw records a term seen, if newer than the last (fences compare as
// text).
func (s *status) saw(term syncguard.Fence) bool {
	if term == "" || term <= s.term {
		return false
	}
	s.term = term
	return true
}

// campaigning reports the start of a campaign and, with OnStatus set,
// observes the election until the returned func is called, so that a
// follower knows the current term.
func (e *Election) campaigning(ctx context.Context) (stop func()) {
	if e.o.OnStatus == nil {
		return func() {}
	}
	e.update(func(*status) bool { return true })
	octx, cancel := context.WithCancel(ctx)
	leaders := e.Observe(octx)
	go func() {
		for l := range leaders {
			if l != nil {
				e.update(func(s *status) bool { return s.saw(l.Term) })
			}
		}
	}()
	return cancel
}

// elected reports term t's beginning, and its end when its context ends.
func (e *Election) elected(t *Term) {
	if e.o.OnStatus == nil {
		return
	}
	e.update(func(s *status) bool {
		s.leading++
		s.saw(t.Fence())
		return true
	})
	context.AfterFunc(t.ctx, func() {
		e.update(func(s *status) bool {
			s.leading--
			return true
		})
	})
}
