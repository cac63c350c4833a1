package itest_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/syncguard/syncguard-go/internal/rules"
	"github.com/syncguard/syncguard-go/pgxstd"
	"github.com/syncguard/syncguard-go/syncguard"
	"github.com/syncguard/syncguard-go/tests/pgtest"
	"github.com/syncguard/syncguard-go/txguard"
)

// tgEnv is one test's lock tables (their own names), a resource table
// with a fence guard, a Backend and a Guard, all as the superuser.
type tgEnv struct {
	t        *testing.T
	ctx      context.Context
	srv      *pgtest.Server
	db       *sql.DB
	cfg      syncguard.Config
	b        *syncguard.Backend
	g        *txguard.Guard
	res      string // the resource table, quoted
	hold     string // the SQL function, quoted
	quotedLk string // the lock table, quoted
}

func newTGEnv(t *testing.T) *tgEnv {
	t.Helper()
	srv := pgtest.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	db, err := sql.Open("pgx", srv.DSN)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	suffix := fmt.Sprintf("%08x", rand.Uint32())
	e := &tgEnv{t: t, ctx: ctx, srv: srv, db: db,
		cfg: syncguard.Config{TableName: "tg_" + suffix + "_locks", FenceTableName: "tg_" + suffix + "_fences", Dialect: pgxstd.Dialect}}
	e.res, e.hold, e.quotedLk = rules.QuoteIdent("tg_"+suffix+"_res"), rules.QuoteIdent(e.cfg.TableName+"_hold"), rules.QuoteIdent(e.cfg.TableName)
	t.Cleanup(func() {
		_, _ = db.Exec(`DROP TABLE IF EXISTS ` + e.res + `, ` + e.quotedLk + `, ` + rules.QuoteIdent(e.cfg.FenceTableName) + `, ` +
			rules.QuoteIdent(e.cfg.TableName+"_waiters") + `, ` + rules.QuoteIdent(e.cfg.TableName+"_holders"))
		_, _ = db.Exec(`DROP FUNCTION IF EXISTS ` + rules.QuoteIdent("tg_"+suffix+"_res_fence_guard") + `()`)
		dropPrefixed(db, e.cfg.TableName) // txguard's functions
	})
	if err := syncguard.SetupSchema(ctx, db, &e.cfg); err != nil {
		t.Fatal(err)
	}
	if err := txguard.Setup(ctx, db, &e.cfg); err != nil {
		t.Fatal(err)
	}
	e.exec(`CREATE TABLE ` + e.res + ` (id int PRIMARY KEY, v text, fence bigint)`)
	if err := txguard.SetupFenceGuard(ctx, db, "tg_"+suffix+"_res", "fence"); err != nil {
		t.Fatal(err)
	}
	if e.b, err = syncguard.New(db, &e.cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.b.Close() })
	if e.g, err = txguard.New(db, &e.cfg); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *tgEnv) exec(q string, args ...any) {
	e.t.Helper()
	if _, err := e.db.ExecContext(e.ctx, q, args...); err != nil {
		e.t.Fatalf("%s: %v", q, err)
	}
}

// acquire takes key for a minute.
func (e *tgEnv) acquire(key string) syncguard.AcquireResult {
	e.t.Helper()
	res, err := e.b.Acquire(e.ctx, key, time.Minute)
	if err != nil || !res.OK {
		e.t.Fatalf("acquire %s: %+v, %v", key, res, err)
	}
	return res
}

// begin starts a transaction on a connection of its own and returns its
// backend pid.
func (e *tgEnv) begin(opts *sql.TxOptions) (*sql.Tx, int) {
	e.t.Helper()
	tx, err := e.db.BeginTx(e.ctx, opts)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = tx.Rollback() })
	var pid int
	if err := tx.QueryRowContext(e.ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		e.t.Fatal(err)
	}
	return tx, pid
}

