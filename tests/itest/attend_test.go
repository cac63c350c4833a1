package itest_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/syncguard/syncguard-go/syncguard"
)

// TestAsleepWaiterKeepsItsPlaceNotItsTurn: a waiter whose row says it was
// far back at its last attempt and that no notification reaches it (near
// and notified false: asleep until its approach) is passed by a release,
// which hands the key to the first waiter that attends; one within reach
// of the head (near) is not passed, even unnotified (a waiter that polls).
// Before, the release left the key free for the asleep waiter and every
// waiter behind it waited for that waiter's next attempt, or its row's
// deadline (ten minutes here).
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
			// The waiter queues (it is near the head and listens), and a row
			// ahead of it is written by hand: a waiter of another process.
			waiter := e.backend()
			timeout := time.Minute
			if !tc.passed {
				timeout = time.Second // it must not get the key while the near waiter's row lives
			}
			type got struct {
				lease *syncguard.Lease
				err   error
			}
			out := make(chan got, 1)
			go func() {
				l, err := syncguard.Lock(e.ctx, waiter, "at:key", &syncguard.LockOptions{TTL: time.Minute,
					Acquisition: syncguard.AcquisitionOptions{Timeout: timeout}})
				out <- got{l, err}
			}()
			start := time.Now()
			waitFor(t, e, `SELECT count(*) = 1 FROM attend_locks_waiters WHERE "notified"`)
			// Past its first 2 s the waiter makes no scheduled retries: only
			// a hand-off's notification moves it before its renewal, 10 s
			// after its last attempt.
			time.Sleep(time.Until(start.Add(2200 * time.Millisecond)))
			mustExec(e.ctx, t, e.admin, `INSERT INTO attend_locks_waiters ("key", "lock_id", "place", "deadline_ms", "ttl_ms", "user_key", "fence_key", "notified", "near")
				SELECT "key", 'other-process-waiter', "place" - 1, "deadline_ms" + 600000, "ttl_ms", "user_key", "fence_key", false, `+map[bool]string{false: "false", true: "true"}[tc.near]+`
				FROM attend_locks_waiters`)
			released := time.Now()
			if _, err := held.Release(e.ctx); err != nil {
				t.Fatal(err)
			}
			r := <-out
			switch {
			case tc.passed && r.err != nil:
				t.Fatalf("rule: a release passes a waiter asleep far back and hands the key to the first that attends; the waiter behind it got %v", r.err)
			case tc.passed && time.Since(released) > 6*time.Second: // a hand-off takes milliseconds; the waiter's renewal comes 10 s after its last attempt
				t.Fatalf("rule: a release passes a waiter asleep far back and hands the key to the first that attends; the waiter behind it got the key %v after the release, at its renewal, not from the release", time.Since(released).Round(time.Millisecond))
			case !tc.passed && !errors.Is(r.err, syncguard.ErrAcquisitionTimeout):
				t.Fatalf("rule: a waiter near the head keeps its turn even unnotified; the waiter behind it got %v, want an acquisition timeout", r.err)
			}
			if r.lease != nil {
				_, _ = r.lease.Release(e.ctx)
			}
			var kept bool
			if err := e.admin.QueryRowContext(e.ctx, `SELECT count(*) = 1 FROM attend_locks_waiters WHERE "lock_id" = 'other-process-waiter'`).Scan(&kept); err != nil || !kept {
				t.Fatalf("the other process's waiter lost its place (%v)", err)
			}
		})
	}
}

// waitFor polls the admin pool until query returns true.
func waitFor(t *testing.T, e *waitEnv, query string) {
	t.Helper()
	for {
		var ok bool
		if err := e.admin.QueryRowContext(e.ctx, query).Scan(&ok); err != nil {
			t.Fatal(err)
		}
		if ok {
			return
		}
		select {
		case <-e.ctx.Done():
			t.Fatalf("%s: never true: %v", query, context.Cause(e.ctx))
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// TestWaitersTableOfAnOlderVersion: a waiters table without the "near"
// column (created by an older version, or its DDL applied by a migration
// tool) is reported by CheckDeployment with the fix, and a contended Lock
// still gets the key (the Backend goes on without the queue, warning
// once); SetupSchema adds the column.
func TestWaitersTableOfAnOlderVersion(t *testing.T) {
	e := newWaitEnv(t, "older")
	mustExec(e.ctx, t, e.admin, `ALTER TABLE older_locks_waiters DROP COLUMN "near"`)
	finding := func() syncguard.Finding {
		t.Helper()
		report, err := syncguard.CheckDeployment(e.ctx, e.admin, e.cfg)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range report.Findings {
			if f.Check == "waiters table" {
				return f
			}
		}
		t.Fatal("no waiters table finding")
		return syncguard.Finding{}
	}
	if f := finding(); f.Status != "warn" || !strings.Contains(f.Detail, `lacks the column "near"`) || !strings.Contains(f.Fix, "setup") {
		t.Errorf("rule: CheckDeployment reports a waiters table without the near column, with the fix; got %+v", f)
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
		SELECT "key", 'dead-' || g, "place" + g, (extract(epoch FROM clock_timestamp()) * 1000)::bigint - 120000, "ttl_ms", "user_key", "fence_key"
		FROM deadrows_locks_waiters, generate_series(1, 3) AS g`)
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
		t.Fatalf("rule: a new waiter's first attempt deletes its key's rows dead for a minute; %d of 3 are left", dead)
	}
}
