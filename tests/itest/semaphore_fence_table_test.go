package itest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/syncguard/syncguard-go/internal/rules"
	"github.com/syncguard/syncguard-go/semaphore"
	"github.com/syncguard/syncguard-go/syncguard"
	"github.com/syncguard/syncguard-go/tests/pgtest"
	"github.com/syncguard/syncguard-go/txguard"
)

// TestSemaphoreFenceTable runs docs/semaphore.md's fence table: one row per
// FenceKey under txguard's fence guard. A permit's write passes; a holder
// whose slot passed on is rejected (SG002); a permit of another slot is
// not, although its fence is smaller: slots' fences are separate counters.
// Guarded by the semaphore's key alone, that live permit would be refused.
func TestSemaphoreFenceTable(t *testing.T) {
	srv := pgtest.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := open(t, srv.DSN)
	cfg := semTables(t, db)
	fences := rules.QuoteIdent(cfg.TableName + "_export_fences")
	mustExec(ctx, t, db, `CREATE TABLE `+fences+` (fence_key text PRIMARY KEY, fence text NOT NULL)`)
	t.Cleanup(func() { _, _ = db.Exec(`DROP TABLE IF EXISTS ` + fences) })
	if err := txguard.SetupFenceGuard(ctx, db, cfg.TableName+"_export_fences", "fence"); err != nil {
		t.Fatal(err)
	}
	guard, err := txguard.New(db, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	write := func(fenceKey string, fence syncguard.Fence) error {
		_, err := db.ExecContext(ctx, `INSERT INTO `+fences+` (fence_key, fence) VALUES ($1, $2)
ON CONFLICT (fence_key) DO UPDATE SET fence = EXCLUDED.fence`, fenceKey, string(fence))
		return guard.Classify(ctx, err)
	}
	sem, err := semaphore.New(db, &cfg, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer sem.Close()
	take := func(ttl time.Duration) (syncguard.AcquireResult, string) {
		t.Helper()
		r, err := sem.Acquire(ctx, "exports", ttl)
		if err != nil || !r.OK {
			t.Fatal(r, err)
		}
		slot, _ := sem.Slot(r.LockID)
		return r, semaphore.FenceKey("exports", slot)
	}
	a, aKey := take(200 * time.Millisecond)
	b, bKey := take(time.Minute)
	if err := write(aKey, a.Fence); err != nil {
		t.Fatalf("a permit's write: %v", err)
	}
	// a's slot passes on (a paused past its TTL): c gets it, with a larger fence.
	time.Sleep(1300 * time.Millisecond) // TTL + the 1 s tolerance
	c, cKey := take(time.Minute)
	if cKey != aKey || c.Fence <= a.Fence {
		t.Fatalf("the expired slot %s (fence %s) went to %s with fence %s", aKey, a.Fence, cKey, c.Fence)
	}
	if err := write(cKey, c.Fence); err != nil {
		t.Fatalf("the new holder's write: %v", err)
	}
	if err := write(aKey, a.Fence); !errors.Is(err, txguard.ErrStaleFence) {
		t.Errorf("rule: the old holder of the slot is rejected: %v", err)
	}
	if b.Fence >= c.Fence {
		t.Skipf("the other slot's fence %s is not below %s: nothing to compare", b.Fence, c.Fence)
	}
	if err := write(bKey, b.Fence); err != nil {
		t.Errorf("rule: a live permit of another slot writes its own row, whatever its fence: %v", err)
	}
	// One row for the whole key: b's live permit is refused (its slot's
	// fence is below c's), which is why the table has a row per FenceKey.
	if err := write("exports", c.Fence); err != nil {
		t.Fatal(err)
	}
	if err := write("exports", b.Fence); !errors.Is(err, txguard.ErrStaleFence) {
		t.Errorf("slots' fences compared in one row: %v", err)
	}
}
