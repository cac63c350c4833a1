package itest_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/syncguard/syncguard-go/internal/rules"
	"github.com/syncguard/syncguard-go/semaphore"
	"github.com/syncguard/syncguard-go/syncguard"
	"github.com/syncguard/syncguard-go/tests/pgtest"
)

// The primitives' statements, as TestStatementsKeepTheirGenericPlans
// checks the Backend's: planned with their values at most the five times
// PostgreSQL does so before it compares with the generic plan ("Planning"
// in docs/design.md), with the statistics of a few keys with long queues
// in the package's waiters table.

// planRounds: each statement runs this many times on one connection.
const planRounds = 12

// planStats fills waiters (its columns those of cols, the key in "key",
// the lockId in "lock_id", the place in "place") with 30 keys of 300
// waiters each, and analyzes it: the statistics that made the mutex's
// queued acquire plan every execution.
func planStats(ctx context.Context, t *testing.T, db *sql.DB, waiters, cols, values string) {
	t.Helper()
	for i := range 30 {
		mustExec(ctx, t, db, fmt.Sprintf(`INSERT INTO %s ("key", "lock_id", "place", %s)
			SELECT 'k%d', 'w%d-' || g, g, %s FROM generate_series(1, 300) AS g`, waiters, cols, i, i, values))
	}
	mustExec(ctx, t, db, `ANALYZE `+waiters)
}

// checkPlans reads pg_prepared_statements on db (one connection) and
// fails for every statement naming table, run planRounds times or more,
// that was planned more than five times with its values. It returns how
// many such statements it saw.
func checkPlans(ctx context.Context, t *testing.T, db *sql.DB, table string) int {
	t.Helper()
	rows, err := db.QueryContext(ctx, `SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	seen := 0
	for rows.Next() {
		var stmt string
		var generic, custom int
		if err := rows.Scan(&stmt, &generic, &custom); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(stmt, table) || generic+custom < planRounds {
			continue
		}
		seen++
		t.Logf("generic %d, custom %d: %.100s", generic, custom, strings.Join(strings.Fields(stmt), " "))
		if custom > 5 {
			t.Errorf("a statement run %d times was planned %d times with its values (at most 5, then its generic plan): %.120s",
				generic+custom, custom, strings.Join(strings.Fields(stmt), " "))
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return seen
}

// queuedBehind runs a queued Lock of key, which another pool holds, on
// l: its attempts, then the waiter's withdrawal when its 20 ms are up.
// An attempt that the end of the wait cut short (a loaded machine) is
// not an error here: the plans are what the test checks.
func queuedBehind(ctx context.Context, t *testing.T, l syncguard.Locker, key string) {
	t.Helper()
	_, err := syncguard.Lock(ctx, l, key, &syncguard.LockOptions{TTL: time.Minute,
		Acquisition: syncguard.AcquisitionOptions{Timeout: 20 * time.Millisecond}})
	var e *syncguard.Error
	if !errors.Is(err, syncguard.ErrAcquisitionTimeout) && !(errors.As(err, &e) && e.Code == syncguard.CodeNetworkTimeout) {
		t.Fatalf("queued Lock behind the holder: %v, want an acquisition timeout", err)
	}
}

// TestSemaphoreStatementsKeepTheirGenericPlans: a Semaphore's acquire
// (plain and queued), extend, release (and a waiter's withdrawal) and
// lookup, 12 of each on one connection.
func TestSemaphoreStatementsKeepTheirGenericPlans(t *testing.T) {
	srv := pgtest.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin := open(t, srv.DSN)
	cfg := semTables(t, admin)
	_, _, waiters := semaphore.Tables(cfg.TableName)
	planStats(ctx, t, admin, rules.QuoteIdent(waiters), `"deadline_ms", "ttl_ms"`, `0, 1000`)
	holder, err := semaphore.New(open(t, srv.DSN), &cfg, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	held, err := holder.Acquire(ctx, "plans:held", time.Minute)
	if err != nil || !held.OK {
		t.Fatalf("holder: %+v, %v", held, err)
	}
	defer holder.Release(ctx, held.LockID)

	db := open(t, srv.DSN)
	db.SetMaxOpenConns(1)
	s, err := semaphore.New(db, &cfg, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := range planRounds {
		key := fmt.Sprintf("plans:%d", i)
		res, err := s.Acquire(ctx, key, time.Minute)
		if err != nil || !res.OK {
			t.Fatalf("acquire %s: %+v, %v", key, res, err)
		}
		if r, err := s.Extend(ctx, res.LockID, time.Minute); err != nil || !r.OK {
			t.Fatalf("extend: %+v, %v", r, err)
		}
		if _, err := s.Holders(ctx, key); err != nil {
			t.Fatal(err)
		}
		if r, err := s.Release(ctx, res.LockID); err != nil || !r.OK {
			t.Fatalf("release: %+v, %v", r, err)
		}
		queuedBehind(ctx, t, s, "plans:held")
	}
	keys, _, _ := semaphore.Tables(cfg.TableName)
	if seen := checkPlans(ctx, t, db, keys); seen < 4 {
		t.Fatalf("%d of the Semaphore's statements ran %d times or more on its connection; want acquire, release, extend and holders", seen, planRounds)
	}
}
