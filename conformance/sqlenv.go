package conformance

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/syncguard/syncguard-go/internal/rules"
	"github.com/syncguard/syncguard-go/syncguard"
)

// sqlEnv is what an SQL-tier (and advisory) case works with: its own
// tables, two independent pools with a *syncguard.Backend each (pb, pb2),
// raw SQL helpers, and the backend-tier env on the same backends.
type sqlEnv struct {
	*env
	h       Harness
	cfg     *syncguard.Config
	db, db2 *sql.DB
	pb, pb2 *syncguard.Backend
}

func newSQLEnv(t *testing.T, ctx context.Context, h Harness) *sqlEnv {
	t.Helper()
	base := suiteTable("x")
	base = strings.TrimSuffix(base, "_x")
	cfg := &syncguard.Config{TableName: base + "_locks", FenceTableName: base + "_fences", Dialect: h.Dialect}
	if h.Config != nil {
		h.Config(cfg)
	}
	e := &sqlEnv{h: h, cfg: cfg}
	e.db = h.Open(t)
	e.db2 = h.Open(t)
	if err := syncguard.SetupSchema(ctx, e.db, cfg); err != nil {
		t.Fatalf("setup: SetupSchema failed: %v", err)
	}
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, tbl := range []string{cfg.TableName, cfg.FenceTableName, cfg.TableName + "_waiters", cfg.TableName + "_holders"} {
			if _, err := e.db.ExecContext(cctx, `DROP TABLE IF EXISTS `+rules.QuoteIdent(tbl)); err != nil {
				t.Logf("cleanup: drop %s: %v", tbl, err)
			}
		}
	})
	e.env = &env{t: t, ctx: ctx}
	e.pb = e.newBackend(e.db, nil)
	e.pb2 = e.newBackend(e.db2, nil)
	e.env = newEnv(t, ctx, e.target())
	return e
}

// target is the backend tier's view of the case: the two pools' backends
// plus two more pools for the races, the server clock, a Backend on a
// closed pool, and raw SQL for the hooks.
func (e *sqlEnv) target() Target {
	others := []syncguard.LockBackend{e.pb2}
	for range 2 {
		others = append(others, e.newBackend(e.h.Open(e.t), nil))
	}
	return Target{
		Backend: e.pb,
		Others:  others,
		Now: func(ctx context.Context) (time.Time, error) {
			var n int64
			err := e.db.QueryRowContext(ctx, `SELECT `+rules.NowMsSQL).Scan(&n)
			return time.UnixMilli(n), err
		},
		Unreachable: e.closedBackend(),
		Count: func(ctx context.Context) (int, error) {
			var n int
			err := e.db.QueryRowContext(ctx, `SELECT count(*) FROM `+e.locksTable()).Scan(&n)
			return n, err
		},
		SetFence: func(ctx context.Context, key string, n int64) error {
			norm, _, fk := e.derive(key)
			_, err := e.db.ExecContext(ctx, `INSERT INTO `+e.fencesTable()+` ("fence_key", "fence", "key_debug") VALUES ($1, $2, $3)
ON CONFLICT ("fence_key") DO UPDATE SET "fence" = EXCLUDED."fence"`, fk, n, norm)
			return err
		},
		Delete: func(ctx context.Context, lockID string) error {
			_, err := e.db.ExecContext(ctx, `DELETE FROM `+e.locksTable()+` WHERE "lock_id" = $1`, lockID)
			return err
		},
		Expire: func(ctx context.Context, lockID string) error {
			_, err := e.db.ExecContext(ctx, `UPDATE `+e.locksTable()+` SET "expires_at_ms" = "expires_at_ms" - 3600000 WHERE "lock_id" = $1`, lockID)
			return err
		},
		Capabilities: &syncguard.Capabilities{Backend: "postgres", SupportsFencing: true, TimeAuthority: "server"},
	}
}

