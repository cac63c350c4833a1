// Package eventq is the delivery queue of syncguard's telemetry: the
// caller's path appends a value; one goroutine, running while values are
// queued and gone when none are, hands them in order to a function. A full
// queue drops new values and counts them.
package eventq

import (
	"context"
	"sync"
	"sync/atomic"
)

// Queue delivers values of type T to Deliver.
type Queue[T any] struct {
	max     int
	deliver func(*T)
	dropped atomic.Uint64

	mu      sync.Mutex
	queue   []T
	spare   []T
	running bool
	idle    chan struct{} // closed when the running goroutine finds the queue empty
}

// New returns a queue of at most max values that delivers them to deliver.
func New[T any](max int, deliver func(*T)) *Queue[T] {
	return &Queue[T]{max: max, deliver: deliver}
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
	start := !q.running
	if start {
		q.running = true
		q.idle = make(chan struct{})
	}
	q.mu.Unlock()
	if start {
		go q.run()
	}
}

// Dropped returns how many values were dropped.
func (q *Queue[T]) Dropped() uint64 { return q.dropped.Load() }

// Flush waits until every queued value was delivered, or ctx is done.
func (q *Queue[T]) Flush(ctx context.Context) error {
	q.mu.Lock()
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
