package itest_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/syncguard/syncguard-go/multilock"
	"github.com/syncguard/syncguard-go/syncguard"
	"github.com/syncguard/syncguard-go/tests/pgtest"
)

// TestMultiLockGrantNotificationTakesNoStatement: a waiter that a release
// hands its set to takes it from the release's grant notification (the
// set's fences, the holding's start and TTL, and a mac only its lockId
// makes), without a statement of its own, as the mutex's waiter does: its
// Lock returns while its pool (MaxOpenConns 1) has no connection to give,
// held by the test. The lease it gets is the rows the release wrote: each
// key's fence follows the holder's, and its release is the rows'.
func TestMultiLockGrantNotificationTakesNoStatement(t *testing.T) {
	srv := pgtest.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin := mlOpen(t, pgxDriver, srv.DSN)
	cfg := mlTables(t, ctx, admin, pgxDriver.Dialect)
	holder, err := multilock.New(admin, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	held, err := multilock.Lock(ctx, holder, []string{"g:a", "g:b"}, &syncguard.LockOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	db := mlOpen(t, pgxDriver, srv.DSN)
	db.SetMaxOpenConns(1)
	waiter, err := multilock.New(db, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer waiter.Close()

	type got struct {
		lease *multilock.Lease
		err   error
	}
	out := make(chan got, 1)
	var mu sync.Mutex
	var last time.Time // the waiter's last attempt
	start := time.Now()
	go func() {
		l, err := multilock.Lock(ctx, waiter, []string{"g:b", "g:a"}, &syncguard.LockOptions{TTL: time.Minute,
			Acquisition: syncguard.AcquisitionOptions{Timeout: -1},
			OnAttempt: func(syncguard.AcquireResult, error) {
				mu.Lock()
				last = time.Now()
				mu.Unlock()
			}})
		out <- got{l, err}
	}()
	// Past the scheduled retries of the wait's first 2 s (and the last
	// one's delay, at most 1 s), the waiter's next attempt is its renewal,
	// half its 15 s window after its last: until then only a notification
	// moves it.
	for {
		mu.Lock()
		quiet := !last.IsZero() && time.Since(start) > 3500*time.Millisecond && time.Since(last) > 1100*time.Millisecond
		mu.Unlock()
		if quiet {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if st := waiter.NotificationStatus(ctx); !st.Active {
		t.Fatalf("setup: the waiter's notifications are not active: %s", st.Reason)
	}
	conn, err := db.Conn(ctx) // the pool's only connection
	if err != nil {
		t.Fatal(err)
	}
	if r, err := held.Release(ctx); err != nil || !r.OK {
		t.Fatal(r, err)
	}
	var g got
	select {
	case g = <-out:
	case <-time.After(30 * time.Second):
		conn.Close()
		g = <-out
		t.Fatalf("rule: a waiter handed its set takes it from the grant notification, without a statement; its Lock returned only once its pool had a connection again (%v)", g.err)
	}
	conn.Close()
	if g.err != nil {
		t.Fatal(g.err)
	}
	h, err := holder.Holding(ctx, g.lease.LockID())
	if err != nil || h == nil {
		t.Fatalf("rule: the granted lease is the rows the release wrote: %+v %v", h, err)
	}
	for _, k := range []string{"g:a", "g:b"} {
		was, _ := held.FenceOf(k)
		now, ok := g.lease.FenceOf(k)
		row := syncguard.Fence("")
		for _, f := range h.Fences {
			if f.Key == k {
				row = f.Fence
			}
		}
		if !ok || now <= was || now != row {
			t.Errorf("rule: the granted lease carries the fence the release wrote for %s: %s after %s, row %s", k, now, was, row)
		}
	}
	if !h.ExpiresAt.Equal(g.lease.ExpiresAt()) {
		t.Errorf("rule: the granted lease's expiry is its rows': row %v, lease %v", h.ExpiresAt, g.lease.ExpiresAt())
	}
	if until := g.lease.HeldUntil(); until.After(time.Now().Add(time.Minute)) {
		t.Errorf("rule: a lease taken from a grant never believes in more than the set's TTL: held until %v from now", time.Until(until))
	}
	if f, err := waiter.Fences(ctx, g.lease.LockID()); err != nil || len(f) != 2 {
		t.Errorf("rule: the Locker knows the fences of a holding handed to it: %v %v", f, err)
	}
	if r, err := g.lease.Release(ctx); err != nil || !r.OK {
		t.Errorf("rule: the granted lease releases its rows: %+v %v", r, err)
	}
	if h, err := holder.Holding(ctx, g.lease.LockID()); err != nil || h != nil {
		t.Errorf("rule: the granted lease's release deletes its rows: %+v %v", h, err)
	}
}
