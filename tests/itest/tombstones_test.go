package itest_test

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/syncguard/syncguard-go/syncguard"
	"github.com/syncguard/syncguard-go/tests/pgtest"
)

// TestTombstonesAreNotRead: a waiter that gives up leaves a tombstone
// for a minute (release.sql's me), and a key whose waiters give up every
// few milliseconds carries a thousand of them. A queued attempt, its
// withdrawal and a hand-off must not read them: their place sorts them
// before every live waiter, so the scans of the queue skip them in the
// index and the clean-up finds the old ones by a range. auto_explain's
// analyzed plans of the statements (nested in their functions) show
// every node's rows and the rows its filter removed; a scan that passed
// over the tombstones shows hundreds.
func TestTombstonesAreNotRead(t *testing.T) {
	const tombs = 400
	e := newWaitEnv(t, "tombs")
	key := "tombs:key"
	holder := e.backend()
	held, err := syncguard.Lock(e.ctx, holder, key, &syncguard.LockOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	gaveUp := e.backend()
	for range tombs {
		queuedBehind(e.ctx, t, gaveUp, key)
	}
	var n int
	if err := e.admin.QueryRowContext(e.ctx, `SELECT count(*) FROM tombs_locks_waiters WHERE "ttl_ms" = 0`).Scan(&n); err != nil || n != tombs {
		t.Fatalf("tombstones: %d, %v; want %d", n, err, tombs)
	}

	db, notices := autoExplained(e.ctx, t, pgtest.Require(t))
	mustExec(e.ctx, t, db, "SET auto_explain.log_analyze = on")
	b, err := syncguard.New(db, e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	queuedBehind(e.ctx, t, b, key) // a first attempt (with the clean-up) and a withdrawal
	w := b.Queue(key, "", false)   // a waiter that stays, to be handed the key
	if res, err := w.Attempt(e.ctx, time.Minute); err != nil || res.OK {
		t.Fatalf("queued attempt: %+v, %v", res, err)
	}
	if r, err := held.Release(e.ctx); err != nil {
		t.Fatalf("release with a hand-off: %v, %v", r, err)
	}
	if res, err := w.Attempt(e.ctx, time.Minute); err != nil || !res.OK {
		t.Fatalf("the waiter's attempt after the release: %+v, %v; want the key", res, err)
	}

	rowsRE := regexp.MustCompile(`actual time=[0-9.]+\.\.[0-9.]+ rows=(\d+)`)
	removedRE := regexp.MustCompile(`Rows Removed by (?:Filter|Index Recheck): (\d+)`)
	read := 0
	for _, msg := range notices() {
		if !strings.Contains(msg, "tombs_locks_waiters") {
			continue
		}
		read++
		for _, line := range strings.Split(msg, "\n") {
			for _, re := range []*regexp.Regexp{rowsRE, removedRE} {
				if m := re.FindStringSubmatch(line); m != nil {
					if v, _ := strconv.Atoi(m[1]); v >= tombs/4 {
						t.Errorf("rule: the queue's scans skip tombstones: a plan node read %d rows of a key with %d tombstones:\n%s\nin\n%s", v, tombs, strings.TrimSpace(line), msg)
					}
				}
			}
		}
	}
	if read < 3 {
		t.Fatalf("%d analyzed plans read the waiters table; want the attempts' and the releases'", read)
	}
}
