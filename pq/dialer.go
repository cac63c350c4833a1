package pq

import (
	"context"
	"net"
	"sync"
	"syscall"
	"time"
)

// DeadlineDialer is a lib/pq Dialer that bounds every read and write on its
// connections, so that a caller on a half-open connection gets an error
// instead of waiting forever. Use it with a connector:
//
//	c, err := sgpq.NewConnector(dsn) // this package's (or lib/pq's pq.NewConnector)
//	c.Dialer(sgpq.DeadlineDialer{ReadTimeout: 10 * time.Second,
//		KeepAlive: net.KeepAliveConfig{Enable: true, Idle: 15 * time.Second, Interval: 5 * time.Second, Count: 3},
//		UserTimeout: 20 * time.Second})
//	db := sql.OpenDB(c)
//
// lib/pq (v1.12) does not stop reading when a context ends: it sends a
// cancel request on a new connection and keeps waiting for the server's
// answer on the old one. When the old connection is black-holed, the
// answer never comes, and the call (and database/sql's caller) waits until
// the kernel gives up on the socket, which for a connection whose request
// was acknowledged means TCP keepalive: by Go's defaults 15 s idle + 9
// probes 15 s apart, about 2.5 minutes, and never when something on the
// path acknowledges for the dead peer (a proxy, a load balancer).
//
// ReadTimeout must exceed the longest statement the pool runs (its
// statement_timeout, or the longest lock wait) plus a round trip: lib/pq
// reads only while it waits for a reply, so the timeout never fires on an
// idle pooled connection. KeepAlive and UserTimeout set the kernel-level
// bounds for real network partitions (TCP_USER_TIMEOUT, Linux only), which
// a userspace test proxy cannot exercise.
type DeadlineDialer struct {
	ReadTimeout  time.Duration // per read; 0: none
	WriteTimeout time.Duration // per write; 0: ReadTimeout
	KeepAlive    net.KeepAliveConfig
	UserTimeout  time.Duration // TCP_USER_TIMEOUT; 0: kernel default
}

// Dial implements pq.Dialer.
func (d DeadlineDialer) Dial(network, address string) (net.Conn, error) {
	return d.DialContext(context.Background(), network, address)
}

// DialTimeout implements pq.Dialer.
func (d DeadlineDialer) DialTimeout(network, address string, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return d.DialContext(ctx, network, address)
}

// DialContext implements pq.DialerContext.
func (d DeadlineDialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	nd := net.Dialer{KeepAliveConfig: d.KeepAlive}
	if d.UserTimeout > 0 {
		ms := int(d.UserTimeout / time.Millisecond)
		nd.Control = func(network, address string, c syscall.RawConn) error {
			var serr error
			if err := c.Control(func(fd uintptr) { serr = setUserTimeout(int(fd), ms) }); err != nil {
				return err
			}
			return serr
		}
	}
	c, err := nd.DialContext(ctx, network, address)
	if err != nil {
		return nil, err
	}
	w := d.WriteTimeout
	if w == 0 {
		w = d.ReadTimeout
	}
	return &deadlineConn{Conn: c, read: d.ReadTimeout, write: w}, nil
}

// deadlineConn applies a fresh deadline before every Read and Write, but
// never a later one than a deadline its user set (lib/pq bounds the
// startup handshake with connect_timeout that way).
type deadlineConn struct {
	net.Conn
	read, write time.Duration

	mu           sync.Mutex
	userR, userW time.Time
}

func earliest(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}

// next is the deadline of the next read or write: limit from now, or the
// user's deadline when that is earlier.
func (c *deadlineConn) next(limit time.Duration, user *time.Time) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return earliest(*user, time.Now().Add(limit))
}

func (c *deadlineConn) Read(p []byte) (int, error) {
	if c.read > 0 {
		if err := c.Conn.SetReadDeadline(c.next(c.read, &c.userR)); err != nil {
			return 0, err
		}
	}
	return c.Conn.Read(p)
}

func (c *deadlineConn) Write(p []byte) (int, error) {
	if c.write > 0 {
		if err := c.Conn.SetWriteDeadline(c.next(c.write, &c.userW)); err != nil {
			return 0, err
		}
	}
	return c.Conn.Write(p)
}

func (c *deadlineConn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	c.userR, c.userW = t, t
	c.mu.Unlock()
	return c.Conn.SetDeadline(t)
}

func (c *deadlineConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	c.userR = t
	c.mu.Unlock()
	return c.Conn.SetReadDeadline(t)
}

func (c *deadlineConn) SetWriteDeadline(t time.Time) error {
	c.mu.Lock()
	c.userW = t
	c.mu.Unlock()
	return c.Conn.SetWriteDeadline(t)
}
