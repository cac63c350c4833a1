package itest_test

import (
	"strings"
	"testing"
	"time"

	"github.com/syncguard/syncguard-go/syncguard"
)

// TestTxGuardHungHolderGiveUp: a holder checks its lease (Hold) and then
// idles in its transaction past the lease's expiry. A waiter that gives up
// says the lease expired and what keeps it: an open transaction on the
// lock row, not "still held by another owner" (issue 41).
func TestTxGuardHungHolderGiveUp(t *testing.T) {
	e := newTGEnv(t)
	key := "hung:holder"
	res, err := e.b.Acquire(e.ctx, key, 500*time.Millisecond)
	if err != nil || !res.OK {
		t.Fatal(res, err)
	}
	tx, pid := e.begin(nil)
	mustHold(t, e, tx, key, res)
	_, err = syncguard.Lock(e.ctx, e.b, key, &syncguard.LockOptions{Acquisition: syncguard.AcquisitionOptions{Timeout: 4 * time.Second}})
	if syncguard.CodeOf(err) != syncguard.ErrAcquisitionTimeout {
		t.Fatalf("the waiter behind a hung guarded holder: %v", err)
	}
	if msg := err.Error(); !strings.Contains(msg, "expired") || !strings.Contains(msg, "transaction") {
		t.Errorf("rule: the give-up says the lease expired and an open transaction keeps the key: %v", msg)
	}
	t.Logf("pid %d; %v", pid, err)

	// The bound docs/txguard.md gives: idle_in_transaction_session_timeout,
	// here set by the holder for its own transaction after Hold. PostgreSQL
	// ends the idle session, its row lock with it, and the waiter takes
	// the key within its Timeout.
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	key = "hung:bounded"
	res, err = e.b.Acquire(e.ctx, key, 500*time.Millisecond)
	if err != nil || !res.OK {
		t.Fatal(res, err)
	}
	tx, _ = e.begin(nil)
	mustHold(t, e, tx, key, res)
	if _, err := tx.ExecContext(e.ctx, `SET LOCAL idle_in_transaction_session_timeout = '1s'`); err != nil {
		t.Fatal(err)
	}
	lease, err := syncguard.Lock(e.ctx, e.b, key, &syncguard.LockOptions{Acquisition: syncguard.AcquisitionOptions{Timeout: 20 * time.Second}})
	if err != nil {
		t.Fatalf("rule: idle_in_transaction_session_timeout on the holder's transaction bounds the stall: %v", err)
	}
	lease.Close()
}
