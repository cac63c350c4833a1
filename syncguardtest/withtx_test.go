package syncguardtest_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/syncguard/syncguard-go/syncguard"
	"github.com/syncguard/syncguard-go/syncguardtest"
)

// stubTx is a test's transaction: the fake never uses it.
type stubTx struct{ syncguard.Tx }

// A WithTx view shares the pool's store: its acquire is seen and released
// through the pool at once, its fences continue the key's, its calls are
// counted with the pool's and carry its transaction; a nil tx is the pool.
func TestWithTxView(t *testing.T) {
	ctx := context.Background()
	locks := syncguardtest.New()
	tx := &stubTx{}
	var seen []syncguardtest.Call
	locks.SetHook(func(_ context.Context, c syncguardtest.Call) error {
		seen = append(seen, c)
		return nil
	})

	r, err := locks.WithTx(tx).Acquire(ctx, "tenant:7", time.Minute)
	if err != nil || !r.OK || r.Fence != "000000000000001" {
		t.Fatalf("acquire on the view: %+v, %v", r, err)
	}
	if again, _ := locks.Acquire(ctx, "tenant:7", time.Minute); again.OK || again.Reason != syncguard.ReasonLocked {
		t.Errorf("the pool acquired a key the view holds: %+v", again)
	}
	if info, _ := locks.WithTx(tx).LookupID(ctx, r.LockID); info == nil {
		t.Errorf("the view does not see its own lock")
	}
	if rel, err := locks.Release(ctx, r.LockID); err != nil || !rel.OK {
		t.Errorf("the pool's release of the view's lock: %+v, %v", rel, err)
	}
	r2, _ := locks.WithTx(nil).Acquire(ctx, "tenant:7", time.Minute)
	if !r2.OK || r2.Fence != "000000000000002" {
		t.Errorf("after the release, a nil-tx view: %+v", r2)
	}
	if n := locks.Calls(syncguardtest.OpAcquire); n != 3 {
		t.Errorf("Calls(acquire) = %d, want 3 (the view's and the pool's)", n)
	}
	wantTx := []syncguard.Tx{tx, nil, tx, nil, nil}
	if len(seen) != len(wantTx) {
		t.Fatalf("hook saw %d calls, want %d: %+v", len(seen), len(wantTx), seen)
	}
	for i, c := range seen {
		if c.Tx != wantTx[i] {
			t.Errorf("call %d (%s): Tx %v, want %v", i, c.Op, c.Tx, wantTx[i])
		}
	}
}

// SetLogger and LeaseLogger: the leases' default logger discards until a
// test sets one.
func TestLeaseLogger(t *testing.T) {
	locks := syncguardtest.New()
	if l := locks.LeaseLogger(); l == nil || l.Enabled(context.Background(), slog.LevelError) {
		t.Errorf("the default LeaseLogger logs")
	}
	var buf bytes.Buffer
	mine := slog.New(slog.NewTextHandler(&buf, nil))
	locks.SetLogger(mine)
	if locks.WithTx(&stubTx{}).LeaseLogger() != mine {
		t.Errorf("a view's LeaseLogger is not the one SetLogger set")
	}
	locks.LeaseLogger().Warn("hello")
	if !strings.Contains(buf.String(), "hello") {
		t.Errorf("SetLogger's logger got %q", buf.String())
	}
	locks.SetLogger(nil)
	if locks.LeaseLogger().Enabled(context.Background(), slog.LevelError) {
		t.Errorf("SetLogger(nil) did not bring back the discarding logger")
	}
}
