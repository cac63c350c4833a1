package pq

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"
)

// TestDeadlineDialerSetsSocketOptions checks that DeadlineDialer sets
// TCP_USER_TIMEOUT and that its read timeout fires on a silent peer.
func TestDeadlineDialerSetsSocketOptions(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			defer c.Close()
			time.Sleep(2 * time.Second) // silent
		}
	}()
	d := DeadlineDialer{ReadTimeout: 200 * time.Millisecond, UserTimeout: 7 * time.Second}
	c, err := d.DialContext(context.Background(), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	raw, err := c.(*deadlineConn).Conn.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var got int
	var gerr error
	if err := raw.Control(func(fd uintptr) { got, gerr = getUserTimeout(int(fd)) }); err != nil {
		t.Fatal(err)
	}
	if gerr == nil && got != 7000 {
		t.Errorf("TCP_USER_TIMEOUT = %d ms, want 7000", got)
	}
	start := time.Now()
	_, err = c.Read(make([]byte, 1))
	var ne net.Error
	if err == nil || !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("read from a silent peer: %v, want a timeout", err)
	}
	if d := time.Since(start); d < 150*time.Millisecond {
		t.Errorf("read timed out after %v, before the 200ms read timeout", d)
	}
}

// A deadline set by the driver (lib/pq bounds its startup with
// connect_timeout) that is earlier than the read timeout wins.
func TestDeadlineDialerKeepsEarlierUserDeadline(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan struct{})
	defer close(done)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			defer c.Close()
			<-done // silent
		}
	}()
	d := DeadlineDialer{ReadTimeout: time.Minute}
	c, err := d.DialContext(context.Background(), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(50 * time.Millisecond))
	var ne net.Error
	if _, err := c.Read(make([]byte, 1)); !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("read with a 50ms user deadline under a 1m read timeout: %v, want a timeout", err)
	}
}
