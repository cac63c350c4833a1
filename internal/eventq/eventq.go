// Package eventq is the delivery queue of syncguard's telemetry: the
// caller's path appends a value; one goroutine, running while values are
// queued and gone when none are, hands them in order to a function. A full
// queue drops new values and counts them.
//
// The goroutine is started for a batch, not for each value: Push starts it
// when a quarter of the queue (at most 256 values) waits, else a timer
// starts it Linger after the first value of the batch was queued; Flush
// starts it at once. Starting a goroutine wakes an idle thread of the
// process, several microseconds of CPU: once per lock operation, that was
// a share of a caller's throughput (docs/observability.md, Overhead).
package eventq

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Linger is how long a queued value may wait for its batch to grow before
// delivery starts.
const Linger = 10 * time.Millisecond

// Queue delivers values of type T to Deliver.
type Queue[T any] struct {
	max, batch int
	deliver    func(*T)
	dropped    atomic.Uint64

	mu      sync.Mutex
	queue   []T
	spare   []T
	running bool
	timer   *time.Timer   // starts delivery Linger after the first queued value; nil when not armed
	idle    chan struct{} // closed when the running goroutine finds the queue empty
}

// New returns a queue of at most size values that delivers them to deliver.
func New[T any](size int, deliver func(*T)) *Queue[T] {
	return &Queue[T]{max: size, batch: max(1, min(size/4, 256)), deliver: deliver}
}

// Push queues v, or drops it when the queue is full.
func (q *Queue[T]) Push(v T) {
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
			q.timer = time.AfterFunc(Linger, q.timeout)
		}
	}
	q.mu.Unlock()
	if start {
		go q.run()
	}
}

// startLocked marks the queue running, disarming the timer, and reports
// whether the caller must start run. q.mu is held.
func (q *Queue[T]) startLocked() bool {
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

// timeout is the timer's function: the batch waited Linger.
func (q *Queue[T]) timeout() {
	q.mu.Lock()
	q.timer = nil
	start := q.startLocked()
	q.mu.Unlock()
	if start {
		q.run()
	}
}

// Dropped returns how many values were dropped.
func (q *Queue[T]) Dropped() uint64 { return q.dropped.Load() }

// Flush waits until every queued value was delivered, or ctx is done.
func (q *Queue[T]) Flush(ctx context.Context) error {
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

func (q *Queue[T]) run() {
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