// config returns a Config for other tables than the case's, built as the
// case's own: Harness.Dialect, then Harness.Config applied.
func (e *sqlEnv) config(table, fences string) *syncguard.Config {
	cfg := &syncguard.Config{TableName: table, FenceTableName: fences, Dialect: e.h.Dialect}
	if e.h.Config != nil {
		e.h.Config(cfg)
	}
	return cfg
}

// newBackend makes a Backend on db with the case's tables; mod may adjust
// the config.
func (e *sqlEnv) newBackend(db *sql.DB, mod func(*syncguard.Config)) *syncguard.Backend {
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

// serverNowMs reads the server clock.
func (e *sqlEnv) serverNowMs() int64 { return e.nowMs() }

// fenceRows counts rows in the case's fence table.
func (e *sqlEnv) fenceRows() int {
	e.t.Helper()
	var n int
	if err := e.db.QueryRowContext(e.ctx, `SELECT count(*) FROM `+e.fencesTable()).Scan(&n); err != nil {
		e.t.Fatalf("setup: counting fence rows: %v", err)
	}
	return n
}

// needSessionState skips the case when Harness.NoSessionState is set.
func (e *sqlEnv) needSessionState(what string) {
	e.t.Helper()
	if e.h.NoSessionState {
		e.t.Skipf("needs session state (%s), which a pooler in transaction mode does not keep (Harness.NoSessionState); use transaction-scoped locks there", what)
	}
}

// skipUnless skips the case, naming the Harness hook it needs, unless ok.
// It shadows env.skipUnless (which names a Target hook, what a
// RunBackend user sets): a SQL-tier case's hooks are the Harness's.
func (e *sqlEnv) skipUnless(ok bool, hook string) {
	e.t.Helper()
	if !ok {
		e.t.Skipf("needs Harness.%s", hook)
	}
}

// derive returns the normalized key and its storage and fence keys, as the
// spec's two-step derivation computes them.
func (e *sqlEnv) derive(key string) (norm, storage, fence string) {
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

// locksTable and fencesTable are the case's quoted table names.
func (e *sqlEnv) locksTable() string  { return rules.QuoteIdent(e.cfg.TableName) }
func (e *sqlEnv) fencesTable() string { return rules.QuoteIdent(e.cfg.FenceTableName) }

// exec runs raw SQL on the case's first pool.
func (e *sqlEnv) exec(query string, args ...any) {
	e.t.Helper()
	if _, err := e.db.ExecContext(e.ctx, query, args...); err != nil {
		e.t.Fatalf("setup: %s: %v", strings.Join(strings.Fields(query), " "), err)
	}
}

// dropLater drops table at the end of the case.
func (e *sqlEnv) dropLater(table string) {
	e.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = e.db.ExecContext(ctx, `DROP TABLE IF EXISTS `+rules.QuoteIdent(table))
	})
}

// rawLock is one lock table row as stored.
type rawLock struct {
	Key, LockID, Fence, UserKey string
	ExpiresAt, AcquiredAt       int64
}

