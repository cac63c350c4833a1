// Package conformance is the executable form of the SyncGuard PostgreSQL
// contract: every behaviour a user relies on, checked against a real
// PostgreSQL through any database/sql driver, pooler or wrapper.
//
// Run it from a test, in the manner of golang.org/x/net/nettest.TestConn and
// testing/slogtest.Run:
//
//	func TestConformance(t *testing.T) {
//		conformance.Run(t, conformance.Harness{
//			Open: func(t testing.TB) *sql.DB {
//				db, err := sql.Open("pgx", os.Getenv("DATABASE_URL"))
//				if err != nil {
//					t.Fatal(err)
//				}
//				t.Cleanup(func() { db.Close() })
//				return db
//			},
//		})
//	}
//
// Each property is one subtest, named after the rule it checks, with its own
// timeout. Cases create their own uniquely named tables and drop them at the
// end, so the suite runs in parallel and leaves nothing behind. A failure
// message states the broken rule in one line, then the evidence.
//
// Cases that need more than a database (a server restart, a refused
// connection, a second driver) use optional Harness hooks and are skipped,
// with a message naming the hook, when it is missing.
package conformance

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/syncguard/syncguard-go/driver"
	"github.com/syncguard/syncguard-go/internal/rules"
	"github.com/syncguard/syncguard-go/syncguard"
)

// Harness describes the database under test.
type Harness struct {
	// Open returns a new, independent *sql.DB (its own pool) for the database
	// under test, and arranges for it to be closed (t.Cleanup). Required.
	// The suite calls it more than once to get several pools.
	Open func(t testing.TB) *sql.DB

	// Dialect is passed to syncguard.Config. Nil: found from the driver
	// registration (import the adapter package in the test).
	Dialect driver.Dialect

	// OpenOther opens a pool on the same database through a different
	// driver (for example pgx when Open uses lib/pq). Enables the
	// cross-driver cases. OtherDialect goes with it (nil: registered).
	OpenOther    func(t testing.TB) *sql.DB
	OtherDialect driver.Dialect

	// OpenRefused opens a pool whose connections are refused (nothing
	// listens at its address). Enables the refused-connection case.
	OpenRefused func(t testing.TB) *sql.DB

	// OpenWrongPassword opens a pool to the server with a role whose
	// password is wrong. Enables the authentication case.
	OpenWrongPassword func(t testing.TB) *sql.DB

	// Restart restarts the server (immediate mode is best: a crash) and
	// returns once it accepts connections again. Enables the restart cases.
	Restart func(ctx context.Context) error

	// Config, when set, adjusts the syncguard.Config of every Backend the
	// suite creates, after the case's table names and Dialect are filled
	// in: for example DisablePrepare behind a pooler in transaction mode.
	Config func(*syncguard.Config)

	// NoSessionState says that a connection keeps no session state from
	// one transaction to the next (a pooler in transaction mode, such as
	// PgBouncer with pool_mode=transaction). Cases that need session state
	// (session-level advisory locks, SET, named prepared statements) are
	// then skipped with a message.
	NoSessionState bool

	// CaseTimeout bounds every case. Default 30 s.
	CaseTimeout time.Duration

	// Serial disables t.Parallel between cases (for a server with few
	// connections). Default false.
	Serial bool

	// Groups limits the run to these case groups (the first element of the
	// subtest name, such as "Fences" or "CrossDriver"). Default: all.
	Groups []string
}

// Run runs every case against h. Call it from a Test function.
func Run(t *testing.T, h Harness) {
	t.Helper()
	if h.Open == nil {
		t.Fatal("conformance: Harness.Open is required")
	}
	if h.CaseTimeout <= 0 {
		h.CaseTimeout = 30 * time.Second
	}
	groups := map[string][]kase{}
	var order []string
	for _, c := range cases {
		g, _, _ := strings.Cut(c.name, "/")
		if _, ok := groups[g]; !ok {
			order = append(order, g)
		}
		groups[g] = append(groups[g], c)
	}
	for _, g := range h.Groups {
		if _, ok := groups[g]; !ok {
			t.Errorf("conformance: Harness.Groups names %q, which is no case group (groups: %s)", g, strings.Join(order, ", "))
		}
	}
	for _, g := range order {
		if len(h.Groups) > 0 && !slices.Contains(h.Groups, g) {
			continue
		}
		t.Run(g, func(t *testing.T) {
			for _, c := range groups[g] {
				_, name, _ := strings.Cut(c.name, "/")
				t.Run(name, func(t *testing.T) {
					if !h.Serial && !c.serial {
						t.Parallel()
					}
					runCase(t, h, c)
				})
			}
		})
	}
}

