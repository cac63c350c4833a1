package chaos

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/syncguard/syncguard-go/multilock"
	"github.com/syncguard/syncguard-go/rwlock"
	"github.com/syncguard/syncguard-go/semaphore"
	"github.com/syncguard/syncguard-go/syncguard"
	"github.com/syncguard/syncguard-go/tests/pgtest"
	"github.com/syncguard/syncguard-go/tests/pgtest/history"
	"github.com/syncguard/syncguard-go/tests/pgtest/kindcheck"
	"github.com/syncguard/syncguard-go/txguard"
)

// The shared checks of the lock kinds (tests/pgtest/kindcheck) find what
// they are for, on audits written by hand: two semaphore holders of one
// slot at once, a writer beside a reader, a multilock key held twice, and
// a txguard write from a released lease (rejected, not committed). A long
// suite (it needs the server).
func TestKindChecksFindViolations(t *testing.T) {
	pgtest.Long(t, "the lock kinds' checks on a server")
	srv := pgtest.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, err := sql.Open("pgx", srv.DSN+"&application_name=kindcheck-test")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	cfg := syncguard.Config{TableName: "kc_test_locks", FenceTableName: "kc_test_fences"}
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := db.ExecContext(ctx, q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	for _, setup := range []func() error{
		func() error { return syncguard.SetupSchema(ctx, db, &cfg) },
		func() error { return semaphore.SetupSchema(ctx, db, &cfg) },
		func() error { return rwlock.SetupSchema(ctx, db, &cfg) },
		func() error { return multilock.SetupSchema(ctx, db, &cfg) },
		func() error { return kindcheck.InstallSemaphoreAudit(ctx, db, cfg.TableName) },
		func() error { return kindcheck.InstallRWLockAudit(ctx, db, cfg.TableName) },
		func() error { return kindcheck.InstallMultiLockAudit(ctx, db, &cfg) },
	} {
		if err := setup(); err != nil {
			t.Fatal(err)
		}
	}
	rules := func(check func() ([]string, error)) map[string]int {
		t.Helper()
		rs, err := check()
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]int{}
		for _, r := range rs {
			m[r]++
		}
		return m
	}
	// Semaphore of 1: slot 1 held by A [1000, 5000), B from 3000 with a
	// lower fence.
	exec(`INSERT INTO ` + kindcheck.SemaphoreAudit(cfg.TableName) + ` VALUES (1, 'A', 2, 1000, 5000), (1, 'B', 1, 3000, 6000)`)
	got := rules(func() ([]string, error) {
		_, vs, err := kindcheck.CheckSemaphore(ctx, db, cfg.TableName, 1)
		return ruleNames(vs), err
	})
	if got[kindcheck.RuleSemSlot] != 1 || got[kindcheck.RuleSemFences] != 1 || got[kindcheck.RuleSemPermits] != 1 {
		t.Errorf("semaphore: %v", got)
	}
	// rwlock: writer W (fence 1) admitted while reader R (fence 0) holds.
	rwAudit, _ := kindcheck.RWLockAudit(cfg.TableName)
	exec(`INSERT INTO ` + rwAudit + ` (at_ms, op, lock_id, key, exclusive, fence, expires_at_ms) VALUES
		(1000, 'I', 'R', 'k', false, 0, 9000), (2000, 'I', 'W', 'k', true, 1, 9000)`)
	got = rules(func() ([]string, error) {
		vs, _, err := kindcheck.CheckRWLock(ctx, db, cfg.TableName)
		return ruleNames(vs), err
	})
	if got[kindcheck.RuleRWWriter] != 1 || len(got) != 1 {
		t.Errorf("rwlock: %v", got)
	}
	// multilock: key k held by S1 (set of 2, one row written) and S2 at
	// once, S2 with the same fence: one violation of each rule.
	mlAudit, _ := kindcheck.MultiLockAudit(cfg.TableName)
	exec(`INSERT INTO ` + mlAudit + ` (at_ms, op, xid, lock_id, key, fence, expires_at_ms, n) VALUES
		(1000, 'I', 1, 'S1', 'k', '000000000000001', 9000, 2), (2000, 'I', 2, 'S2', 'k', '000000000000001', 9000, 1)`)
	// S3 holds {m1, m2}, releases it, and its lockId holds it again in
	// another transaction (an attempt of unknown outcome that committed
	// after the clean-up): two holdings, each whole.
	exec(`INSERT INTO ` + mlAudit + ` (at_ms, op, xid, lock_id, key, fence, expires_at_ms, n) VALUES
		(10000, 'I', 3, 'S3', 'm1', '000000000000001', 20000, 2), (10000, 'I', 3, 'S3', 'm2', '000000000000001', 20000, 2)`)
	exec(`INSERT INTO ` + mlAudit + ` (at_ms, op, xid, old_lock_id, key) VALUES (11000, 'D', 5, 'S3', 'm1'), (11000, 'D', 5, 'S3', 'm2')`)
	exec(`INSERT INTO ` + mlAudit + ` (at_ms, op, xid, lock_id, key, fence, expires_at_ms, n) VALUES
		(12000, 'I', 4, 'S3', 'm1', '000000000000002', 20000, 2), (12000, 'I', 4, 'S3', 'm2', '000000000000002', 20000, 2)`)
	got = rules(func() ([]string, error) {
		vs, _, err := kindcheck.CheckMultiLock(ctx, db, cfg.TableName)
		return ruleNames(vs), err
	})
	if got[kindcheck.RuleMLOverlap] != 1 || got[kindcheck.RuleMLFences] != 1 || got[kindcheck.RuleMLOneTx] != 1 || len(got) != 3 {
		t.Errorf("multilock: %v", got)
	}
	// txguard: a write under a live lease commits; after the release the
	// same write is rejected (gone), the table keeps the one write.
	tx, err := kindcheck.SetupTxTable(ctx, db, &cfg, "kc_test_resource")
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Drop(context.Background(), db)
	b, err := syncguard.New(db, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	g, err := txguard.New(db, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	res, err := b.Acquire(ctx, "tx-key", 10*time.Second)
	if err != nil || !res.OK {
		t.Fatalf("acquire: %+v %v", res, err)
	}
	fence, _ := res.Fence.Int64()
	for _, viaSQL := range []bool{false, true} {
		if out, detail, _ := tx.Write(ctx, db, g, "tx-key", res.LockID, fence, viaSQL); out != kindcheck.TxAccepted {
			t.Fatalf("write under the lease (viaSQL %v): %v %s", viaSQL, out, detail)
		}
	}
	if _, err := b.Release(ctx, res.LockID); err != nil {
		t.Fatal(err)
	}
	if out, detail, _ := tx.Write(ctx, db, g, "tx-key", res.LockID, fence, false); out != kindcheck.TxLeaseGone && out != kindcheck.TxLeaseExpired {
		t.Errorf("a write from a released lease: %v %s, want it rejected", out, detail)
	}
	rows, err := tx.Rows(ctx, db)
	if err != nil || rows["tx-key"] != (kindcheck.TxRow{Fence: fence, Writes: 2}) {
		t.Errorf("resource rows %v (%v), want fence %d, 2 writes", rows, err, fence)
	}
}

func ruleNames(vs []history.Violation) []string {
	var rs []string
	for _, v := range vs {
		rs = append(rs, v.Rule)
	}
	return rs
}
