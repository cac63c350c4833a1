package itest_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/syncguard/syncguard-go/conformance"
	"github.com/syncguard/syncguard-go/syncguard"
	"github.com/syncguard/syncguard-go/tests/pgtest"
)

// TestInspect: Backend.List and Backend.LastFence against PostgreSQL with
// each driver. List returns live locks newest first with server time and
// the liveness rule of the operations; LastFence reads the counter that
// survives release.
func TestInspect(t *testing.T) {
	srv := pgtest.Require(t)
	for i, drv := range []string{"postgres", "pgx"} {
		t.Run(drv, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			db := conformance.Opener(drv, srv.DSN)(t)
			cfg := &syncguard.Config{TableName: fmt.Sprintf("inspect_locks_%d", i), FenceTableName: fmt.Sprintf("inspect_fences_%d", i)}
			if err := syncguard.SetupSchema(ctx, db, cfg); err != nil {
				t.Fatal(err)
			}
			b, err := syncguard.New(db, cfg)
			if err != nil {
				t.Fatal(err)
			}
			l, err := b.List(ctx, nil)
			if err != nil || len(l.Locks) != 0 || l.More || l.Now.IsZero() {
				t.Fatalf("rule: an empty table lists no locks, with the server's time; got %+v, %v", l, err)
			}
			if f, now, err := b.LastFence(ctx, "never"); err != nil || f != "" || now.IsZero() {
				t.Fatalf("rule: a key never acquired has no last fence; got %q %v %v", f, now, err)
			}

			var held []syncguard.AcquireResult
			for _, k := range []string{"a", "b", "c"} {
				r, err := b.Acquire(ctx, k, time.Minute)
				if err != nil || !r.OK {
					t.Fatalf("setup: acquire %s: %+v %v", k, r, err)
				}
				held = append(held, r)
				time.Sleep(2 * time.Millisecond) // distinct acquired_at_ms, for the order
			}
			// One expired row: a 1 ms lock, past the 1 s tolerance.
			if r, err := b.Acquire(ctx, "gone", time.Millisecond); err != nil || !r.OK {
				t.Fatalf("setup: %+v %v", r, err)
			}
			if r, err := b.Release(ctx, held[0].LockID); err != nil || !r.OK {
				t.Fatalf("setup: release a: %+v %v", r, err)
			}
			deadline := time.Now().Add(30 * time.Second)
			for {
				l, err = b.List(ctx, &syncguard.ListOptions{Expired: true, Raw: true})
				if err != nil {
					t.Fatal(err)
				}
				if len(l.Locks) == 3 && !l.Live(l.Locks[0]) || time.Now().After(deadline) {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			if len(l.Locks) != 3 || l.Locks[0].Key != "gone" || l.Live(l.Locks[0]) ||
				l.Locks[1].Key != "c" || !l.Live(l.Locks[1]) || l.Locks[2].LockID != held[1].LockID {
				t.Fatalf("rule: Expired lists every row newest first, the expired one not live; got %+v", l.Locks)
			}

			l, err = b.List(ctx, &syncguard.ListOptions{Limit: 1})
			if err != nil || len(l.Locks) != 1 || !l.More || l.Locks[0].KeyHash != syncguard.HashKey("c") || l.Locks[0].Key != "" ||
				l.Locks[0].Fence != held[2].Fence || !l.Locks[0].ExpiresAt.Equal(held[2].ExpiresAt) {
				t.Fatalf("rule: List is live locks only, newest first, limited, hashed unless Raw; got %+v, %v", l, err)
			}
			l, err = b.List(ctx, &syncguard.ListOptions{Limit: -1})
			if err != nil || len(l.Locks) != 2 || l.More {
				t.Fatalf("rule: released and expired locks are not listed by default; got %+v, %v", l, err)
			}

			if f, _, err := b.LastFence(ctx, "a"); err != nil || f != held[0].Fence {
				t.Fatalf("rule: the last fence survives release; got %q %v, want %s", f, err, held[0].Fence)
			}
			r, err := b.Acquire(ctx, "a", time.Minute)
			if err != nil || !r.OK || r.Fence <= held[0].Fence {
				t.Fatalf("setup: %+v %v", r, err)
			}
			if f, _, err := b.LastFence(ctx, "a"); err != nil || f != r.Fence {
				t.Fatalf("rule: the last fence is the latest acquire's; got %q %v, want %s", f, err, r.Fence)
			}
		})
	}
}
