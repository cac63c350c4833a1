package itest_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/syncguard/syncguard-go/syncguard"
	"github.com/syncguard/syncguard-go/tests/pgtest"
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
		opRound(e.ctx, t, b, key, "plans:held")
		if _, err := b.LookupKey(e.ctx, key); err != nil {
			t.Fatal(err)
		}
	}
	seen := checkPlans(e.ctx, t, db, "plans_locks")
	// the queued acquire, itself or its function's call
	queued := slices.ContainsFunc(seen, func(stmt string) bool {
		return strings.Contains(stmt, "ahead_n") || strings.Contains(stmt, "$7::boolean")
	})
	if len(seen) < 5 || !queued {
		t.Fatalf("%d of the Backend's statements ran %d times or more on its connection (the queued acquire among them: %v); want acquire, queued acquire, release, extend and lookup", len(seen), planRounds, queued)
	}
}

// TestStatementFunctionsPlanGenericallyFromTheFirstCall: a Backend's
// acquire, queued acquire, extend and release run through their statement
// functions, which plan each statement once per session without values
// (plan_cache_mode = force_generic_plan for the function's run): a
// prepared statement is planned with its values at each of its first five
// executions, each plan dearer than the execution, which a session that
// runs a statement a few times a minute (a waiter far back, a cron job's
// connection) paid at every run. auto_explain's plans of the nested
// statements, sent to the client as notices, show the arguments' row
// (acquire.sql's "a") as $1 in a generic plan and as the key's literal in
// a custom one.
func TestStatementFunctionsPlanGenericallyFromTheFirstCall(t *testing.T) {
	e := newWaitEnv(t, "genplan")
	holder := e.backend()
	held, err := syncguard.Lock(e.ctx, holder, "genplan:held", &syncguard.LockOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(e.ctx)

	db, notices := autoExplained(e.ctx, t, pgtest.Require(t))
	b, err := syncguard.New(db, e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	values := []string{"'genplan:"} // the keys, as literals; and the lockIds
	for i := range 2 {
		values = append(values, opRound(e.ctx, t, b, fmt.Sprintf("genplan:%d", i), "genplan:held"))
	}
	plans := notices()
	nested, generic := 0, 0
	for _, p := range plans {
		if !strings.Contains(p, "Query Text: WITH") || !strings.Contains(p, "genplan_locks") {
			continue // the calls, and the test's own statements
		}
		nested++
		if slices.ContainsFunc(values, func(v string) bool { return strings.Contains(p, v) }) {
			t.Errorf("rule: a statement function's statement is planned without values from its first call; a plan with the key's literal:\n%s", p)
			continue
		}
		generic++
	}
	// per round: acquire, extend, release, queued acquire, withdrawal
	if nested != 10 || generic != 10 {
		t.Fatalf("want the 10 statements of two rounds run through their functions, each planned generically; got %d nested plans, %d generic (of %d notices)", nested, generic, len(plans))
	}
}
