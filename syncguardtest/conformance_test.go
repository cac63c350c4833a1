package syncguardtest_test

import (
	"context"
	"time"

	"testing"

	"github.com/syncguard/syncguard-go/conformance"
	"github.com/syncguard/syncguard-go/syncguard"
	"github.com/syncguard/syncguard-go/syncguardtest"
)

// TestConformance runs the backend tier of the conformance suite (every
// property of a syncguard.LockBackend) against the in-memory backend.
func TestConformance(t *testing.T) {
	conformance.RunBackend(t, conformance.BackendHarness{New: target})
}

// target is a fresh Backend with every hook the backend tier can use.
func target(t *testing.T) conformance.Target {
	b := syncguardtest.New()
	down := syncguardtest.New()
	for _, op := range []syncguardtest.Op{syncguardtest.OpAcquire, syncguardtest.OpRelease, syncguardtest.OpExtend, syncguardtest.OpIsLocked, syncguardtest.OpLookup} {
		down.Fail(op, syncguard.ErrServiceUnavailable, -1)
	}
	return conformance.Target{
		Backend: b,
		Now:     func(context.Context) (time.Time, error) { return b.Now(), nil },
		WaitPast: func(_ context.Context, at time.Time) error {
			if d := at.Sub(b.Now()); d >= 0 {
				b.Advance(d + time.Millisecond)
			}
			return nil
		},
		Unreachable: down,
		Count:       func(context.Context) (int, error) { return b.Len(), nil },
		SetFence:    func(_ context.Context, key string, n int64) error { return b.SetFence(key, n) },
		Delete: func(_ context.Context, id string) error {
			b.Delete(id)
			return nil
		},
		Expire: func(_ context.Context, id string) error {
			b.Expire(id)
			return nil
		},
		Capabilities: &syncguard.Capabilities{Backend: "syncguardtest", SupportsFencing: true, TimeAuthority: "server"},
	}
}
