package itest_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/syncguard/syncguard-go/internal/rules"
	"github.com/syncguard/syncguard-go/tests/pgtest"
)

// TestRWLockReaderStatementsShare: a reader's release left open in a
// transaction (its statement done, its commit not yet) holds the key row
// FOR SHARE: another reader's acquire and release still run to the end
// (they took FOR UPDATE before, and waited for that commit), while a
// writer's acquire waits for it. The bound is one only a reader that
// waits for another reader's commit reaches.
func TestRWLockReaderStatementsShare(t *testing.T) {
	rw, db, cfg := rwTarget(t, pgxDriver, pgtest.Require(t).DSN)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const key = "share"
	r1, err := rw.Shared().Acquire(ctx, key, time.Minute)
	if err != nil || !r1.OK {
		t.Fatal(r1, err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback() //nolint:errcheck
	var released bool
	if err := tx.QueryRowContext(ctx, fmt.Sprintf(`SELECT "released" FROM %s($1, NULL, true)`, rules.QuoteIdent(cfg.TableName+"_rw_release")),
		r1.LockID).Scan(&released); err != nil || !released {
		t.Fatal(released, err)
	}
	wch := make(chan error, 1)
	go func() {
		w, err := rw.Exclusive().Acquire(ctx, key, time.Minute)
		if err == nil && !w.OK {
			err = fmt.Errorf("the writer was turned away: %+v", w)
		}
		wch <- err
	}()
	rctx, rcancel := context.WithTimeout(ctx, 30*time.Second)
	defer rcancel()
	r2, err := rw.Shared().Acquire(rctx, key, time.Minute)
	if err != nil || !r2.OK {
		t.Fatalf("rule: a reader's acquire does not wait for another reader's uncommitted release: %+v, %v", r2, err)
	}
	if r, err := rw.Shared().Release(rctx, r2.LockID); err != nil || !r.OK {
		t.Fatalf("rule: a reader's release does not wait for another reader's uncommitted release: %+v, %v", r, err)
	}
	select {
	case err := <-wch:
		t.Fatalf("rule: a writer's acquire waits for a reader's uncommitted release (FOR UPDATE after FOR SHARE): it ended: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := <-wch; err != nil {
		t.Fatalf("rule: once the readers' releases commit, the writer is admitted: %v", err)
	}
}