// kase is one property. serial cases (restart, terminate) do not run in
// parallel with their group.
type kase struct {
	name   string
	serial bool
	fn     func(e *env)
}

// cases is filled by the init functions of the case files.
var cases []kase

func register(name string, fn func(e *env)) { cases = append(cases, kase{name: name, fn: fn}) }
func registerSerial(name string, fn func(e *env)) {
	cases = append(cases, kase{name: name, fn: fn, serial: true})
}

func runCase(t *testing.T, h Harness, c kase) {
	ctx, cancel := context.WithTimeout(context.Background(), h.CaseTimeout)
	defer cancel()
	e := newEnv(t, ctx, h)
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.fn(e)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		// Give the case a moment to notice the cancelled context.
		select {
		case <-done:
		case <-time.After(5 * time.Second):
		}
		t.Fatalf("rule: every case finishes within %v; %s did not (a hang in a lock operation?)", h.CaseTimeout, c.name)
	}
}

// env is what a case works with: its own tables, two independent pools and
// a backend on each, and a context bounded by the case timeout.
type env struct {
	t       *testing.T
	h       Harness
	ctx     context.Context
	cfg     *syncguard.Config
	db, db2 *sql.DB
	b, b2   *syncguard.Backend
}

func newEnv(t *testing.T, ctx context.Context, h Harness) *env {
	suffix := randHex(5)
	cfg := &syncguard.Config{
		TableName:      "sgc_" + suffix + "_locks",
		FenceTableName: "sgc_" + suffix + "_fences",
		Dialect:        h.Dialect,
	}
	if h.Config != nil {
		h.Config(cfg)
	}
	e := &env{t: t, h: h, ctx: ctx, cfg: cfg}
	e.db = h.Open(t)
	e.db2 = h.Open(t)
	if err := syncguard.SetupSchema(ctx, e.db, cfg); err != nil {
		t.Fatalf("setup: SetupSchema failed: %v", err)
	}
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, tbl := range []string{cfg.TableName, cfg.FenceTableName} {
			if _, err := e.db.ExecContext(cctx, `DROP TABLE IF EXISTS "`+tbl+`"`); err != nil {
				t.Logf("cleanup: drop %s: %v", tbl, err)
			}
		}
	})
	e.b = e.newBackend(e.db, nil)
	e.b2 = e.newBackend(e.db2, nil)
	return e
}

// config returns a Config for other tables than the case's, built as the
// case's own: Harness.Dialect, then Harness.Config applied.
func (e *env) config(table, fences string) *syncguard.Config {
	cfg := &syncguard.Config{TableName: table, FenceTableName: fences, Dialect: e.h.Dialect}
	if e.h.Config != nil {
		e.h.Config(cfg)
	}
	return cfg
}

