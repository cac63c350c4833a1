package driver

import (
	"context"
	"database/sql"
	"sync"
)

// Listener is an optional Dialect capability: receiving PostgreSQL
// notifications (LISTEN/NOTIFY). The core uses it to wake the callers of
// syncguard.Lock and WithLock that wait for a contended key the moment the
// key is released, instead of at their next retry. A Dialect without it
// still works: waiting then polls (see the waiting section of
// docs/design.md).
//
// The core opens at most one listener per syncguard.Backend, shares it among
// all of that Backend's waiters, and closes it when nobody has waited for a
// while.
type Listener interface {
	// Listen opens a dedicated connection, not one of db's pooled
	// connections (so a waiting program never holds a pool slot for it),
	// to the database db is connected to, and runs LISTEN on channel
	// (passed as is; the implementation quotes it). db is the pool the
	// Backend runs on; an implementation may borrow one of its connections
	// briefly, to learn how to connect. It returns once LISTEN has taken
	// effect: every notification committed afterwards reaches the returned
	// connection. Errors are returned as the driver reports them.
	Listen(ctx context.Context, db *sql.DB, channel string) (NotifyConn, error)
}

// NotifyConn is a connection opened by Listener.Listen. The core uses it
// from one goroutine at a time: its methods need not be safe for concurrent
// use.
type NotifyConn interface {
	// Wait blocks until the next notification arrives on any channel the
	// connection listens on (the one Listen opened it with, and those of
	// LISTEN statements run by Exec) and returns it, with the channel it
	// was sent on, or until ctx is done (returning an error for which
	// ctx.Err() != nil; the connection stays usable), or until the
	// connection fails (any other error; the core then closes it).
	// Notifications that arrive while nobody waits are kept, in order, for
	// the next call, up to a bound (NotifyQueue): any role can NOTIFY, so
	// beyond it the oldest are dropped. The core treats notifications as
	// hints only, each for the channel it came on.
	Wait(ctx context.Context) (Notification, error)
	// Ping checks the connection with a round trip.
	Ping(ctx context.Context) error
	// Exec runs sql, one or more statements without parameters, as one
	// simple query (so in one implicit transaction), and discards any rows.
	// A statement that fails on the server returns the driver's error
	// (Dialect.Inspect reads its SQLSTATE) and leaves the connection
	// usable; any other error means the connection failed.
	Exec(ctx context.Context, sql string) error
	// Close closes the connection.
	Close() error
}

// Notification is one notification a NotifyConn received: the channel it
// was sent on (as LISTEN named it, unquoted) and its payload.
type Notification struct {
	Channel string
	Payload string
}

// NotifyQueueMax is how many undelivered notifications a NotifyQueue keeps.
const NotifyQueueMax = 1024

// NotifyQueue is a bounded FIFO of notifications, safe for concurrent use,
// for NotifyConn implementations: past NotifyQueueMax the oldest is
// dropped, so a flood of notifications from another role costs a listening
// process a fixed amount of memory. The zero value is ready.
type NotifyQueue struct {
	mu    sync.Mutex
	items []Notification
	head  int
	ready chan struct{} // capacity 1: something was pushed
}

func (q *NotifyQueue) init() {
	if q.ready == nil {
		q.ready = make(chan struct{}, 1)
	}
}

// Push adds a notification.
func (q *NotifyQueue) Push(n Notification) {
	q.mu.Lock()
	q.init()
	if len(q.items)-q.head >= NotifyQueueMax {
		q.items[q.head] = Notification{}
		q.head++
	}
	if q.head > NotifyQueueMax {
		q.items = append(q.items[:0], q.items[q.head:]...)
		q.head = 0
	}
	q.items = append(q.items, n)
	q.mu.Unlock()
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

// Pop removes and returns the oldest notification, if any.
func (q *NotifyQueue) Pop() (Notification, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.head == len(q.items) {
		q.items, q.head = q.items[:0], 0
		return Notification{}, false
	}
	n := q.items[q.head]
	q.items[q.head] = Notification{}
	q.head++
	return n, true
}

// Ready is signalled (coalesced) after a Push.
func (q *NotifyQueue) Ready() <-chan struct{} {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.init()
	return q.ready
}
