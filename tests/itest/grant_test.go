package itest_test

import (
	"sync"
	"testing"
	"time"

	"github.com/syncguard/syncguard-go/syncguard"
)

// TestGrantNotificationTakesNoStatement: a waiter that a release hands the
// key to takes it from the release's grant notification (its fence, the
// lock's start and TTL, and a mac only its lockId makes), without a
// statement of its own: its Lock returns while its pool (MaxOpenConns 1)
// has no connection to give, held by the test. The lease it gets is the
// lock row the release wrote: its fence follows the holder's, and its
// release is the row's.
func TestGrantNotificationTakesNoStatement(t *testing.T) {
	e := newWaitEnv(t, "grant")
	holder := e.backend()
	held, err := syncguard.Lock(e.ctx, holder, "g:key", &syncguard.LockOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	db := open(t, e.dsn)
	db.SetMaxOpenConns(1)
	waiter, err := syncguard.New(db, e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer waiter.Close()

	type got struct {
		lease *syncguard.Lease
		err   error
	}
	out := make(chan got, 1)
	var mu sync.Mutex
	var last time.Time // the waiter's last attempt
	start := time.Now()
	go func() {
		l, err := syncguard.Lock(e.ctx, waiter, "g:key", &syncguard.LockOptions{TTL: time.Minute,
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
	// 10 s after its last: until then only a notification moves it.
	for {
		mu.Lock()
		quiet := !last.IsZero() && time.Since(start) > 3500*time.Millisecond && time.Since(last) > 1100*time.Millisecond
		mu.Unlock()
		if quiet {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if st := waiter.NotificationStatus(e.ctx); !st.Active {
		t.Fatalf("setup: the waiter's notifications are not active: %s", st.Reason)
	}
	conn, err := db.Conn(e.ctx) // the pool's only connection
	if err != nil {
		t.Fatal(err)
	}
	if _, err := held.Release(e.ctx); err != nil {
		t.Fatal(err)
	}
	var g got
	select {
	case g = <-out:
	case <-time.After(30 * time.Second):
		conn.Close()
		g = <-out
		t.Fatalf("rule: a waiter handed the key takes it from the grant notification, without a statement; its Lock returned only once its pool had a connection again (%v)", g.err)
	}
	conn.Close()
	if g.err != nil {
		t.Fatal(g.err)
	}
	if g.lease.Fence() <= held.Fence() {
		t.Errorf("rule: the granted lease carries the fence the release wrote: %s after %s", g.lease.Fence(), held.Fence())
	}
	info, err := holder.LookupKey(e.ctx, "g:key")
	if err != nil || info == nil || info.Fence != g.lease.Fence() || !info.ExpiresAt.Equal(g.lease.ExpiresAt()) {
		t.Errorf("rule: the granted lease is the lock row the release wrote: row %+v (%v), lease fence %s, expiry %v", info, err, g.lease.Fence(), g.lease.ExpiresAt())
	}
	if until := g.lease.HeldUntil(); until.After(time.Now().Add(time.Minute)) {
		t.Errorf("rule: a lease taken from a grant never believes in more than the lock's TTL: held until %v from now", time.Until(until))
	}
	if r, err := g.lease.Release(e.ctx); err != nil || !r.OK {
		t.Errorf("rule: the granted lease releases its row: %+v %v", r, err)
	}
}