// newBackend makes a Backend on db with the case's tables; mod may adjust
// the config.
func (e *env) newBackend(db *sql.DB, mod func(*syncguard.Config)) *syncguard.Backend {
	e.t.Helper()
	c := *e.cfg
	if mod != nil {
		mod(&c)
	}
	b, err := syncguard.New(db, &c)
	if err != nil {
		e.t.Fatalf("setup: syncguard.New: %v", err)
	}
	return b
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// key returns a fresh key unique to this case.
func (e *env) key(name string) string { return "conformance:" + name + ":" + randHex(6) }

// --- assertion helpers: each failure names the rule first, then evidence.

func (e *env) must(err error, what string) {
	e.t.Helper()
	if err != nil {
		e.t.Fatalf("rule: %s must not fail; got %v", what, err)
	}
}

func (e *env) acquire(b *syncguard.Backend, key string, ttl time.Duration) syncguard.AcquireResult {
	e.t.Helper()
	r, err := b.Acquire(e.ctx, key, ttl)
	if err != nil {
		e.t.Fatalf("rule: acquire of a valid key must not fail; key %q: %v", key, err)
	}
	return r
}

func (e *env) mustAcquire(b *syncguard.Backend, key string, ttl time.Duration) syncguard.AcquireResult {
	e.t.Helper()
	r := e.acquire(b, key, ttl)
	if !r.OK {
		e.t.Fatalf("rule: acquire of a free key succeeds; key %q got OK=false reason %q", key, r.Reason)
	}
	return r
}

func (e *env) isLocked(b *syncguard.Backend, key string) bool {
	e.t.Helper()
	v, err := b.IsLocked(e.ctx, key)
	if err != nil {
		e.t.Fatalf("rule: IsLocked of a valid key must not fail; key %q: %v", key, err)
	}
	return v
}

func (e *env) release(b *syncguard.Backend, id string) syncguard.ReleaseResult {
	e.t.Helper()
	r, err := b.Release(e.ctx, id)
	if err != nil {
		e.t.Fatalf("rule: release of a well-formed lockId must not fail: %v", err)
	}
	return r
}

func (e *env) extend(b *syncguard.Backend, id string, ttl time.Duration) syncguard.ExtendResult {
	e.t.Helper()
	r, err := b.Extend(e.ctx, id, ttl)
	if err != nil {
		e.t.Fatalf("rule: extend of a well-formed lockId must not fail: %v", err)
	}
	return r
}

// serverNowMs reads the server clock, the only clock that decides expiry.
func (e *env) serverNowMs() int64 {
	e.t.Helper()
	var ms int64
	err := e.db.QueryRowContext(e.ctx, `SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint`).Scan(&ms)
	if err != nil {
		e.t.Fatalf("setup: reading the server clock: %v", err)
	}
	return ms
}

// waitServerPast sleeps until the server clock passes ms.
func (e *env) waitServerPast(ms int64) {
	e.t.Helper()
	for {
		now := e.serverNowMs()
		if now > ms {
			return
		}
		d := time.Duration(ms-now+5) * time.Millisecond
		select {
		case <-time.After(d):
		case <-e.ctx.Done():
			e.t.Fatalf("setup: case timed out waiting for server time %d", ms)
		}
	}
}

// fenceRows counts rows in the case's fence table.
func (e *env) fenceRows() int {
	e.t.Helper()
	var n int
	if err := e.db.QueryRowContext(e.ctx, `SELECT count(*) FROM "`+e.cfg.FenceTableName+`"`).Scan(&n); err != nil {
		e.t.Fatalf("setup: counting fence rows: %v", err)
	}
	return n
}

// needSessionState skips the case when Harness.NoSessionState is set.
func (e *env) needSessionState(what string) {
	e.t.Helper()
	if e.h.NoSessionState {
		e.t.Skipf("needs session state (%s), which a pooler in transaction mode does not keep (Harness.NoSessionState); use transaction-scoped locks there", what)
	}
}

func (e *env) skipUnless(ok bool, hook string) {
	e.t.Helper()
	if !ok {
		e.t.Skipf("needs Harness.%s", hook)
	}
}

func fenceNum(t testing.TB, f syncguard.Fence) int64 {
	t.Helper()
	n, err := f.Int64()
	if err != nil {
		t.Fatalf("rule: fences are 15 decimal digits; got %q", f)
	}
	return n
}

// --- helpers for server time, raw rows and blocking.

// ms is t in Unix milliseconds, the unit of every stored time.
func ms(t time.Time) int64 { return t.UnixMilli() }

// tolMs is the spec's liveness tolerance: a lock is live while
// expires_at_ms > now_ms - tolMs.
const tolMs = rules.ToleranceMs

// ttlMs is d in whole milliseconds.
func ttlMs(d time.Duration) int64 { return d.Milliseconds() }

// derive returns the normalized key and its storage and fence keys, as the
// spec's two-step derivation computes them.
func (e *env) derive(key string) (norm, storage, fence string) {
	e.t.Helper()
	norm, err := rules.NormalizeKey(key)
	if err != nil {
		e.t.Fatalf("setup: NormalizeKey(%q): %v", key, err)
	}
	storage, fence, err = rules.StorageKeys(norm)
	if err != nil {
		e.t.Fatalf("setup: StorageKeys(%q): %v", norm, err)
	}
	return norm, storage, fence
}

func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

// locksTable and fencesTable are the case's quoted table names.
func (e *env) locksTable() string  { return quoteIdent(e.cfg.TableName) }
func (e *env) fencesTable() string { return quoteIdent(e.cfg.FenceTableName) }

// exec runs raw SQL on the case's first pool.
func (e *env) exec(query string, args ...any) {
	e.t.Helper()
	if _, err := e.db.ExecContext(e.ctx, query, args...); err != nil {
		e.t.Fatalf("setup: %s: %v", strings.Join(strings.Fields(query), " "), err)
	}
}

// rawLock is one lock table row as stored.
type rawLock struct {
	Key, LockID, Fence, UserKey string
	ExpiresAt, AcquiredAt       int64
}

// rawLockRow reads the lock row of key (by its storage key) with raw SQL.
func (e *env) rawLockRow(key string) (rawLock, bool) {
	e.t.Helper()
	_, storage, _ := e.derive(key)
	var r rawLock
	err := e.db.QueryRowContext(e.ctx, `SELECT "key", "lock_id", "expires_at_ms", "acquired_at_ms", "fence", "user_key" FROM `+
		e.locksTable()+` WHERE "key" = $1`, storage).Scan(&r.Key, &r.LockID, &r.ExpiresAt, &r.AcquiredAt, &r.Fence, &r.UserKey)
	if errors.Is(err, sql.ErrNoRows) {
		return rawLock{}, false
	}
	if err != nil {
		e.t.Fatalf("setup: reading the lock row: %v", err)
	}
	return r, true
}

// lockRows counts rows in the case's lock table.
func (e *env) lockRows() int {
	e.t.Helper()
	var n int
	if err := e.db.QueryRowContext(e.ctx, `SELECT count(*) FROM `+e.locksTable()).Scan(&n); err != nil {
		e.t.Fatalf("setup: counting lock rows: %v", err)
	}
	return n
}

// fenceCounter reads the fence counter of key with raw SQL.
func (e *env) fenceCounter(key string) (int64, bool) {
	e.t.Helper()
	_, _, fk := e.derive(key)
	var n int64
	err := e.db.QueryRowContext(e.ctx, `SELECT "fence" FROM `+e.fencesTable()+` WHERE "fence_key" = $1`, fk).Scan(&n)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, false
	}
	if err != nil {
		e.t.Fatalf("setup: reading the fence counter: %v", err)
	}
	return n, true
}

