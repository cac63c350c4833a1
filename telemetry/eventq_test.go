package telemetry

import (
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

type eventSink struct {
	mu  sync.Mutex
	got []int
}

func (s *eventSink) deliver(v *int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.got = append(s.got, *v)
}

func (s *eventSink) n() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.got)
}

// A value waits for its batch at most eventLinger; no goroutine runs meanwhile,
// and none is left when the queue is delivered.
func TestEventQueueDeliversWithinLinger(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var s eventSink
		q := newEventQueue(1024, s.deliver)
		start := time.Now()
		q.Push(1)
		q.Push(2)
		synctest.Wait()
		if n := s.n(); n != 0 {
			t.Fatalf("delivered %d values at once, want them to wait for the batch", n)
		}
		time.Sleep(eventLinger - time.Nanosecond)
		synctest.Wait()
		if n := s.n(); n != 0 {
			t.Fatalf("delivered %d values before eventLinger", n)
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		if s.n() != 2 || s.got[0] != 1 || s.got[1] != 2 {
			t.Fatalf("after eventLinger (%v) delivered %v, want [1 2]", time.Since(start), s.got)
		}
		q.Push(3) // a new batch, a new timer
		time.Sleep(eventLinger)
		synctest.Wait()
		if n := s.n(); n != 3 {
			t.Fatalf("the next batch: %d delivered in all, want 3", n)
		}
	})
}

// A full batch starts delivery at once; so does Flush, which returns when
// every value is delivered.
func TestEventQueueBatchAndFlushStartAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var s eventSink
		q := newEventQueue(8, s.deliver) // batch: 8/4 = 2
		q.Push(1)
		q.Push(2)
		synctest.Wait()
		if n := s.n(); n != 2 {
			t.Fatalf("a full batch: %d delivered at once, want 2", n)
		}
		q.Push(3)
		if err := q.Flush(t.Context()); err != nil {
			t.Fatal(err)
		}
		if n := s.n(); n != 3 {
			t.Fatalf("after Flush %d delivered, want 3", n)
		}
		if err := q.Flush(t.Context()); err != nil { // empty: returns at once
			t.Fatal(err)
		}
	})
}

// A full queue drops new values and counts them; the ones queued are
// delivered in order.
func TestEventQueueDropsWhenFull(t *testing.T) {
	var s eventSink
	q := newEventQueue(4, s.deliver)
	q.mu.Lock() // hold delivery off: every Push below waits its turn behind this
	q.running = true
	q.idle = make(chan struct{})
	q.mu.Unlock()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 10 {
			q.Push(i)
		}
	}()
	<-done
	if d := q.Dropped(); d != 6 {
		t.Fatalf("dropped %d, want 6 (10 pushed, room for 4)", d)
	}
	go q.run()
	if err := q.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	if s.n() != 4 || s.got[0] != 0 || s.got[3] != 3 {
		t.Fatalf("delivered %v, want [0 1 2 3]", s.got)
	}
}