// rawLockRow reads the lock row of key (by its storage key) with raw SQL.
func (e *sqlEnv) rawLockRow(key string) (rawLock, bool) {
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
func (e *sqlEnv) lockRows() int {
	e.t.Helper()
	n, _ := e.count()
	return n
}

// fenceCounter reads the fence counter of key with raw SQL.
func (e *sqlEnv) fenceCounter(key string) (int64, bool) {
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
func (e *sqlEnv) fenceTable() map[string]int64 {
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
func (e *sqlEnv) otherBackend() *syncguard.Backend {
	e.t.Helper()
	e.skipUnless(e.h.OpenOther != nil, "OpenOther")
	return e.newBackend(e.h.OpenOther(e.t), func(c *syncguard.Config) { c.Dialect = e.h.OtherDialect })
}

// closedDB opens a pool from the harness and closes it.
func (e *sqlEnv) closedDB() *sql.DB {
	e.t.Helper()
	db := e.h.Open(e.t)
	if err := db.Close(); err != nil {
		e.t.Fatalf("setup: closing a pool: %v", err)
	}
	return db
}

// closedBackend is a Backend on the case's tables over a closed pool.
func (e *sqlEnv) closedBackend() *syncguard.Backend {
	e.t.Helper()
	return e.newBackend(e.closedDB(), nil)
}

// begin starts a transaction on db, rolled back at cleanup if still open.
func (e *sqlEnv) begin(db *sql.DB) *sql.Tx {
	e.t.Helper()
	tx, err := db.BeginTx(e.ctx, nil)
	if err != nil {
		e.t.Fatalf("setup: begin: %v", err)
	}
	e.t.Cleanup(func() { _ = tx.Rollback() })
	return tx
}

// acquireWhileOpen acquires key on b while tx, which wrote the key's lock
// row, is still open, and commits tx: as soon as the acquire returns, or
// once the acquire waits for a lock tx holds, so that it can return.
func (e *sqlEnv) acquireWhileOpen(tx *sql.Tx, b syncguard.LockBackend, key string) (syncguard.AcquireResult, error) {
	e.t.Helper()
	type res struct {
		r   syncguard.AcquireResult
		err error
	}
	var txPID int
	if err := tx.QueryRowContext(e.ctx, `SELECT pg_backend_pid()`).Scan(&txPID); err != nil {
		e.t.Fatalf("setup: the transaction's pid: %v", err)
	}
	ch := make(chan res, 1)
	go func() {
		r, err := b.Acquire(e.ctx, key, 30*time.Second)
		ch <- res{r, err}
	}()
	commit := func() {
		if err := tx.Commit(); err != nil {
			e.t.Fatalf("setup: commit: %v", err)
		}
	}
	// The acquire answers, or waits for a lock the transaction holds
	// (pg_blocking_pids names it): then the transaction ends, and the
	// acquire answers after it. Not a time: on a loaded machine an
	// acquire that does not wait can take longer than any bound.
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case got := <-ch:
			commit()
			return got.r, got.err
		case <-tick.C:
			var blocked bool
			if err := e.db2.QueryRowContext(e.ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE $1 = ANY (pg_blocking_pids(pid)))`, txPID).Scan(&blocked); err != nil {
				e.t.Fatalf("setup: who waits for the transaction: %v", err)
			}
			if blocked {
				commit() // the acquire waits for the transaction: end it
				got := <-ch
				return got.r, got.err
			}
		}
	}
}

func (e *sqlEnv) txExec(tx *sql.Tx, query string, args ...any) {
	e.t.Helper()
	if _, err := tx.ExecContext(e.ctx, query, args...); err != nil {
		e.t.Fatalf("setup: %s: %v", strings.Join(strings.Fields(query), " "), err)
	}
}

// holdFenceRow makes every acquire of key wait: it creates the key's fence
// counter row (at 0, as the reference implementation does) and locks it
// FOR UPDATE in a transaction on a pool of its own. The returned function
// rolls that transaction back; it is also registered as a cleanup.
func (e *sqlEnv) holdFenceRow(key string) (unblock func()) {
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
// 0) when returned is closed first, the case deadline passes, or after 10 s
// (× the slowdown).
func (e *sqlEnv) waitLockWaiter(substr string, returned <-chan struct{}, skip ...int) int {
	e.t.Helper()
	deadline := time.Now().Add(e.slow().scale(10 * time.Second))
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
			if e.ctx.Err() != nil {
				return 0
			}
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
// up to d × the slowdown (after a server restart, pooled connections fail
// for a while).
func (e *sqlEnv) retryTransient(d time.Duration, fn func() error) error {
	deadline := time.Now().Add(e.slow().scale(d))
	for {
		err := fn()
		if err == nil || !syncguard.CodeOf(err).Retryable() || time.Now().After(deadline) || e.ctx.Err() != nil {
			return err
		}
		select {
		case <-time.After(100 * time.Millisecond):
		case <-e.ctx.Done():
		}
	}
}
