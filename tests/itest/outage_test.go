package itest_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/syncguard/syncguard-go/syncguard"
	"github.com/syncguard/syncguard-go/tests/pgtest"
)

// flakyPort forwards 127.0.0.1:<port> to a server, and can go away for a
// while: its port refuses connections and the open ones are reset, as
// when the database restarts or its host reboots.
type flakyPort struct {
	target, addr string
	mu           sync.Mutex
	ln           net.Listener
	conns        map[net.Conn]bool
}

func newFlakyPort(t *testing.T, target string) *flakyPort {
	f := &flakyPort{target: target, conns: map[net.Conn]bool{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f.addr = ln.Addr().String()
	f.serve(ln)
	t.Cleanup(func() { f.down() })
	return f
}

func (f *flakyPort) serve(ln net.Listener) {
	f.mu.Lock()
	f.ln = ln
	f.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", f.target)
			if err != nil {
				c.Close()
				continue
			}
			f.mu.Lock()
			f.conns[c], f.conns[s] = true, true
			f.mu.Unlock()
			go func() { io.Copy(s, c); s.Close(); c.Close() }()
			go func() { io.Copy(c, s); s.Close(); c.Close() }()
		}
	}()
}

// down closes the port and resets every connection through it.
func (f *flakyPort) down() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ln != nil {
		f.ln.Close()
		f.ln = nil
	}
	for c := range f.conns {
		c.Close()
	}
	f.conns = map[net.Conn]bool{}
}

// up listens on the same port again.
func (f *flakyPort) up(t *testing.T) {
	ln, err := net.Listen("tcp", f.addr)
	if err != nil {
		t.Errorf("setup: listening again on %s: %v", f.addr, err)
		return
	}
	f.serve(ln)
}

// TestWaitRidesOutAnOutage: a WithLock waiting for a held key (Timeout
// 30 s) while its database is unreachable for 3 s (connections refused
// and reset; the holder releases meanwhile) gets the key once the database
// is back: the outage is ridden out within the Timeout, not returned as
// ServiceUnavailable after its first failed attempt. With FailFast the
// outage's error comes back at once.
func TestWaitRidesOutAnOutage(t *testing.T) {
	srv := pgtest.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin := open(t, srv.DSN)
	cfg := &syncguard.Config{TableName: "outage_locks", FenceTableName: "outage_fences"}
	drop := `DROP TABLE IF EXISTS outage_locks, outage_fences, outage_locks_waiters, outage_locks_holders`
	mustExec(ctx, t, admin, drop)
	if err := syncguard.SetupSchema(ctx, admin, cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = admin.Exec(drop) })
	u, err := url.Parse(srv.DSN)
	if err != nil {
		t.Fatal(err)
	}
	port := newFlakyPort(t, u.Host)
	u.Host = port.addr
	q := u.Query()
	q.Set("connect_timeout", "2")
	u.RawQuery = q.Encode()

	holder, err := syncguard.New(admin, cfg)
	if err != nil {
		t.Fatal(err)
	}
	waiter, err := syncguard.New(open(t, u.String()), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer waiter.Close()

	for _, failFast := range []bool{false, true} {
		held, err := holder.Acquire(ctx, "outage:key", time.Minute)
		if err != nil || !held.OK {
			t.Fatal(held, err)
		}
		done := make(chan error, 1)
		start := time.Now()
		go func() {
			done <- syncguard.WithLock(ctx, waiter, "outage:key", func(context.Context, *syncguard.Lease) error { return nil },
				&syncguard.LockOptions{Acquisition: syncguard.AcquisitionOptions{Timeout: 30 * time.Second, FailFast: failFast}})
		}()
		time.Sleep(300 * time.Millisecond) // the waiter queued
		port.down()
		time.Sleep(1500 * time.Millisecond)
		if _, err := holder.Release(ctx, held.LockID); err != nil {
			t.Fatal(err)
		}
		time.Sleep(1500 * time.Millisecond)
		port.up(t)
		err = <-done
		switch {
		case failFast:
			if !errors.Is(err, syncguard.ErrServiceUnavailable) && !errors.Is(err, syncguard.ErrNetworkTimeout) {
				t.Errorf("rule: with FailFast an outage's error is returned; got %v", err)
			}
		case err != nil:
			t.Errorf("rule: a wait rides out a 3 s outage within its 30 s Timeout; got %v after %v", err, time.Since(start))
		}
		// The key is free again (nothing left behind by the outage).
		for {
			locked, err := holder.IsLocked(ctx, "outage:key")
			if err != nil {
				t.Fatal(err)
			}
			if !locked {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}
