package syncguard

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

// errLostAnswer is what a driver returns when the connection breaks after
// the server committed: the caller cannot tell whether the extend ran.
var errLostAnswer = &Error{Op: "extend", Code: CodeServiceUnavailable, Msg: "connection to PostgreSQL failed"}

// loseNext makes the next answer of op be lost after the server ran it.
func loseNext(f *FakeBackend, op string) {
	var done bool
	f.SetLoseAnswer(func(o string) error {
		if o != op || done {
			return nil
		}
		done = true
		return errLostAnswer
	})
}

// waitLoss waits for the lease to end and checks that it ended as lost
// before the server-side expiry of its row.
func waitLoss(t *testing.T, f *FakeBackend, l *Lease) {
	t.Helper()
	<-l.Done()
	serverExpiry := f.ExpiresAt(l.LockID()) // nothing extends it after the loss
	if !errors.Is(l.Err(), ErrLockLost) {
		t.Fatalf("the lease must end as lost; Err = %v", l.Err())
	}
	if !time.Now().Before(serverExpiry) {
		t.Fatalf("rule: loss is signalled before the server-side expiry, never after; the row expired at %v, loss reported at %v",
			serverExpiry.Format("15:04:05.000"), time.Now().Format("15:04:05.000"))
	}
}

// An Extend that shortens the lock (ttl below what is left) and whose
// answer is lost may have committed: the guaranteed lifetime becomes the
// earlier of the current one and send time + ttl - margin.
func TestLeaseUnknownOutcomeExtendShortensLifetime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := NewFakeBackend()
		l, err := Lock(t.Context(), f, "k", &LockOptions{TTL: 30 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		time.Sleep(time.Second)
		loseNext(f, "extend")
		if _, err := l.Extend(t.Context(), 2*time.Second); err == nil {
			t.Fatal("the extend's answer was lost; Extend must return its error")
		}
		if l.Err() != nil {
			t.Fatalf("the lease still holds right after the unknown extend: %v", l.Err())
		}
		waitLoss(t, f, l)
		// 2 s - 1 ms granted, a tenth kept back: lost 1.7991 s after the send.
		if got, want := time.Since(f.Times("extend")[0]), 2*time.Second-time.Millisecond-(2*time.Second-time.Millisecond)/10; got != want {
			t.Errorf("lost %v after the extend was sent, want %v", got, want)
		}
	})
}

// A longer unknown-outcome extend does not move the guaranteed lifetime.
func TestLeaseUnknownOutcomeLongerExtendKeepsLifetime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := NewFakeBackend()
		start := time.Now()
		l, _ := Lock(t.Context(), f, "k", &LockOptions{TTL: 3 * time.Second})
		defer l.Close()
		loseNext(f, "extend")
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
		f := NewFakeBackend()
		l, err := Lock(t.Context(), f, "k", &LockOptions{TTL: 3 * time.Second, AutoExtend: true, Logger: discardLogger()})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		if r, err := l.Extend(t.Context(), time.Minute); err != nil || !r.OK {
			t.Fatalf("manual extend: %+v %v", r, err)
		}
		// The first automatic extend commits but its answer is lost; the
		// database is unreachable after that.
		f.SetLoseAnswer(func(op string) error {
			if op != "extend" {
				return nil
			}
			f.SetFail(func(context.Context, string) error { return errLostAnswer })
			return errLostAnswer
		})
		waitLoss(t, f, l)
	})
}

// WithLock's fn context follows the corrected lifetime.
func TestWithLockContextFollowsUnknownOutcomeExtend(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := NewFakeBackend()
		err := WithLock(t.Context(), f, "k", func(ctx context.Context, l *Lease) error {
			loseNext(f, "extend")
			if _, err := l.Extend(ctx, 2*time.Second); err == nil {
				t.Error("want the lost answer's error")
			}
			serverExpiry := f.ExpiresAt(l.LockID())
			<-ctx.Done()
			if !errors.Is(context.Cause(ctx), ErrLockLost) {
				t.Errorf("fn's context must end with the lease's loss; cause %v", context.Cause(ctx))
			}
			if !time.Now().Before(serverExpiry) {
				t.Errorf("fn's context ended at %v, after the server-side expiry %v", time.Now(), serverExpiry)
			}
			return nil
		}, &LockOptions{TTL: 30 * time.Second, AutoExtend: true, Logger: discardLogger()})
		if err != nil {
			t.Fatal(err)
		}
	})
}