// expire makes key's lock expired for takers (past the tolerance) without
// a row lock that conflicts with FOR KEY SHARE: an UPDATE of expires_at_ms
// only, as an extend is.
func (e *tgEnv) expire(key string) {
	e.exec(`UPDATE `+e.quotedLk+` SET "expires_at_ms" = 0 WHERE "key" = $1`, key)
}

// waitBlockedBy waits until a session waits for a lock pid holds. The
// bound is one only a bug reaches.
func (e *tgEnv) waitBlockedBy(pid int, what string) {
	e.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var n int
		if err := e.db.QueryRowContext(e.ctx, `SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))`, pid).Scan(&n); err != nil {
			e.t.Fatal(err)
		}
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("%s: no session waits for the holding transaction (pid %d) after 30 s", what, pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// async runs fn in a goroutine; the channel gets its error.
func async(fn func() error) <-chan error {
	c := make(chan error, 1)
	go func() { c <- fn() }()
	return c
}

func mustHold(t *testing.T, e *tgEnv, tx *sql.Tx, key string, res syncguard.AcquireResult) txguard.Held {
	t.Helper()
	h, err := e.g.Hold(e.ctx, tx, key, res.LockID)
	if err != nil || h.Fence != res.Fence {
		t.Fatalf("Hold: %+v, %v (want fence %s)", h, err, res.Fence)
	}
	return h
}

// TestTxGuardTakeoversWait: while a transaction holds the lease checked,
// every way of ending or taking the lock waits for it (our acquire, our
// release, Revoke, the reference implementation's SELECT ... FOR UPDATE),
// the holder's extend does not, and the holder's write commits before the
// next holder's lock.
func TestTxGuardTakeoversWait(t *testing.T) {
	e := newTGEnv(t)
	takers := []struct {
		name   string
		expire bool // the taker needs an expired lock
		take   func(key string, res syncguard.AcquireResult) error
	}{
		{"acquire", true, func(key string, _ syncguard.AcquireResult) error {
			r, err := e.b.Acquire(e.ctx, key, time.Minute)
			if err == nil && !r.OK {
				err = errors.New("acquire after the holder's commit: locked")
			}
			return err
		}},
		{"release", false, func(_ string, res syncguard.AcquireResult) error {
			r, err := e.b.Release(e.ctx, res.LockID)
			if err == nil && !r.OK {
				err = fmt.Errorf("release: %s", r.Reason)
			}
			return err
		}},
		{"revoke", false, func(key string, _ syncguard.AcquireResult) error {
			_, err := e.b.Revoke(e.ctx, key)
			return err
		}},
		{"reference acquire (SELECT ... FOR UPDATE)", true, func(key string, _ syncguard.AcquireResult) error {
			tx, err := e.db.BeginTx(e.ctx, nil)
			if err != nil {
				return err
			}
			defer tx.Rollback()
			if _, err := tx.ExecContext(e.ctx, `SELECT pg_advisory_xact_lock(hashtext($1))`, key); err != nil {
				return err
			}
			var id string
			if err := tx.QueryRowContext(e.ctx, `SELECT "lock_id" FROM `+e.quotedLk+` WHERE "key" = $1 FOR UPDATE`, key).Scan(&id); err != nil {
				return err
			}
			return tx.Commit()
		}},
	}
	for i, tk := range takers {
		t.Run(tk.name, func(t *testing.T) {
			key := fmt.Sprintf("tg:wait:%d", i)
			res := e.acquire(key)
			tx, pid := e.begin(nil)
			mustHold(t, e, tx, key, res)
			fence, _ := res.Fence.Int64()
			if _, err := tx.ExecContext(e.ctx, `INSERT INTO `+e.res+` (id, v, fence) VALUES ($1, 'holder', $2)`, i, fence); err != nil {
				t.Fatal(err)
			}
			// The holder's own extend goes through while the row is held.
			if x, err := e.b.Extend(e.ctx, res.LockID, time.Minute); err != nil || !x.OK {
				t.Fatalf("extend while the lease is held in a transaction: %+v, %v", x, err)
			}
			if tk.expire {
				e.expire(key)
			}
			done := async(func() error { return tk.take(key, res) })
			e.waitBlockedBy(pid, tk.name)
			select {
			case err := <-done:
				t.Fatalf("%s returned while the holder's transaction was open: %v", tk.name, err)
			default:
			}
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
			if err := <-done; err != nil {
				t.Fatalf("%s after the holder committed: %v", tk.name, err)
			}
			var v string
			if err := e.db.QueryRowContext(e.ctx, `SELECT v FROM `+e.res+` WHERE id = $1`, i).Scan(&v); err != nil || v != "holder" {
				t.Fatalf("the holder's write: %q, %v", v, err)
			}
		})
	}
}

// TestTxGuardRejectsLostLeases: an expired lease, a taken-over one and a
// released one are rejected with ErrLockLost, by Hold and by the SQL
// function; the fence guard rejects a stale fence and allows an equal one.
func TestTxGuardRejectsLostLeases(t *testing.T) {
	e := newTGEnv(t)
	lostBy := func(tx *sql.Tx, key, lockID, want string) {
		t.Helper()
		_, err := e.g.Hold(e.ctx, tx, key, lockID)
		var se *syncguard.Error
		if !errors.Is(err, syncguard.ErrLockLost) || !errors.As(err, &se) || !strings.Contains(se.Msg, want) {
			t.Fatalf("Hold of a lost lease: %v, want ErrLockLost and %q", err, want)
		}
		_ = tx.Rollback()
	}
	// Expired, nobody took it yet: rejected by the server's clock.
	old := e.acquire("tg:lost")
	e.exec(`UPDATE `+e.quotedLk+` SET "expires_at_ms" = floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint - 1 WHERE "key" = $1`, "tg:lost")
	tx, _ := e.begin(nil)
	lostBy(tx, "tg:lost", old.LockID, "expired")
	// Taken over.
	e.expire("tg:lost")
	next := e.acquire("tg:lost")
	tx, _ = e.begin(nil)
	lostBy(tx, "tg:lost", old.LockID, "no lock has this lockId")
	// The new holder writes, then the old one tries with its old fence
	// through the SQL function (SG001) and without it (the fence guard).
	nf, _ := next.Fence.Int64()
	of, _ := old.Fence.Int64()
	tx, _ = e.begin(nil)
	mustHold(t, e, tx, "tg:lost", next)
	if _, err := tx.ExecContext(e.ctx, `INSERT INTO `+e.res+` (id, v, fence) VALUES (1, 'new', `+e.hold+`($1, $2))`, next.LockID, "tg:lost"); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(e.ctx, `UPDATE `+e.res+` SET v = 'new again', fence = $1 WHERE id = 1`, nf); err != nil {
		t.Fatalf("an equal fence must pass the guard: %v", err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	_, err := e.db.ExecContext(e.ctx, `UPDATE `+e.res+` SET v = 'zombie', fence = `+e.hold+`($1, $2) WHERE id = 1`, old.LockID, "tg:lost")
	if err = e.g.Classify(e.ctx, err); !errors.Is(err, syncguard.ErrLockLost) || !strings.Contains(err.Error(), "SG001") {
		t.Fatalf("the SQL function with a lost lease: %v, want ErrLockLost (SG001)", err)
	}
	_, err = e.db.ExecContext(e.ctx, `INSERT INTO `+e.res+` (id, v, fence) VALUES (1, 'zombie', $1) ON CONFLICT (id) DO UPDATE SET v = EXCLUDED.v, fence = EXCLUDED.fence`, of)
	if err = e.g.Classify(e.ctx, err); !errors.Is(err, txguard.ErrStaleFence) || !strings.Contains(err.Error(), "is below the stored") {
		t.Fatalf("the fence guard with a stale fence: %v, want ErrStaleFence", err)
	}
	// Released.
	if r, err := e.b.Release(e.ctx, next.LockID); err != nil || !r.OK {
		t.Fatalf("release: %+v, %v", r, err)
	}
	tx, _ = e.begin(nil)
	lostBy(tx, "tg:lost", next.LockID, "no lock has this lockId")
	// A lockId of another key.
	other := e.acquire("tg:other")
	tx, _ = e.begin(nil)
	lostBy(tx, "tg:lost", other.LockID, "another key")
}

// TestTxGuardIsolation: under REPEATABLE READ and SERIALIZABLE a takeover
// committed after the snapshot fails Hold with 40001 (retryable, with
// words), while an extend committed after it does not.
func TestTxGuardIsolation(t *testing.T) {
	e := newTGEnv(t)
	for i, level := range []sql.IsolationLevel{sql.LevelRepeatableRead, sql.LevelSerializable} {
		t.Run(level.String(), func(t *testing.T) {
			key := fmt.Sprintf("tg:iso:%d", i)
			res := e.acquire(key)
			tx, _ := e.begin(&sql.TxOptions{Isolation: level}) // its first statement took the snapshot
			if x, err := e.b.Extend(e.ctx, res.LockID, time.Minute); err != nil || !x.OK {
				t.Fatal(x, err)
			}
			mustHold(t, e, tx, key, res)
			_ = tx.Rollback()

			tx, _ = e.begin(&sql.TxOptions{Isolation: level})
			e.expire(key)
			e.acquire(key)
			_, err := e.g.Hold(e.ctx, tx, key, res.LockID)
			var se *syncguard.Error
			if !errors.As(err, &se) || se.SQLState != "40001" || !se.Retryable() || !strings.Contains(se.Msg, "snapshot") {
				t.Fatalf("Hold after a takeover committed after the snapshot: %v, want a retryable 40001 naming the snapshot", err)
			}
		})
	}
}

// TestTxGuardDeadlock: a transaction that takes a resource row and then
// the lock row (an acquire in it, Backend.WithTx) against a holder that
// took the lock row first and then wants the resource row: PostgreSQL
// breaks the cycle with 40P01 in one of them, a retryable
// ServiceUnavailable. Taking the lock row first everywhere avoids it.
func TestTxGuardDeadlock(t *testing.T) {
	e := newTGEnv(t)
	res := e.acquire("tg:dl")
	e.exec(`INSERT INTO ` + e.res + ` (id, v, fence) VALUES (7, 'x', 0)`)
	holder, hpid := e.begin(nil)
	mustHold(t, e, holder, "tg:dl", res)
	e.expire("tg:dl")
	other, _ := e.begin(nil)
	if _, err := other.ExecContext(e.ctx, `SET LOCAL deadlock_timeout = '50ms'`); err != nil {
		t.Fatal(err)
	}
	if _, err := other.ExecContext(e.ctx, `UPDATE `+e.res+` SET v = 'other' WHERE id = 7`); err != nil {
		t.Fatal(err)
	}
	otherDone := async(func() error { _, err := e.b.WithTx(other).Acquire(e.ctx, "tg:dl", time.Minute); return err })
	e.waitBlockedBy(hpid, "the other transaction's acquire")
	_, herr := holder.ExecContext(e.ctx, `UPDATE `+e.res+` SET v = 'holder' WHERE id = 7`)
	herr = e.g.Classify(e.ctx, herr)
	if herr == nil {
		_ = holder.Commit()
	}
	oerr := <-otherDone
	var deadlocks int
	for _, err := range []error{herr, oerr} {
		var se *syncguard.Error
		if errors.As(err, &se) && se.SQLState == "40P01" && se.Retryable() {
			deadlocks++
		}
	}
	if deadlocks != 1 {
		t.Fatalf("want one 40P01; the holder's write: %v; the other's acquire: %v", herr, oerr)
	}
}

// TestTxGuardUnprivileged: a role with SELECT and UPDATE on the lock table
// (what acquire needs anyway) can use Hold and the SQL function, and call
// Setup once the function exists; without UPDATE, Hold is AuthFailed.
func TestTxGuardUnprivileged(t *testing.T) {
	e := newTGEnv(t)
	if e.srv.Kind == pgtest.KindEnv {
		t.Skip("creates a role; not on a server given by " + pgtest.EnvDSN)
	}
	role := "tg_user_" + strings.TrimSuffix(strings.TrimPrefix(e.cfg.TableName, "tg_"), "_locks")
	e.exec(`CREATE ROLE ` + role + ` LOGIN PASSWORD 'tg-pw'`)
	t.Cleanup(func() {
		_, _ = e.db.Exec(`DROP OWNED BY ` + role)
		_, _ = e.db.Exec(`DROP ROLE IF EXISTS ` + role)
	})
	e.exec(`GRANT SELECT, UPDATE ON ` + e.quotedLk + `, ` + e.res + ` TO ` + role)
	e.exec(`GRANT INSERT ON ` + e.res + ` TO ` + role)
	udb, err := sql.Open("pgx", e.srv.DSNFor(role, "tg-pw", ""))
	if err != nil {
		t.Fatal(err)
	}
	defer udb.Close()
	if err := txguard.Setup(e.ctx, udb, &e.cfg); err != nil {
		t.Fatalf("Setup by a role without CREATE, the function in place: %v", err)
	}
	g, err := txguard.New(udb, &e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	res := e.acquire("tg:priv")
	tx, err := udb.BeginTx(e.ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := g.Hold(e.ctx, tx, "tg:priv", res.LockID); err != nil {
		t.Fatalf("Hold as a role with SELECT, UPDATE on the lock table: %v", err)
	}
	if _, err := tx.ExecContext(e.ctx, `INSERT INTO `+e.res+` (id, v, fence) VALUES (1, 'u', `+e.hold+`($1, $2))`, res.LockID, "tg:priv"); err != nil {
		t.Fatalf("the SQL function as that role: %v", err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	e.exec(`REVOKE UPDATE ON ` + e.quotedLk + ` FROM ` + role)
	tx, err = udb.BeginTx(e.ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := g.Hold(e.ctx, tx, "tg:priv", res.LockID); syncguard.CodeOf(err) != syncguard.ErrAuthFailed {
		t.Fatalf("Hold without UPDATE on the lock table: %v, want AuthFailed", err)
	}
}

// TestTxGuardExampleFlow runs ExampleGuard_HoldLease's flow: WithLock, a
// transaction that holds the lease and writes with its fence.
func TestTxGuardExampleFlow(t *testing.T) {
	e := newTGEnv(t)
	err := syncguard.WithLock(e.ctx, e.b, "invoice:42", func(ctx context.Context, lease *syncguard.Lease) error {
		tx, err := e.db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		held, err := e.g.HoldLease(ctx, tx, lease)
		if err != nil {
			return err
		}
		f, _ := held.Fence.Int64()
		if _, err := tx.ExecContext(ctx, `INSERT INTO `+e.res+` (id, v, fence) VALUES (42, 'sent', $1)`, f); err != nil {
			return e.g.Classify(ctx, err)
		}
		return tx.Commit()
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// A lease that has ended fails before any I/O.
	lease, err := syncguard.Lock(e.ctx, e.b, "invoice:43", nil)
	if err != nil {
		t.Fatal(err)
	}
	lease.Close()
	if _, err := e.g.HoldLease(e.ctx, nil, lease); !errors.Is(err, syncguard.ErrLockLost) {
		t.Fatalf("HoldLease of a released lease: %v, want ErrLockLost", err)
	}
}
