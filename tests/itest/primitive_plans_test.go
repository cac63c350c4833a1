package itest_test

import (
	"context"
	"database/sql"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/syncguard/syncguard-go/internal/kit"
	"github.com/syncguard/syncguard-go/internal/rules"
	"github.com/syncguard/syncguard-go/multilock"
	"github.com/syncguard/syncguard-go/rwlock"
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
// that was planned more than five times with its values. It returns the
// texts of the statements it saw.
func checkPlans(ctx context.Context, t *testing.T, db *sql.DB, table string) []string {
	t.Helper()
	rows, err := db.QueryContext(ctx, `SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var seen []string
	for rows.Next() {
		var stmt string
		var generic, custom int
		if err := rows.Scan(&stmt, &generic, &custom); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(stmt, table) || generic+custom < planRounds {
			continue
		}
		seen = append(seen, stmt)
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

// queuedBehind runs, on q, a queued attempt for key, which another pool
// holds, then the waiter's withdrawal: the statements of a Lock call that
// waits and gives up, without its wall-clock bound (an attempt that the
// end of a short wait cut off would cost the connection, and the counts).
func queuedBehind(ctx context.Context, t *testing.T, q kit.Queuer, key string) {
	t.Helper()
	w := q.Queue(key, "", false)
	if res, err := w.Attempt(ctx, time.Minute); err != nil || res.OK {
		t.Fatalf("queued attempt behind the holder: %+v, %v; want locked", res, err)
	}
	if err := w.Leave(ctx); err != nil {
		t.Fatalf("leave: %v", err)
	}
}

// TestSemaphoreStatementsKeepTheirGenericPlans: a Semaphore's acquire
// (plain and queued), extend, release (and a waiter's withdrawal) and
// lookup, 12 of each on one connection (acquire and release as calls of
// their statement functions), over the statistics of a few keys
// with long queues and a few keys of many permits.
func TestSemaphoreStatementsKeepTheirGenericPlans(t *testing.T) {
	srv := pgtest.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin := open(t, srv.DSN)
	cfg := semTables(t, admin)
	keys, slots, waiters := semaphore.Tables(cfg.TableName)
	planStats(ctx, t, admin, rules.QuoteIdent(waiters), `"deadline_ms", "ttl_ms"`, `0, 1000`)
	// And a few keys of 300 permits, all held: the lookup by key planned
	// every execution with these.
	for i := range 30 {
		mustExec(ctx, t, admin, fmt.Sprintf(`INSERT INTO %s ("key", "permits", "version", "user_key") VALUES ('k%d', 300, 1, 'k')`,
			rules.QuoteIdent(keys), i))
		mustExec(ctx, t, admin, fmt.Sprintf(`INSERT INTO %s ("key", "slot", "lock_id", "expires_at_ms", "acquired_at_ms", "fence")
			SELECT 'k%d', g, 's%d-' || g, 99999999999999, 0, 1 FROM generate_series(1, 300) AS g`, rules.QuoteIdent(slots), i, i))
	}
	mustExec(ctx, t, admin, `ANALYZE `+rules.QuoteIdent(slots))
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
	// acquire and release run through their statement functions (planned
	// generically by the function's own setting): the calls are prepared
	if seen := len(checkPlans(ctx, t, db, keys)); seen < 2 {
		t.Fatalf("%d of the Semaphore's statements ran %d times or more on its connection; want extend and holders", seen, planRounds)
	}
	if seen := len(checkPlans(ctx, t, db, `_op_`)); seen < 2 {
		t.Fatalf("%d of the Semaphore's function calls ran %d times or more on its connection; want acquire and release", seen, planRounds)
	}
}

// TestRWLockFunctionPlansKeepTheirGenericPlans: the read-write lock's
// statements go out one-shot (planned at each execution by design), but
// the statements of its SQL functions are cached plans of the session,
// chosen as a prepared statement's are. No view counts their plans:
// auto_explain (LOAD, superuser) sends each one's plan to the client as a
// NOTICE, verbose, and a plan showing a value that the statement's text
// does not hold (a key, a lockId, a clock reading) was planned with its
// values. Shared and exclusive acquires, extends, releases, and queued
// attempts with their withdrawals, 12 of each on one connection, over
// the statistics of a few keys with long queues and many readers.
func TestRWLockFunctionPlansKeepTheirGenericPlans(t *testing.T) {
	srv := pgtest.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	holder, admin, cfg := rwTarget(t, pgxDriver, srv.DSN)
	holders := rules.QuoteIdent(cfg.TableName + "_rw")
	planStats(ctx, t, admin, rules.QuoteIdent(cfg.TableName+"_rw_waiters"), `"deadline_ms", "ttl_ms", "exclusive", "user_key"`, `0, 1000, g % 2 = 0, 'k'`)
	for i := range 30 {
		mustExec(ctx, t, admin, fmt.Sprintf(`INSERT INTO %s ("key", "lock_id", "exclusive", "expires_at_ms", "acquired_at_ms", "fence", "user_key")
			SELECT 'k%d', 'h%d-' || g, false, 99999999999999, 0, 0, 'k' FROM generate_series(1, 300) AS g`, holders, i, i))
	}
	mustExec(ctx, t, admin, `ANALYZE `+holders)
	held, err := holder.Exclusive().Acquire(ctx, "plans:held", time.Minute)
	if err != nil || !held.OK {
		t.Fatalf("holder: %+v, %v", held, err)
	}
	defer holder.Exclusive().Release(ctx, held.LockID)

	db, notices := autoExplained(ctx, t, srv)
	rw, err := rwlock.New(db, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rw.Close() })
	for i := range planRounds {
		for _, l := range []*rwlock.Locker{rw.Exclusive(), rw.Shared()} {
			opRound(ctx, t, l, fmt.Sprintf("plans:%d", i), "plans:held")
		}
	}

	type count struct{ runs, custom int }
	counts := map[string]*count{}
	planRE := regexp.MustCompile(`(?s)Query Text: (.*?)\n([A-Z].*)`)
	literalRE := regexp.MustCompile(`'((?:[^']|'')*)'`)
	outer := regexp.MustCompile(`\$[0-9]`) // the one-shot statements' parameters
	explained := notices()
	for _, n := range explained {
		m := planRE.FindStringSubmatch(n)
		if m == nil || outer.MatchString(m[1]) {
			continue
		}
		text := strings.Join(strings.Fields(m[1]), " ")
		c := counts[text]
		if c == nil {
			c = &count{}
			counts[text] = c
		}
		c.runs++
		for _, lit := range literalRE.FindAllStringSubmatch(m[2], -1) {
			if !strings.Contains(m[1], "'"+lit[1]+"'") && (lit[1] == "" || !strings.Contains(m[1], lit[1])) {
				c.custom++
				break
			}
		}
	}
	seen := 0
	for text, c := range counts {
		if c.runs < planRounds {
			continue
		}
		seen++
		t.Logf("%3d runs, %3d with values: %.100s", c.runs, c.custom, text)
		if c.custom > 5 {
			t.Errorf("a statement of the functions run %d times was planned %d times with its values (at most 5, then its generic plan): %.120s",
				c.runs, c.custom, text)
		}
	}
	if seen < 10 {
		t.Fatalf("auto_explain showed %d statements of the functions run %d times or more (of %d notices); want the functions' lookups", seen, planRounds, len(explained))
	}
}