// fenceTable returns every fence counter of the case, by fence_key.
func (e *env) fenceTable() map[string]int64 {
	e.t.Helper()
	rows, err := e.db.QueryContext(e.ctx, `SELECT "fence_key", "fence" FROM `+e.fencesTable())
	if err != nil {
		e.t.Fatalf("setup: reading the fence table: %v", err)
	}
	defer rows.Close()
	m := map[string]int64{}
	for rows.Next() {
		var k string
		var n int64
		if err := rows.Scan(&k, &n); err != nil {
			e.t.Fatalf("setup: reading the fence table: %v", err)
		}
		m[k] = n
	}
	if err := rows.Err(); err != nil {
		e.t.Fatalf("setup: reading the fence table: %v", err)
	}
	return m
}

// otherBackend returns a Backend on the case's tables through
// Harness.OpenOther (the second driver), skipping the case without it.
func (e *env) otherBackend() *syncguard.Backend {
	e.t.Helper()
	e.skipUnless(e.h.OpenOther != nil, "OpenOther")
	return e.newBackend(e.h.OpenOther(e.t), func(c *syncguard.Config) { c.Dialect = e.h.OtherDialect })
}

// holdFenceRow makes every acquire of key wait: it creates the key's fence
// counter row (at 0, as the reference implementation does) and locks it
// FOR UPDATE in a transaction on a pool of its own. The returned function
// rolls that transaction back; it is also registered as a cleanup.
func (e *env) holdFenceRow(key string) (unblock func()) {
	e.t.Helper()
	norm, _, fk := e.derive(key)
	e.exec(`INSERT INTO `+e.fencesTable()+` ("fence_key", "fence", "key_debug") VALUES ($1, 0, $2) ON CONFLICT ("fence_key") DO NOTHING`, fk, norm)
	db := e.h.Open(e.t)
	tx, err := db.BeginTx(e.ctx, nil)
	if err != nil {
		e.t.Fatalf("setup: begin blocking transaction: %v", err)
	}
	var n int64
	if err := tx.QueryRowContext(e.ctx, `SELECT "fence" FROM `+e.fencesTable()+` WHERE "fence_key" = $1 FOR UPDATE`, fk).Scan(&n); err != nil {
		_ = tx.Rollback()
		e.t.Fatalf("setup: locking the fence counter row: %v", err)
	}
	var once sync.Once
	unblock = func() { once.Do(func() { _ = tx.Rollback() }) }
	e.t.Cleanup(unblock)
	return unblock
}

