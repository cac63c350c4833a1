package itest_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/syncguard/syncguard-go/rwlock"
	"github.com/syncguard/syncguard-go/semaphore"
	"github.com/syncguard/syncguard-go/syncguard"
	"github.com/syncguard/syncguard-go/tests/pgtest"
	"github.com/syncguard/syncguard-go/tests/pgtest/suite"
)

// newestFirst reports whether holdings acquired at times at, with keys
// and tie-breakers ks, are in List's order: newest first, then by key and
// tie-breaker.
func newestFirst(at []time.Time, ks []string) bool {
	for i := 1; i < len(at); i++ {
		if at[i].After(at[i-1]) || at[i].Equal(at[i-1]) && ks[i] < ks[i-1] {
			return false
		}
	}
	return true
}

// listCanceled: List with a canceled context fails with its
// *syncguard.Error (Op, Code) before any I/O: list is List on a closed
// pool, which would answer "database is closed" had it been used.
func listCanceled(t *testing.T, op string, list func(context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := list(ctx)
	var e *syncguard.Error
	if !errors.As(err, &e) || e.Code == "" || e.Op != op || !errors.Is(err, context.Canceled) || strings.Contains(err.Error(), "database is closed") {
		t.Errorf("List(canceled ctx) = %v, want a *syncguard.Error %s with a Code and context.Canceled, no I/O tried", err, op)
	}
}

// TestSemaphoreList: List returns every live permit of every key with its
// key, number of permits, slot, fence, identity and lockId's hash, newest
// first; a released permit and the mutex of the same name are not in it.
func TestSemaphoreList(t *testing.T) {
	srv := pgtest.Require(t)
	for _, d := range []suite.Driver{pqDriver, pgxDriver} {
		t.Run(d.Name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			db := semOpen(t, d.Name, srv.DSN)
			cfg := semTables(t, db)
			cfg.Dialect, cfg.Identity = semDialect(d, srv.DSN), "default-id"
			s, err := semaphore.New(db, &cfg, 2)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if hs, err := s.List(ctx); err != nil || len(hs) != 0 {
				t.Fatalf("List with no permit held: %v, %v", hs, err)
			}
			p, err := s.Lock(ctx, "jobs", &syncguard.LockOptions{Identity: "worker-7"})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			held := map[string]syncguard.AcquireResult{}
			for _, k := range []string{"jobs", "other"} {
				r, err := s.Acquire(ctx, k, time.Minute)
				if err != nil || !r.OK {
					t.Fatal(r, err)
				}
				held[k] = r
			}
			hs, err := s.List(ctx)
			if err != nil || len(hs) != 3 {
				t.Fatalf("List: %d permits, %v", len(hs), err)
			}
			var at []time.Time
			var ks []string
			for _, h := range hs {
				at, ks = append(at, h.AcquiredAt), append(ks, h.Key+string(rune('0'+h.Slot)))
				want, ident := held[h.Key], "default-id"
				if h.LockIDHash == syncguard.HashKey(p.LockID()) {
					want, ident = syncguard.AcquireResult{LockID: p.LockID(), Fence: p.Fence()}, "worker-7"
				}
				slot, _ := s.Slot(want.LockID)
				if h.Permits != 2 || h.Slot != slot || h.Fence != want.Fence || h.LockIDHash != syncguard.HashKey(want.LockID) ||
					h.Identity != ident || !h.ExpiresAt.After(h.AcquiredAt) {
					t.Errorf("List: %+v; want %s's permit %+v, slot %d, identity %s", *h, h.Key, want, slot, ident)
				}
			}
			if !newestFirst(at, ks) {
				t.Errorf("List is not newest first, then by key and slot: %v %v", at, ks)
			}
			if _, err := s.Release(ctx, held["jobs"].LockID); err != nil {
				t.Fatal(err)
			}
			if hs, err := s.List(ctx); err != nil || len(hs) != 2 || hs[0].LockIDHash == syncguard.HashKey(held["jobs"].LockID) ||
				hs[1].LockIDHash == syncguard.HashKey(held["jobs"].LockID) {
				t.Errorf("List after a release: %d permits, %v", len(hs), err)
			}
			closed := semOpen(t, d.Name, srv.DSN)
			cs, err := semaphore.New(closed, &cfg, 2)
			if err != nil {
				t.Fatal(err)
			}
			closed.Close()
			listCanceled(t, "list", func(ctx context.Context) error { _, err := cs.List(ctx); return err })
		})
	}
}

