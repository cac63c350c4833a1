package syncguard

import (
	"testing"
	"testing/synctest"
	"time"
)

// A waiter's attempts are spaced by its place: near the head it renews at
// two thirds of its window; further back its row lives twice as long and it
// attempts again as the queue's pace brings it within listenRank of the
// head, doubling its gap while the queue stands still.
func TestWaiterSpacingByRank(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, _ := newMock(t, &Config{})
		q := b.Queue("k", "", false).(*queueWaiter).q
		q.join(1000)
		defer q.close()
		w := defaultWaitWindow
		step := func(rank int64, after time.Duration) {
			time.Sleep(after)
			q.contended(rank)
		}
		check := func(what string, window, next time.Duration) {
			t.Helper()
			if got := q.window(); got != window {
				t.Errorf("%s: window %v, want %v", what, got, window)
			}
			if got := q.next(); got != next {
				t.Errorf("%s: next attempt after %v, want %v", what, got, next)
			}
		}
		step(20, 0)
		check("rule: far back, first sight: the row lives twice as long, the next look at once", 2*w, approachMin)
		step(20, 400*time.Millisecond)
		check("rule: far back, the queue stood still: the gap doubles with the wait", 2*w, 400*time.Millisecond)
		step(12, 400*time.Millisecond)
		// 8 places in 800 ms: 9 more to listenRank take 900 ms; half of it.
		check("rule: far back, moving: attempt halfway to listenRank at the queue's pace", 2*w, 450*time.Millisecond)
		step(12, 10*time.Hour)
		check("rule: however long the wait, far back renews within its window", 2*w, 4*w/3)
		step(listenRank, time.Second)
		check("rule: within listenRank of the head: the base window, renewed after two thirds of it", w, 2*w/3)
		if wake, renew, poll := q.waiterHints(); wake == nil || renew != 2*w/3 || !poll {
			t.Errorf("rule: near the head, before its channel is listened on, the waiter polls; hints %v %v %v", wake, renew, poll)
		}
	})
}

// waiterHints are the Hints of q's waiter.
func (q *queueState) waiterHints() (<-chan struct{}, time.Duration, bool) {
	return (&queueWaiter{q: q}).Hints()
}
