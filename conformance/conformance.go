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
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/syncguard/syncguard-go/driver"
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

var _ = fmt.Sprintf
