package itest_test

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/syncguard/syncguard-go/doctor"
	"github.com/syncguard/syncguard-go/syncguard"
)

// TestAsleepWaiterKeepsItsPlaceNotItsTurn: a waiter whose row says it was
// far back at its last attempt and that no notification reaches it (near
// and notified false: asleep until its approach) is passed by a release,
// which hands the key to the first waiter that attends, in its own
// commit; one within reach of the head (near) is not passed, even
// unnotified (a waiter that polls): the release leaves it the key, and
// the waiter behind it may not take it. Before, the release left the key
// free for the asleep waiter too, and nobody behind could take it.
func TestAsleepWaiterKeepsItsPlaceNotItsTurn(t *testing.T) {
	for _, tc := range []struct {
		name   string
		near   bool
		passed bool
	}{{"asleep far back", false, true}, {"near, polling", true, false}} {
		t.Run(tc.name, func(t *testing.T) {
			e := newWaitEnv(t, "attend")
			holder := e.backend()
			held, err := syncguard.Lock(e.ctx, holder, "at:key", &syncguard.LockOptions{TTL: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			// The waiter queues, and its row says a notification reaches
			// it; a row ahead of it is another process's waiter.
			w := e.backend().Queue("at:key", "", false)
			if res, err := w.Attempt(e.ctx, time.Minute); err != nil || res.OK {
				t.Fatalf("queued attempt: %+v, %v", res, err)
			}
			defer w.Leave(e.ctx)
			var id string
			if err := e.admin.QueryRowContext(e.ctx, `UPDATE attend_locks_waiters SET "notified" = true RETURNING "lock_id"`).Scan(&id); err != nil {
				t.Fatal(err)
			}
			mustExec(e.ctx, t, e.admin, `INSERT INTO attend_locks_waiters ("key", "lock_id", "place", "deadline_ms", "ttl_ms", "user_key", "fence_key", "notified", "near")
				SELECT "key", 'other-process-waiter', "place" - 1, "deadline_ms", "ttl_ms", "user_key", "fence_key", false, `+map[bool]string{false: "false", true: "true"}[tc.near]+`
				FROM attend_locks_waiters`)
			if _, err := held.Release(e.ctx); err != nil {
				t.Fatal(err)
			}
			var holderNow sql.NullString
			if err := e.admin.QueryRowContext(e.ctx, `SELECT max("lock_id") FROM attend_locks WHERE "key" = (SELECT "key" FROM attend_locks_waiters LIMIT 1)`).Scan(&holderNow); err != nil {
				t.Fatal(err)
			}
			switch {
			case tc.passed && holderNow.String != id:
				t.Fatalf("rule: a release passes a waiter asleep far back and hands the key to the first that attends, in its commit; the key's row is %q, want the waiter's %q", holderNow.String, id)
			case !tc.passed && holderNow.Valid:
				t.Fatalf("rule: a release leaves a near waiter's turn to it, even unnotified; it handed the key to %q", holderNow.String)
			}
			if !tc.passed {
				if res, err := w.Attempt(e.ctx, time.Minute); err != nil || res.OK {
					t.Fatalf("rule: a waiter behind a near waiter may not take the key it was left; attempt: %+v, %v", res, err)
				}
			}
			var kept bool
			if err := e.admin.QueryRowContext(e.ctx, `SELECT count(*) = 1 FROM attend_locks_waiters WHERE "lock_id" = 'other-process-waiter'`).Scan(&kept); err != nil || !kept {
				t.Fatalf("the other process's waiter lost its place (%v)", err)
			}
		})
	}
}

// TestWaitersTableOfAnOlderVersion: a waiters table without the "near"
// column (created by an older version, or its DDL applied by a migration
// tool) is reported by doctor.Check with the fix, and a contended Lock
// still gets the key (the Backend goes on without the queue, warning
// once); SetupSchema adds the column.
func TestWaitersTableOfAnOlderVersion(t *testing.T) {
	e := newWaitEnv(t, "older")
	mustExec(e.ctx, t, e.admin, `ALTER TABLE older_locks_waiters DROP COLUMN "near"`)
	finding := func() doctor.Finding {
		t.Helper()
		report, err := doctor.Check(e.ctx, e.admin, e.cfg)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range report.Findings {
			if f.Check == "waiters table" {
				return f
			}
		}
		t.Fatal("no waiters table finding")
		return doctor.Finding{}
	}
	if f := finding(); f.Status != "warn" || !strings.Contains(f.Detail, `lacks the column "near"`) || !strings.Contains(f.Fix, "setup") {
		t.Errorf("rule: doctor.Check reports a waiters table without the near column, with the fix; got %+v", f)
	}
	holder, waiter := e.backend(), e.backend()
	held, err := syncguard.Lock(e.ctx, holder, "old:key", &syncguard.LockOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(100*time.Millisecond, func() { _, _ = held.Release(context.WithoutCancel(e.ctx)) })
	l, err := syncguard.Lock(e.ctx, waiter, "old:key", &syncguard.LockOptions{TTL: time.Minute, Acquisition: syncguard.AcquisitionOptions{Timeout: time.Minute}})
	if err != nil {
		t.Fatalf("rule: a contended Lock works with a waiters table of an older version (without the queue); got %v", err)
	}
	_, _ = l.Release(e.ctx)
	if err := syncguard.SetupSchema(e.ctx, e.admin, e.cfg); err != nil {
		t.Fatal(err)
	}
	if f := finding(); f.Status != "ok" {
		t.Errorf("rule: SetupSchema adds the near column; the finding is still %+v", f)
	}
}

// TestDeadWaiterRowsGoAtANewWaitersAttempt: rows of waiters dead for a
// minute (crashed, or tombstones of waiters that gave up) are deleted by
// a new waiter's first attempt on their key, even when it is not first:
// on a key whose waiters take their grants from notifications, and so
// attempt at the head rarely, the rows do not pile up.
func TestDeadWaiterRowsGoAtANewWaitersAttempt(t *testing.T) {
	e := newWaitEnv(t, "deadrows")
	holder := e.backend()
	held, err := syncguard.Lock(e.ctx, holder, "dr:key", &syncguard.LockOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(e.ctx)
	b := e.backend()
	first := b.Queue("dr:key", "", false) // first in the queue, alive
	if res, err := first.Attempt(e.ctx, time.Minute); err != nil || res.OK {
		t.Fatalf("first waiter: %+v, %v", res, err)
	}
	defer first.Leave(e.ctx)
	mustExec(e.ctx, t, e.admin, `INSERT INTO deadrows_locks_waiters ("key", "lock_id", "place", "deadline_ms", "ttl_ms", "user_key", "fence_key")
		SELECT "key", 'dead-' || g, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint - 180000000 + g,
			(extract(epoch FROM clock_timestamp()) * 1000)::bigint - 120000, "ttl_ms", "user_key", "fence_key"
		FROM deadrows_locks_waiters, generate_series(1, 3) AS g`)
	// Tombstones (ttl 0) of waiters that gave up two minutes ago, as this
	// version writes them (place: the time it died less 2^62) and as an
	// older one did (place 0); and one that died a second ago, which stays.
	mustExec(e.ctx, t, e.admin, `INSERT INTO deadrows_locks_waiters ("key", "lock_id", "place", "deadline_ms", "ttl_ms", "user_key", "fence_key")
		SELECT 'dr:key', v.id, v.place, (extract(epoch FROM clock_timestamp()) * 1000)::bigint - v.ago_ms, 0, '', ''
		FROM (VALUES ('dead-t1', (extract(epoch FROM clock_timestamp()) * 1000000)::bigint - 120000000 - 4611686018427387904, 120000),
		             ('dead-t2', (extract(epoch FROM clock_timestamp()) * 1000000)::bigint - 119000000 - 4611686018427387904, 119000),
		             ('dead-t0', 0, 120000),
		             ('keep-t', (extract(epoch FROM clock_timestamp()) * 1000000)::bigint - 1000000 - 4611686018427387904, 1000)) AS v (id, place, ago_ms)`)
	second := b.Queue("dr:key", "", false)
	if res, err := second.Attempt(e.ctx, time.Minute); err != nil || res.OK {
		t.Fatalf("second waiter: %+v, %v", res, err)
	}
	defer second.Leave(e.ctx)
	var dead int
	if err := e.admin.QueryRowContext(e.ctx, `SELECT count(*) FROM deadrows_locks_waiters WHERE "lock_id" LIKE 'dead-%'`).Scan(&dead); err != nil {
		t.Fatal(err)
	}
	if dead != 0 {
		t.Fatalf("rule: a new waiter's first attempt deletes its key's rows dead for a minute; %d of 6 are left", dead)
	}
	if err := e.admin.QueryRowContext(e.ctx, `SELECT count(*) FROM deadrows_locks_waiters WHERE "lock_id" = 'keep-t'`).Scan(&dead); err != nil || dead != 1 {
		t.Fatalf("rule: a tombstone stays for a minute (an attempt of its waiter may still run); the one that died a second ago: %d rows, %v", dead, err)
	}
}

// TestReleaseInTxWithAnOlderWaitersTable: a release inside the caller's
// transaction, on a waiters table without the near column, fails once
// (the error aborts the transaction) and tells the Backend the table is
// of an older version: the caller's retry releases without the queue.
func TestReleaseInTxWithAnOlderWaitersTable(t *testing.T) {
	e := newWaitEnv(t, "oldtx")
	mustExec(e.ctx, t, e.admin, `ALTER TABLE oldtx_locks_waiters DROP COLUMN "near"`)
	b := e.backend()
	res, err := b.Acquire(e.ctx, "ot:key", time.Minute)
	if err != nil || !res.OK {
		t.Fatal(res, err)
	}
	db := open(t, e.dsn)
	for try := 1; ; try++ {
		tx, err := db.BeginTx(e.ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		r, err := b.WithTx(tx).Release(e.ctx, res.LockID)
		if err == nil && r.OK {
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
			break
		}
		_ = tx.Rollback()
		if try == 2 {
			t.Fatalf("rule: after a release in a transaction met a waiters table of an older version, the caller's retry releases without it; try %d: %+v, %v", try, r, err)
		}
	}
}