// TestRWLockList: List returns every live lease of every key, shared and
// exclusive, with its key, fence (a reader's writer generation), identity
// and lockId's hash, newest first; a released lease is not in it.
func TestRWLockList(t *testing.T) {
	srv := pgtest.Require(t)
	for _, d := range []suite.Driver{pqDriver, pgxDriver} {
		t.Run(d.Name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			rw, db, cfg := rwTarget(t, d, srv.DSN)
			if hs, err := rw.List(ctx); err != nil || len(hs) != 0 {
				t.Fatalf("List with no lease held: %v, %v", hs, err)
			}
			// A writer came and went: readers of "doc" get generation 1.
			w, err := rw.Exclusive().Acquire(ctx, "doc", time.Minute)
			if err != nil || !w.OK {
				t.Fatal(w, err)
			}
			if _, err := rw.Exclusive().Release(ctx, w.LockID); err != nil {
				t.Fatal(err)
			}
			cfg.Identity = "reader-3"
			rw2, err := rwlock.New(db, &cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer rw2.Close()
			type lease struct {
				r          syncguard.AcquireResult
				key, ident string
				exclusive  bool
			}
			held := map[string]lease{}
			for _, a := range []struct {
				l          *rwlock.Locker
				key, ident string
			}{{rw.Shared(), "doc", ""}, {rw2.Shared(), "doc", "reader-3"}, {rw.Exclusive(), "other", ""}} {
				r, err := a.l.Acquire(ctx, a.key, time.Minute)
				if err != nil || !r.OK {
					t.Fatal(r, err)
				}
				held[syncguard.HashKey(r.LockID)] = lease{r, a.key, a.ident, a.l.IsExclusive()}
			}
			hs, err := rw.List(ctx)
			if err != nil || len(hs) != 3 {
				t.Fatalf("List: %d leases, %v", len(hs), err)
			}
			var at []time.Time
			var ks []string
			for _, h := range hs {
				at, ks = append(at, h.AcquiredAt), append(ks, h.Key+h.LockIDHash)
				want, ok := held[h.LockIDHash]
				if !ok || h.Key != want.key || h.Exclusive != want.exclusive || h.Fence != want.r.Fence || h.Fence != "000000000000001" ||
					h.Identity != want.ident || !h.ExpiresAt.After(h.AcquiredAt) {
					t.Errorf("List: %+v; want %+v", *h, want)
				}
			}
			if !newestFirst(at, ks) {
				t.Errorf("List is not newest first, then by key and lockId: %v %v", at, ks)
			}
			for _, l := range held {
				if l.exclusive {
					if _, err := rw.Exclusive().Release(ctx, l.r.LockID); err != nil {
						t.Fatal(err)
					}
				}
			}
			if hs, err := rw.List(ctx); err != nil || len(hs) != 2 || hs[0].Exclusive || hs[1].Exclusive {
				t.Errorf("List after the writer's release: %d leases, %v", len(hs), err)
			}
			closed, err := sql.Open(d.Name, srv.DSN)
			if err != nil {
				t.Fatal(err)
			}
			closed.Close()
			cr, err := rwlock.New(closed, &cfg)
			if err != nil {
				t.Fatal(err)
			}
			listCanceled(t, "rwlock.list", func(ctx context.Context) error { _, err := cr.List(ctx); return err })
		})
	}
}
