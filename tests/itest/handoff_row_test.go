package itest_test

import (
	"testing"
	"time"
)

// TestReleaseDeletesItsOwnQueueRow: a waiter granted the key by a release
// takes it from the notification, without a statement, while an attempt
// of its may still be in flight; that attempt's snapshot predates the
// grant, so it writes the waiter's queue row back, live and attending,
// ahead of every later waiter. The lease's release deletes that row: the
// next waiter takes the free key at once instead of waiting out the row's
// queue window (seen in the etcd bench's trace as a key stalled 6.5 s).
func TestReleaseDeletesItsOwnQueueRow(t *testing.T) {
	e := newWaitEnv(t, "ownrow")
	b := e.backend()
	const key = "ownrow:key"
	res, err := b.Acquire(e.ctx, key, time.Minute)
	if err != nil || !res.OK {
		t.Fatalf("acquire: %+v, %v", res, err)
	}
	if _, err := e.admin.ExecContext(e.ctx, `INSERT INTO ownrow_locks_waiters ("key", "lock_id", "place", "deadline_ms", "ttl_ms", "user_key", "fence_key", "notified", "near")
		SELECT "key", "lock_id", 1, "expires_at_ms", 60000, "user_key", 'f', true, true FROM ownrow_locks WHERE "lock_id" = $1`, res.LockID); err != nil {
		t.Fatal(err)
	}
	if r, err := b.Release(e.ctx, res.LockID); err != nil || !r.OK {
		t.Fatalf("release: %+v, %v", r, err)
	}
	var n int
	if err := e.admin.QueryRowContext(e.ctx, `SELECT count(*) FROM ownrow_locks_waiters WHERE "lock_id" = $1`, res.LockID).Scan(&n); err != nil || n != 0 {
		t.Errorf("rule: a lease's release deletes a queue row of its lockId; %d left (%v)", n, err)
	}
	w := b.Queue(key, "", false)
	defer w.Leave(e.ctx)
	if r, err := w.Attempt(e.ctx, time.Minute); err != nil || !r.OK {
		t.Errorf("rule: the next waiter takes the free key at once, no row of a holder ahead of it; got %+v, %v", r, err)
	}
}