// waitLockWaiter waits until a server backend whose query text contains
// substr is waiting on a lock, and returns its pid. It gives up (returning
// 0) when returned is closed first or after 10 s.
func (e *env) waitLockWaiter(substr string, returned <-chan struct{}, skip ...int) int {
	e.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	if skip == nil {
		skip = []int{}
	}
	for time.Now().Before(deadline) {
		var pid int
		err := e.db.QueryRowContext(e.ctx, `SELECT pid FROM pg_stat_activity
WHERE wait_event_type = 'Lock' AND strpos(query, $1) > 0 AND pid <> pg_backend_pid()
  AND NOT (pid = ANY ($2::int[]))
ORDER BY backend_start LIMIT 1`, substr, intArray(skip)).Scan(&pid)
		if err == nil {
			return pid
		}
		if !errors.Is(err, sql.ErrNoRows) {
			e.t.Fatalf("setup: reading pg_stat_activity: %v", err)
		}
		select {
		case <-returned:
			return 0
		case <-e.ctx.Done():
			return 0
		case <-time.After(20 * time.Millisecond):
		}
	}
	return 0
}

// intArray renders a PostgreSQL int[] literal (portable across drivers).
func intArray(v []int) string {
	parts := make([]string, len(v))
	for i, n := range v {
		parts[i] = fmt.Sprint(n)
	}
	return "{" + strings.Join(parts, ",") + "}"
}

// retryTransient runs fn until it returns nil or a non-retryable error, for
// up to d (after a server restart, pooled connections fail for a while).
func (e *env) retryTransient(d time.Duration, fn func() error) error {
	deadline := time.Now().Add(d)
	for {
		err := fn()
		if err == nil || !syncguard.CodeOf(err).Retryable() || time.Now().After(deadline) || e.ctx.Err() != nil {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// serverClock estimates the server clock from the client clock, for
// scheduling only: a case sleeps until about a server time, then asserts on
// the server times the operations themselves report.
type serverClock struct{ offsetMs int64 }

func (e *env) serverClock() serverClock {
	e.t.Helper()
	c0 := time.Now()
	s := e.serverNowMs()
	c1 := time.Now()
	return serverClock{offsetMs: s - c0.Add(c1.Sub(c0)/2).UnixMilli()}
}

func (c serverClock) now() int64 { return time.Now().UnixMilli() + c.offsetMs }

// sleepUntil sleeps until the estimated server time reaches ms or ctx ends.
func (c serverClock) sleepUntil(ctx context.Context, ms int64) {
	d := time.Duration(ms-c.now()) * time.Millisecond
	if d <= 0 {
		return
	}
	select {
	case <-time.After(d):
	case <-ctx.Done():
	}
}

// errIs reports whether err matches the sentinel want, for messages.
func errIs(err, want error) bool { return err != nil && errors.Is(err, want) }

// Opener returns a Harness.Open (or OpenOther, OpenRefused, ...) function
// that opens a pool with sql.Open(driverName, dsn), allows it up to 20 open
// connections and closes it when the test ends:
//
//	conformance.Run(t, conformance.Harness{Open: conformance.Opener("pgx", dsn)})
func Opener(driverName, dsn string) func(t testing.TB) *sql.DB {
	return func(t testing.TB) *sql.DB {
		t.Helper()
		db, err := sql.Open(driverName, dsn)
		if err != nil {
			t.Fatalf("setup: sql.Open(%q): %v", driverName, err)
		}
		db.SetMaxOpenConns(20)
		t.Cleanup(func() { db.Close() })
		return db
	}
}
