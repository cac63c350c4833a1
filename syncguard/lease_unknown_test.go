package syncguard_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/syncguard/syncguard-go/syncguard"
	"github.com/syncguard/syncguard-go/syncguardtest"
)

// loseNextExtend makes the next extend's answer be lost after the server
// ran it, as when the connection breaks after the commit: the caller cannot
// tell whether the extend ran.
func loseNextExtend(b *syncguardtest.Backend) {
	b.FailAfter(syncguardtest.OpExtend, syncguard.ErrServiceUnavailable, 1)
}

// waitLoss waits for the lease to end and checks that it ended as lost
// before the server-side expiry of its row.
func waitLoss(t *testing.T, b *syncguardtest.Backend, l *syncguard.Lease) {
	t.Helper()
	<-l.Done()
	at := time.Now()
	expiry := serverExpiry(t, b, l.LockID()) // nothing extends it after the loss
	if !errors.Is(l.Err(), syncguard.ErrLockLost) {
		t.Fatalf("the lease must end as lost; Err = %v", l.Err())
	}
	if !at.Before(expiry) {
		t.Fatalf("rule: loss is signalled before the server-side expiry, never after; the row expired at %v, loss reported at %v",
			expiry.Format("15:04:05.000"), at.Format("15:04:05.000"))
	}
}

// An Extend that shortens the lock (ttl below what is left) and whose
// answer is lost may have committed: the guaranteed lifetime becomes the
// earlier of the current one and send time + ttl - margin.
func TestLeaseUnknownOutcomeExtendShortensLifetime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := syncguardtest.New()
		sent := sendTimes(b, syncguardtest.OpExtend)
		l, err := syncguard.Lock(t.Context(), b, "k", &syncguard.LockOptions{TTL: 30 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		time.Sleep(time.Second)
		loseNextExtend(b)
		if _, err := l.Extend(t.Context(), 2*time.Second); err == nil {
			t.Fatal("the extend's answer was lost; Extend must return its error")
		}
		if l.Err() != nil {
			t.Fatalf("the lease still holds right after the unknown extend: %v", l.Err())
		}
		waitLoss(t, b, l)
		// 2 s - 1 ms granted, a tenth kept back: lost 1.7991 s after the send.
		if got, want := time.Since(sent()[0]), 2*time.Second-time.Millisecond-(2*time.Second-time.Millisecond)/10; got != want {
			t.Errorf("lost %v after the extend was sent, want %v", got, want)
		}
	})
}

// A longer unknown-outcome extend does not move the guaranteed lifetime.
func TestLeaseUnknownOutcomeLongerExtendKeepsLifetime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := syncguardtest.New()
		start := time.Now()
		l, _ := syncguard.Lock(t.Context(), b, "k", &syncguard.LockOptions{TTL: 3 * time.Second})
		defer l.Close()
		loseNextExtend(b)
		if _, err := l.Extend(t.Context(), time.Minute); err == nil {
			t.Fatal("want the lost answer's error")
		}
		<-l.Done()
		if got, want := time.Since(start), 3*time.Second-time.Millisecond-(3*time.Second-time.Millisecond)/10; got != want {
			t.Fatalf("lost after %v, want the acquire's lifetime %v", got, want)
		}
	})
}

// The auto-extender after a long manual extend extends by the (shorter)
// TTL: when that answer is lost, the lease must not keep the manual
// extend's lifetime.
func TestAutoExtendUnknownOutcomeAfterLongManualExtend(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := syncguardtest.New()
		l, err := syncguard.Lock(t.Context(), b, "k", &syncguard.LockOptions{TTL: 3 * time.Second, AutoExtend: true, Logger: discardLogger()})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		if r, err := l.Extend(t.Context(), time.Minute); err != nil || !r.OK {
			t.Fatalf("manual extend: %+v %v", r, err)
		}
		// The first automatic extend commits but its answer is lost; the
		// database is unreachable after that (but for the test's lookup).
		loseNextExtend(b)
		var lost atomic.Bool
		b.SetHook(func(_ context.Context, c syncguardtest.Call) error {
			switch {
			case c.Op == syncguardtest.OpLookup:
				return nil
			case lost.Load():
				return syncguardtest.Err(c.Op, syncguard.ErrServiceUnavailable)
			case c.Op == syncguardtest.OpExtend:
				lost.Store(true)
			}
			return nil
		})
		waitLoss(t, b, l)
	})
}

// WithLock's fn context follows the corrected lifetime.
func TestWithLockContextFollowsUnknownOutcomeExtend(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := syncguardtest.New()
		err := syncguard.WithLock(t.Context(), b, "k", func(ctx context.Context, l *syncguard.Lease) error {
			loseNextExtend(b)
			if _, err := l.Extend(ctx, 2*time.Second); err == nil {
				t.Error("want the lost answer's error")
			}
			expiry := serverExpiry(t, b, l.LockID())
			<-ctx.Done()
			if !errors.Is(context.Cause(ctx), syncguard.ErrLockLost) {
				t.Errorf("fn's context must end with the lease's loss; cause %v", context.Cause(ctx))
			}
			if !time.Now().Before(expiry) {
				t.Errorf("fn's context ended at %v, after the server-side expiry %v", time.Now(), expiry)
			}
			return nil
		}, &syncguard.LockOptions{TTL: 30 * time.Second, AutoExtend: true, Logger: discardLogger()})
		if err != nil {
			t.Fatal(err)
		}
	})
}
