package itest_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/syncguard/syncguard-go/syncguard"
)

// TestStatementsKeepTheirGenericPlans: every statement a Backend prepares
// is planned at most the five times PostgreSQL plans a prepared statement
// with its values before it compares that with the generic plan; from
// then on the generic plan serves (planning the queued acquire cost five
// times its execution: "Planning" in docs/design.md). All the Backend's
// statements run on one connection, which pg_prepared_statements then
// shows: plain and queued acquires, releases, withdrawals, extends and
// lookups, 12 of each.
func TestStatementsKeepTheirGenericPlans(t *testing.T) {
	e := newWaitEnv(t, "plans")
	// The statistics of a few keys with long queues: estimated with the
	// values of a key that is not among them, the queued acquire's lookups
	// look far cheaper than its generic plan (which failed this test).
	for i := range 30 {
		mustExec(e.ctx, t, e.admin, fmt.Sprintf(`INSERT INTO plans_locks_waiters ("key", "lock_id", "place", "deadline_ms", "ttl_ms", "user_key", "fence_key")
			SELECT 'k%d', 'w%d-' || g, g, 0, 1000, 'k', 'f' FROM generate_series(1, 300) AS g`, i, i))
	}
	mustExec(e.ctx, t, e.admin, `ANALYZE plans_locks_waiters`)
	holder := e.backend()
	held, err := syncguard.Lock(e.ctx, holder, "plans:held", &syncguard.LockOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(e.ctx)

	db := open(t, e.dsn)
	db.SetMaxOpenConns(1)
	b, err := syncguard.New(db, e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for i := range planRounds {
		key := fmt.Sprintf("plans:%d", i)
		res, err := b.Acquire(e.ctx, key, time.Minute)
		if err != nil || !res.OK {
			t.Fatalf("acquire %s: %+v, %v", key, res, err)
		}
		if _, err := b.Extend(e.ctx, res.LockID, time.Minute); err != nil {
			t.Fatal(err)
		}
		if _, err := b.LookupKey(e.ctx, key); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Release(e.ctx, res.LockID); err != nil {
			t.Fatal(err)
		}
		queuedBehind(e.ctx, t, b, "plans:held")
	}
	seen := checkPlans(e.ctx, t, db, "plans_locks")
	queued := slices.ContainsFunc(seen, func(stmt string) bool { return strings.Contains(stmt, "ahead_n") })
	if len(seen) < 5 || !queued {
		t.Fatalf("%d of the Backend's statements ran %d times or more on its connection (the queued acquire among them: %v); want acquire, queued acquire, release, extend and lookup", len(seen), planRounds, queued)
	}
}
