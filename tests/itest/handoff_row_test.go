package itest_test

import (
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/syncguard/syncguard-go/internal/rules"
)

// TestHandOffKeepsTheLockRow: a release that hands the key to a waiter
// updates the key's lock row in place. The reference implementation's
// acquire takes the advisory lock, then reads the row FOR UPDATE and
// upserts it unconditionally; one that waits for the release's row lock
// must then find the waiter's live lock on that row. Had the hand-off
// deleted the row and inserted the waiter's, the reference's read would
// skip the deleted row, find the key free, and its upsert would overwrite
// the waiter's lock: two holders.
func TestHandOffKeepsTheLockRow(t *testing.T) {
	e := newWaitEnv(t, "handrow")
	b := e.backend()
	const key = "handrow:key"
	res, err := b.Acquire(e.ctx, key, time.Minute)
	if err != nil || !res.OK {
		t.Fatalf("acquire: %+v, %v", res, err)
	}
	w := b.Queue(key, "", false)
	defer w.Leave(e.ctx)
	if r, err := w.Attempt(e.ctx, time.Minute); err != nil || r.OK {
		t.Fatalf("queued attempt: %+v, %v", r, err)
	}
	// A notification reaches the waiter (as once its LISTEN takes effect):
	// the release hands it the key.
	var waiter, storage string
	if err := e.admin.QueryRowContext(e.ctx, `UPDATE handrow_locks_waiters SET "notified" = true, "near" = true RETURNING "lock_id", "key"`).Scan(&waiter, &storage); err != nil {
		t.Fatal(err)
	}

	db := open(t, e.dsn)
	tx, err := db.BeginTx(e.ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if r, err := b.WithTx(tx).Release(e.ctx, res.LockID); err != nil || !r.OK {
		t.Fatalf("release: %+v, %v", r, err)
	}
	ref, err := open(t, e.dsn).BeginTx(e.ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Rollback()
	var pid int
	if err := ref.QueryRowContext(e.ctx, `SELECT pg_backend_pid() FROM (SELECT pg_advisory_xact_lock(hashtext($1))) AS a`, storage).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	type row struct {
		lockID     string
		expires, n int64
		err        error
	}
	got := make(chan row, 1)
	go func() {
		var r row
		r.err = ref.QueryRowContext(e.ctx, `SELECT "lock_id", "expires_at_ms", `+rules.NowMsSQL+` FROM handrow_locks WHERE "key" = $1 FOR UPDATE`, storage).Scan(&r.lockID, &r.expires, &r.n)
		got <- r
	}()
	for waiting := false; !waiting; time.Sleep(5 * time.Millisecond) {
		if err := e.admin.QueryRowContext(e.ctx, `SELECT count(*) > 0 FROM pg_stat_activity WHERE pid = $1 AND wait_event_type = 'Lock'`, pid).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	r := <-got
	switch {
	case errors.Is(r.err, sql.ErrNoRows):
		t.Fatalf("rule: a hand-off keeps the lock row (an UPDATE): the reference acquire waiting for it found no row, and its unconditional upsert would overwrite the waiter's lock")
	case r.err != nil:
		t.Fatal(r.err)
	case r.lockID != waiter || r.expires <= r.n:
		t.Fatalf("rule: the reference acquire waiting for the released row finds the waiter's live lock; found lock %q expiring at %d (now %d), the waiter is %q", r.lockID, r.expires, r.n, waiter)
	}
}

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
