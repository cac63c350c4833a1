package pq

import (
	"context"
	"database/sql"
	"errors"

	"github.com/lib/pq"

	"github.com/syncguard/syncguard-go/driver"
)

// ListenDialect returns lib/pq's dialect together with the DSN the *sql.DB
// was opened with, for syncguard.Config.Dialect:
//
//	db, err := sql.Open("postgres", dsn)
//	...
//	b, err := syncguard.New(db, &syncguard.Config{Dialect: sgpq.ListenDialect(dsn)})
//
// With it, callers of syncguard.Lock and WithLock waiting for a contended
// key are woken the moment the key is released, through one LISTEN
// connection per Backend (a pq.ListenerConn opened with dsn, outside the
// pool). The plain Dialect cannot open that connection: lib/pq gives no way
// to learn a pool's DSN or to wait for notifications on a pooled
// connection, so with it waiting falls back to polling (correct, slower
// hand-offs; said once in the log and by syncguard doctor).
func ListenDialect(dsn string) driver.Dialect { return listenDialect{dsn: dsn} }

type listenDialect struct {
	dialect
	dsn string
}

var _ driver.Listener = listenDialect{}

// Listen implements driver.Listener with a pq.ListenerConn.
func (d listenDialect) Listen(ctx context.Context, _ *sql.DB, channel string) (driver.NotifyConn, error) {
	type opened struct {
		n   *notifyConn
		err error
	}
	done := make(chan opened, 1)
	go func() {
		n, err := openListener(d.dsn, channel)
		done <- opened{n, err}
	}()
	select {
	case o := <-done:
		return o.n, o.err
	case <-ctx.Done():
		go func() { // NewListenerConn takes no context: close it when it returns
			if o := <-done; o.n != nil {
				o.n.Close()
			}
		}()
		return nil, ctx.Err()
	}
}

func openListener(dsn, channel string) (*notifyConn, error) {
	ch := make(chan *pq.Notification, 32)
	lc, err := pq.NewListenerConn(dsn, ch)
	if err != nil {
		return nil, err
	}
	n := &notifyConn{lc: lc, pumped: make(chan struct{})}
	go n.pump(ch)
	if _, err := lc.Listen(channel); err != nil {
		n.Close()
		return nil, err
	}
	return n, nil
}

// notifyConn moves notifications, of every channel it listens on, from the
// ListenerConn's channel to a bounded queue at once, so that the
// ListenerConn's reader never blocks on a full channel (it would then never
// read the reply to a Ping).
type notifyConn struct {
	lc     *pq.ListenerConn
	pumped chan struct{} // closed when the ListenerConn's channel is closed
	queue  driver.NotifyQueue
}

func (n *notifyConn) pump(ch <-chan *pq.Notification) {
	defer close(n.pumped)
	for nt := range ch {
		if nt != nil {
			n.queue.Push(driver.Notification{Channel: nt.Channel, Payload: nt.Extra})
		}
	}
}

var errListenerClosed = errors.New("pq: LISTEN connection closed")

// Wait returns the next notification, with its channel, on any channel
// the connection listens on.
func (n *notifyConn) Wait(ctx context.Context) (driver.Notification, error) {
	for {
		if nt, ok := n.queue.Pop(); ok {
			return nt, nil
		}
		select {
		case <-n.queue.Ready():
		case <-n.pumped:
			if nt, ok := n.queue.Pop(); ok {
				return nt, nil
			}
			if err := n.lc.Err(); err != nil {
				return driver.Notification{}, err
			}
			return driver.Notification{}, errListenerClosed
		case <-ctx.Done():
			return driver.Notification{}, ctx.Err()
		}
	}
}

// Ping sends an empty query.
func (n *notifyConn) Ping(ctx context.Context) error { return n.bounded(ctx, n.lc.Ping) }

// Exec runs sql with ListenerConn.ExecSimpleQuery.
func (n *notifyConn) Exec(ctx context.Context, sql string) error {
	return n.bounded(ctx, func() error {
		_, err := n.lc.ExecSimpleQuery(sql)
		return err
	})
}

// bounded runs call, a ListenerConn method that takes no context: when ctx
// ends first, the connection is closed, which ends the call.
func (n *notifyConn) bounded(ctx context.Context, call func() error) error {
	done := make(chan error, 1)
	go func() { done <- call() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		n.lc.Close()
		<-done
		return ctx.Err()
	}
}

func (n *notifyConn) Close() error {
	n.lc.Close()
	return nil
}
