package syncguardtest_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/syncguard/syncguard-go/syncguard"
	"github.com/syncguard/syncguard-go/syncguardtest"
)

// Leases on the fake are quiet by default: an injected outage of the
// extends makes auto-extension fail every TTL/10 until the lock is lost,
// and none of its warnings reach slog.Default; with SetLogger they reach
// the test's logger.
func TestLeasesQuietByDefault(t *testing.T) {
	var def bytes.Buffer
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&def, nil)))
	defer slog.SetDefault(old)

	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		locks := syncguardtest.New()
		locks.Fail(syncguardtest.OpExtend, syncguard.ErrServiceUnavailable, -1)
		outage := func() error {
			return syncguard.WithLock(ctx, locks, "jobs:quiet", func(ctx context.Context, _ *syncguard.Lease) error {
				<-ctx.Done()
				return context.Cause(ctx)
			}, &syncguard.LockOptions{TTL: 10 * time.Second, AutoExtend: true})
		}
		if err := outage(); !errors.Is(err, syncguard.ErrLockLost) {
			t.Fatalf("with every extend failing: %v, want ErrLockLost", err)
		}
		if n := locks.Calls(syncguardtest.OpExtend); n != 0 {
			t.Fatalf("%d extends reached the store", n)
		}
		if def.Len() != 0 {
			t.Errorf("the fake's leases logged to slog.Default:\n%s", def.String())
		}

		var mine bytes.Buffer
		locks.SetLogger(slog.New(slog.NewTextHandler(&mine, nil)))
		if err := outage(); !errors.Is(err, syncguard.ErrLockLost) {
			t.Fatalf("with every extend failing: %v, want ErrLockLost", err)
		}
		if !strings.Contains(mine.String(), "automatic lock extension failed") || def.Len() != 0 {
			t.Errorf("with SetLogger: the test's logger got %q, slog.Default %q", mine.String(), def.String())
		}
	})
}

// unwrapper is a wrapper of the caller's own that unwraps (no Queue: Lock
// polls through it).
type unwrapper struct{ syncguard.LockBackend }

func (u unwrapper) Unwrap() syncguard.LockBackend { return u.LockBackend }

// The fake stays quiet through a wrapper around it.
func TestLeasesQuietThroughAWrapper(t *testing.T) {
	var def bytes.Buffer
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&def, nil)))
	defer slog.SetDefault(old)
	synctest.Test(t, func(t *testing.T) {
		locks := syncguardtest.New()
		locks.Fail(syncguardtest.OpExtend, syncguard.ErrServiceUnavailable, -1)
		err := syncguard.WithLock(context.Background(), unwrapper{locks}, "jobs:quiet", func(ctx context.Context, _ *syncguard.Lease) error {
			<-ctx.Done()
			return context.Cause(ctx)
		}, &syncguard.LockOptions{TTL: 10 * time.Second, AutoExtend: true})
		if !errors.Is(err, syncguard.ErrLockLost) {
			t.Fatalf("with every extend failing: %v, want ErrLockLost", err)
		}
		if def.Len() != 0 {
			t.Errorf("the fake's leases logged to slog.Default through a wrapper:\n%s", def.String())
		}
	})
}