// TestMultiLockStatementsKeepTheirGenericPlans: a Locker's statements
// go out one-shot (unprepared, so that a pooler cannot lose them): the
// acquire, release and extend as calls of their statement functions
// (whose statements are planned generically, once per session), the
// others planned with their values by design; none shows in
// pg_prepared_statements today; a guard: should any be prepared, it must
// keep its generic plan over the statistics of a few keys with long
// queues. Acquires of free sets (plain and queued), extends, releases,
// lookups and withdrawals, 12 of each on one connection.
func TestMultiLockStatementsKeepTheirGenericPlans(t *testing.T) {
	srv := pgtest.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin := open(t, srv.DSN)
	cfg := mlTables(t, ctx, admin, pgxDriver.Dialect)
	tb, err := multilock.TablesOf(&cfg)
	if err != nil {
		t.Fatal(err)
	}
	planStats(ctx, t, admin, rules.QuoteIdent(tb.Waiters), `"deadline_ms", "ttl_ms", "user_key", "fence_key", "n", "channel_key"`,
		`0, 1000, 'k', 'f', 1, 'k'`)
	holder, err := multilock.New(open(t, srv.DSN), &cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	held, err := holder.Acquire(ctx, multilock.Keys("plans:held"), time.Minute)
	if err != nil || !held.OK {
		t.Fatalf("holder: %+v, %v", held, err)
	}
	defer holder.Release(ctx, held.LockID)

	db := open(t, srv.DSN)
	db.SetMaxOpenConns(1)
	l, err := multilock.New(db, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for i := range planRounds {
		set := multilock.Keys(fmt.Sprintf("plans:%d", i), fmt.Sprintf("plans:%d:b", i))
		res, err := l.Acquire(ctx, set, time.Minute)
		if err != nil || !res.OK {
			t.Fatalf("acquire %s: %+v, %v", set, res, err)
		}
		if r, err := l.Extend(ctx, res.LockID, time.Minute); err != nil || !r.OK {
			t.Fatalf("extend: %+v, %v", r, err)
		}
		if _, err := l.LookupKey(ctx, set); err != nil {
			t.Fatal(err)
		}
		if r, err := l.Release(ctx, res.LockID); err != nil || !r.OK {
			t.Fatalf("release: %+v, %v", r, err)
		}
		queuedBehind(ctx, t, l, multilock.Keys("plans:held", fmt.Sprintf("plans:%d", i)))
	}
	seen := len(checkPlans(ctx, t, db, tb.Locks))
	t.Logf("%d of the Locker's statements were prepared", seen)
}

// autoExplained is a connection to srv whose every statement's plan,
// nested ones included (a SQL or PL/pgSQL function's), verbose, comes back
// as a notice (auto_explain: LOAD needs a superuser); notices returns
// those so far.
func autoExplained(ctx context.Context, t *testing.T, srv *pgtest.Server) (db *sql.DB, notices func() []string) {
	t.Helper()
	cc, err := pgx.ParseConfig(srv.DSN)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var got []string
	cc.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, n.Message)
	}
	db = stdlib.OpenDB(*cc)
	t.Cleanup(func() { db.Close() })
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	if _, err := db.ExecContext(ctx, `LOAD 'auto_explain'`); err != nil {
		if srv.Kind == pgtest.KindEnv {
			t.Skipf("auto_explain on SYNCGUARD_TEST_DSN's server: %v", err)
		}
		t.Fatalf("auto_explain (a superuser loads it): %v", err)
	}
	for _, s := range []string{"log_min_duration = 0", "log_nested_statements = on", "log_level = notice", "log_verbose = on", "log_format = text"} {
		mustExec(ctx, t, db, "SET auto_explain."+s)
	}
	return db, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(got)
	}
}

// opRound runs on l an acquire of key, its extend and release, and a
// queued attempt behind held (another pool's) with its withdrawal: the
// statements of a Lock call that gets a free key and of one that waits
// and gives up. It returns the acquired lockId.
func opRound(ctx context.Context, t *testing.T, l interface {
	syncguard.Locker
	kit.Queuer
}, key, held string) string {
	t.Helper()
	res, err := l.Acquire(ctx, key, time.Minute)
	if err != nil || !res.OK {
		t.Fatalf("acquire %s: %+v, %v", key, res, err)
	}
	if r, err := l.Extend(ctx, res.LockID, time.Minute); err != nil || !r.OK {
		t.Fatalf("extend: %+v, %v", r, err)
	}
	if r, err := l.Release(ctx, res.LockID); err != nil || !r.OK {
		t.Fatalf("release: %+v, %v", r, err)
	}
	queuedBehind(ctx, t, l, held)
	return res.LockID
}
