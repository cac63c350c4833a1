package telemetry

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// eventLinger is how long a queued value may wait for its batch to grow.
const eventLinger = 10 * time.Millisecond

// eventQueue is the telemetry's delivery queue: the caller's path appends
// a value; one goroutine, running while values are queued, hands them in
// order to deliver. It starts for a batch (a quarter of the queue, at most
// 256), or eventLinger after the batch's first value, or at Flush (why:
// docs/design.md, Costs). A full queue drops new values and counts them.
type eventQueue[T any] struct {
	max, batch int
	deliver    func(*T)
	dropped    atomic.Uint64

	mu      sync.Mutex
	queue   []T
	spare   []T
	running bool
	timer   *time.Timer   // starts delivery eventLinger after the first queued value; nil when not armed
	idle    chan struct{} // closed when the running goroutine finds the queue empty
}

func newEventQueue[T any](size int, deliver func(*T)) *eventQueue[T] {
	return &eventQueue[T]{max: size, batch: max(1, min(size/4, 256)), deliver: deliver}
}

// Push queues v, or drops it when the queue is full.
func (q *eventQueue[T]) Push(v T) {
	q.mu.Lock()
	if len(q.queue) >= q.max {
		q.mu.Unlock()
		q.dropped.Add(1)
		return
	}
	q.queue = append(q.queue, v)
	start := false
	if !q.running {
		if len(q.queue) >= q.batch {
			start = q.startLocked()
		} else if q.timer == nil {
			q.timer = time.AfterFunc(eventLinger, q.timeout)
		}
	}
	q.mu.Unlock()
	if start {
		go q.run()
	}
}

// startLocked (q.mu held) reports whether the caller must start run.
func (q *eventQueue[T]) startLocked() bool {
	if q.running || len(q.queue) == 0 {
		return false
	}
	if q.timer != nil {
		q.timer.Stop()
		q.timer = nil
	}
	q.running = true
	q.idle = make(chan struct{})
	return true
}

// timeout is the timer's function: the batch waited eventLinger.
func (q *eventQueue[T]) timeout() {
	q.mu.Lock()
	q.timer = nil
	start := q.startLocked()
	q.mu.Unlock()
	if start {
		q.run()
	}
}

// Dropped returns how many values were dropped.
func (q *eventQueue[T]) Dropped() uint64 { return q.dropped.Load() }

// Flush waits until every queued value was delivered, or ctx is done.
func (q *eventQueue[T]) Flush(ctx context.Context) error {
	q.mu.Lock()
	if q.startLocked() {
		go q.run()
	}
	if !q.running {
		q.mu.Unlock()
		return nil
	}
	idle := q.idle
	q.mu.Unlock()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (q *eventQueue[T]) run() {
	var zero T
	for {
		q.mu.Lock()
		if len(q.queue) == 0 {
			q.running = false
			close(q.idle)
			q.mu.Unlock()
			return
		}
		batch := q.queue
		q.queue, q.spare = q.spare[:0], nil
		q.mu.Unlock()
		for i := range batch {
			q.deliver(&batch[i])
			batch[i] = zero
		}
		q.mu.Lock()
		q.spare = batch[:0]
		q.mu.Unlock()
	}
}
