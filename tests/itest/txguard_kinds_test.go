package itest_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/syncguard/syncguard-go/internal/rules"
	"github.com/syncguard/syncguard-go/multilock"
	"github.com/syncguard/syncguard-go/rwlock"
	"github.com/syncguard/syncguard-go/semaphore"
	"github.com/syncguard/syncguard-go/syncguard"
	"github.com/syncguard/syncguard-go/tests/pgtest"
	"github.com/syncguard/syncguard-go/tests/pgtest/suite"
	"github.com/syncguard/syncguard-go/txguard"
)

// tkEnv is one test's tables of every kind of lock (a fresh TableName),
// the kinds' Lockers and a Guard, on one adapter.
type tkEnv struct {
	t   *testing.T
	ctx context.Context
	db  *sql.DB
	cfg syncguard.Config
	g   *txguard.Guard
	b   *syncguard.Backend
	ml  *multilock.Locker
	sem *semaphore.Semaphore // one permit per key
	rw  *rwlock.RWLock
}

func newTKEnv(t *testing.T, drv suite.Driver) *tkEnv {
	t.Helper()
	srv := pgtest.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	db, err := sql.Open(drv.Name, srv.DSN)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	e := &tkEnv{t: t, ctx: ctx, db: db, cfg: syncguard.Config{TableName: fmt.Sprintf("tgk_%08x", rand.Uint32()), Dialect: semDialect(drv, srv.DSN)}}
	t.Cleanup(func() { dropPrefixed(db, e.cfg.TableName) })
	for _, setup := range []func(context.Context, *sql.DB, *syncguard.Config) error{
		syncguard.SetupSchema, multilock.SetupSchema, semaphore.SetupSchema, rwlock.SetupSchema, txguard.Setup,
	} {
		if err := setup(ctx, db, &e.cfg); err != nil {
			t.Fatal(err)
		}
	}
	if e.b, err = syncguard.New(db, &e.cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.b.Close() })
	if e.ml, err = multilock.New(db, &e.cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.ml.Close() })
	if e.sem, err = semaphore.New(db, &e.cfg, 1); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.sem.Close() })
	if e.rw, err = rwlock.New(db, &e.cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.rw.Close() })
	if e.g, err = txguard.New(db, &e.cfg); err != nil {
		t.Fatal(err)
	}
	return e
}

// dropPrefixed drops every table and function whose name starts with
// prefix (a test's TableName).
func dropPrefixed(db *sql.DB, prefix string) {
	_, _ = db.Exec(`DO $$DECLARE r record; BEGIN
  FOR r IN SELECT c.oid::regclass AS n FROM pg_class AS c WHERE c.relkind = 'r' AND starts_with(c.relname, ` + quoteLit(prefix) + `) LOOP
    EXECUTE format('DROP TABLE IF EXISTS %s CASCADE', r.n);
  END LOOP;
  FOR r IN SELECT p.oid::regprocedure AS f FROM pg_proc AS p WHERE starts_with(p.proname, ` + quoteLit(prefix) + `) LOOP
    EXECUTE format('DROP FUNCTION IF EXISTS %s CASCADE', r.f);
  END LOOP;
END$$`)
}

func quoteLit(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// tkKind is one kind of lock as the tests use it.
type tkKind struct {
	name string
	// lock takes a lease of key for ttl.
	lock func(e *tkEnv, key string, ttl time.Duration) (txguard.Lease, error)
	// take is another holder's single acquire attempt on (part of) what
	// the lease of key holds: a takeover once the lease has expired.
	take func(e *tkEnv, key string) (syncguard.AcquireResult, error)
	// table holds the lease's rows (lock_id, expires_at_ms).
	table func(e *tkEnv) string
	// fn calls the kind's SQL function for the lease: its fence, and the
	// fence the lease says it has.
	fn func(e *tkEnv, l txguard.Lease) (query string, args []any, want syncguard.Fence)
	// extendWaits: the holder's extend waits for a transaction that holds
	// the lease checked (multilock's FOR SHARE).
	extendWaits bool
}

func tkFn(name string) func(e *tkEnv, l txguard.Lease) (string, []any, syncguard.Fence) {
	return func(e *tkEnv, l txguard.Lease) (string, []any, syncguard.Fence) {
		if name == "_hold" { // the mutex's takes the key too
			return `SELECT ` + rules.QuoteIdent(e.cfg.TableName+name) + `($1, $2)`, []any{l.LockID(), l.Key()}, l.(*syncguard.Lease).Fence()
		}
		return `SELECT ` + rules.QuoteIdent(e.cfg.TableName+name) + `($1)`, []any{l.LockID()}, l.(*syncguard.Lease).Fence()
	}
}

func tkOpts(ttl time.Duration) *syncguard.LockOptions { return &syncguard.LockOptions{TTL: ttl} }

var tkKinds = []tkKind{
	{
		name: "mutex",
		lock: func(e *tkEnv, key string, ttl time.Duration) (txguard.Lease, error) {
			return syncguard.Lock(e.ctx, e.b, key, tkOpts(ttl))
		},
		take: func(e *tkEnv, key string) (syncguard.AcquireResult, error) {
			return e.b.Acquire(e.ctx, key, time.Minute)
		},
		table: func(e *tkEnv) string { return e.cfg.TableName },
		fn:    tkFn("_hold"),
	},
	{
		name: "multilock",
		lock: func(e *tkEnv, key string, ttl time.Duration) (txguard.Lease, error) {
			return multilock.Lock(e.ctx, e.ml, []string{key + ":a", key + ":b"}, tkOpts(ttl))
		},
		take: func(e *tkEnv, key string) (syncguard.AcquireResult, error) {
			return e.ml.Acquire(e.ctx, multilock.Keys(key+":b"), time.Minute) // one key of the set
		},
		table: func(e *tkEnv) string { return e.ml.Tables().Locks },
		fn: func(e *tkEnv, l txguard.Lease) (string, []any, syncguard.Fence) {
			f, _ := l.(*multilock.Lease).FenceOf(l.(*multilock.Lease).Keys()[1])
			return `SELECT ` + rules.QuoteIdent(e.cfg.TableName+"_ml_hold") + `($1, $2)`, []any{l.LockID(), l.(*multilock.Lease).Keys()[1]}, f
		},
		extendWaits: true,
	},
	{
		name: "semaphore",
		lock: func(e *tkEnv, key string, ttl time.Duration) (txguard.Lease, error) {
			return e.sem.Lock(e.ctx, key, tkOpts(ttl))
		},
		take: func(e *tkEnv, key string) (syncguard.AcquireResult, error) {
			return e.sem.Acquire(e.ctx, key, time.Minute)
		},
		table: func(e *tkEnv) string { _, slots, _ := semaphore.Tables(e.cfg.TableName); return slots },
		fn: func(e *tkEnv, l txguard.Lease) (string, []any, syncguard.Fence) {
			return `SELECT ` + rules.QuoteIdent(e.cfg.TableName+"_sem_hold") + `($1)`, []any{l.LockID()}, l.(*semaphore.Permit).Fence()
		},
	},
	{
		name: "rwlock writer",
		lock: func(e *tkEnv, key string, ttl time.Duration) (txguard.Lease, error) {
			return syncguard.Lock(e.ctx, e.rw.Exclusive(), key, tkOpts(ttl))
		},
		take: func(e *tkEnv, key string) (syncguard.AcquireResult, error) {
			return e.rw.Shared().Acquire(e.ctx, key, time.Minute) // a reader
		},
		table: func(e *tkEnv) string { h, _, _ := rwlock.Tables(e.cfg.TableName); return h },
		fn:    tkFn("_rw_hold"),
	},
	{
		name: "rwlock reader",
		lock: func(e *tkEnv, key string, ttl time.Duration) (txguard.Lease, error) {
			return syncguard.Lock(e.ctx, e.rw.Shared(), key, tkOpts(ttl))
		},
		take: func(e *tkEnv, key string) (syncguard.AcquireResult, error) {
			return e.rw.Exclusive().Acquire(e.ctx, key, time.Minute) // a writer
		},
		table: func(e *tkEnv) string { h, _, _ := rwlock.Tables(e.cfg.TableName); return h },
		fn:    tkFn("_rw_hold"),
	},
}

func (e *tkEnv) lock(k tkKind, key string, ttl time.Duration) txguard.Lease {
	e.t.Helper()
	l, err := k.lock(e, key, ttl)
	if err != nil {
		e.t.Fatalf("%s: lock %s: %v", k.name, key, err)
	}
	e.t.Cleanup(func() {
		if c, ok := l.(interface{ Close() }); ok {
			c.Close()
		}
	})
	return l
}

func (e *tkEnv) begin() (*sql.Tx, int) {
	e.t.Helper()
	tx, err := e.db.BeginTx(e.ctx, nil)
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

// waitBlocked waits until a session waits for a lock that pid holds.
// The bound is one only a bug reaches.
func waitBlocked(t *testing.T, ctx context.Context, db *sql.DB, pid int, what string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var n int
		if err := db.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))`, pid).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: no session waits for the holding transaction (pid %d) after 30 s", what, pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func wantHeld(t *testing.T, k tkKind, l txguard.Lease, h txguard.Held) {
	t.Helper()
	if set, ok := l.(*multilock.Lease); ok {
		if !slices.Equal(h.Fences, set.Fences()) || h.Fence != slices.Max([]syncguard.Fence{set.Fences()[0].Fence, set.Fences()[1].Fence}) {
			t.Fatalf("%s: Held %+v, want the set's fences %+v", k.name, h, set.Fences())
		}
		return
	}
	var f syncguard.Fence
	switch v := l.(type) {
	case *syncguard.Lease:
		f = v.Fence()
	case *semaphore.Permit:
		f = v.Fence()
	}
	if h.Fence != f || h.Fences != nil {
		t.Fatalf("%s: Held %+v, want fence %s", k.name, h, f)
	}
}

// runTxGuardKinds checks HoldLease and the SQL functions on every kind of
// lock: a live lease is held (the holder's extend goes through, or, for a
// multilock set, waits for the transaction); a lease whose key was taken
// over after its expiry is refused; and while a transaction holds the
// lease checked, a takeover of what it holds, once the lease has expired
// by the server's clock, waits until that transaction ends.
func runTxGuardKinds(t *testing.T, drv suite.Driver) {
	e := newTKEnv(t, drv)
	for i, k := range tkKinds {
		t.Run(k.name, func(t *testing.T) {
			e := *e
			e.t = t
			t.Run("Held", func(t *testing.T) {
				e.t = t
				key := fmt.Sprintf("tgk:held:%d", i)
				l := e.lock(k, key, time.Minute)
				tx, pid := e.begin()
				h, err := e.g.HoldLease(e.ctx, tx, l)
				if err != nil {
					t.Fatalf("HoldLease of a live %s lease: %v", k.name, err)
				}
				wantHeld(t, k, l, h)
				q, args, want := k.fn(&e, l)
				var got int64
				if err := tx.QueryRowContext(e.ctx, q, args...).Scan(&got); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
				if n, _ := want.Int64(); got != n {
					t.Fatalf("%s = %d, want the lease's fence %s", q, got, want)
				}
				ext := func() error {
					x, err := l.(interface {
						Extend(context.Context, time.Duration) (syncguard.ExtendResult, error)
					}).Extend(e.ctx, time.Minute)
					if err == nil && !x.OK {
						err = fmt.Errorf("extend: %s", x.Reason)
					}
					return err
				}
				if !k.extendWaits {
					if err := ext(); err != nil { // returns while tx holds the lease: no wait
						t.Fatalf("the holder's extend while a transaction holds the lease checked: %v", err)
					}
				} else {
					done := async(ext)
					waitBlocked(t, e.ctx, e.db, pid, "the set's extend")
					select {
					case err := <-done:
						t.Fatalf("the set's extend returned while the transaction held the set checked: %v", err)
					default:
					}
					defer func() {
						if err := <-done; err != nil {
							t.Errorf("the set's extend after the commit: %v", err)
						}
					}()
				}
				if err := tx.Commit(); err != nil {
					t.Fatal(err)
				}
			})
			t.Run("RefusedAfterTakeover", func(t *testing.T) {
				e.t = t
				key := fmt.Sprintf("tgk:lost:%d", i)
				l := e.lock(k, key, time.Minute)
				// Expired by the server's clock (the lease does not know),
				// then taken over.
				if _, err := e.db.ExecContext(e.ctx, `UPDATE `+rules.QuoteIdent(k.table(&e))+` SET "expires_at_ms" = 0 WHERE "lock_id" = $1`, l.LockID()); err != nil {
					t.Fatal(err)
				}
				if r, err := k.take(&e, key); err != nil || !r.OK {
					t.Fatalf("takeover of the expired lease: %+v, %v", r, err)
				}
				tx, _ := e.begin()
				_, err := e.g.HoldLease(e.ctx, tx, l)
				var se *syncguard.Error
				if !errors.Is(err, syncguard.ErrLockLost) || !errors.As(err, &se) || se.Code != syncguard.ErrInvalidArgument {
					t.Fatalf("HoldLease of a %s lease taken over: %v, want an InvalidArgument ErrLockLost", k.name, err)
				}
				if l.Err() != nil {
					t.Fatalf("the lease ended locally (%v): the server's check was not exercised", l.Err())
				}
				_ = tx.Rollback()
				q, args, _ := k.fn(&e, l)
				_, err = e.db.ExecContext(e.ctx, q, args...)
				if err = e.g.Classify(e.ctx, err); !errors.Is(err, syncguard.ErrLockLost) || !strings.Contains(err.Error(), "SG001") {
					t.Fatalf("%s of a lease taken over: %v, want ErrLockLost (SG001)", q, err)
				}
				t.Logf("%s: %v", k.name, se.Msg)
			})
			t.Run("TakeoverWaits", func(t *testing.T) {
				e.t = t
				key := fmt.Sprintf("tgk:wait:%d", i)
				// A lease that expires by itself while the transaction
				// holds it checked (multilock's rows cannot be changed
				// meanwhile: FOR SHARE). Its TTL doubles when the machine
				// was too slow to check it before its expiry.
				var (
					tx  *sql.Tx
					pid int
					h   txguard.Held
				)
				for ttl := 2 * time.Second; ; ttl *= 2 {
					l := e.lock(k, key, ttl)
					var err error
					tx, pid = e.begin()
					if h, err = e.g.HoldLease(e.ctx, tx, l); err == nil {
						break
					}
					if !errors.Is(err, syncguard.ErrLockLost) || ttl > time.Minute {
						t.Fatalf("HoldLease: %v", err)
					}
					_ = tx.Rollback()
					l.(interface{ Close() }).Close()
				}
				// Wait, on the server's clock, until takers see it expired
				// (past the tolerance).
				for {
					var now int64
					if err := e.db.QueryRowContext(e.ctx, `SELECT `+rules.NowMsSQL).Scan(&now); err != nil {
						t.Fatal(err)
					}
					if now > h.ExpiresAt.UnixMilli()+rules.ToleranceMs {
						break
					}
					time.Sleep(50 * time.Millisecond)
				}
				done := async(func() error {
					r, err := k.take(&e, key)
					if err == nil && !r.OK {
						err = fmt.Errorf("the takeover after the commit found the key held (%s)", r.Reason)
					}
					return err
				})
				waitBlocked(t, e.ctx, e.db, pid, k.name+" takeover")
				select {
				case err := <-done:
					t.Fatalf("the takeover returned while the transaction held the expired lease checked: %v", err)
				default:
				}
				if err := tx.Commit(); err != nil {
					t.Fatal(err)
				}
				if err := <-done; err != nil {
					t.Fatal(err)
				}
			})
		})
	}
}

// unwrapper is a wrapper of the caller's own that unwraps.
type unwrapper struct{ syncguard.LockBackend }

func (u unwrapper) Unwrap() syncguard.LockBackend { return u.LockBackend }

func TestTxGuardKindsPQ(t *testing.T)  { runTxGuardKinds(t, pqDriver) }
func TestTxGuardKindsPGX(t *testing.T) { runTxGuardKinds(t, pgxDriver) }

// TestTxGuardKindsRefusedBeforeIO: a lease of a Locker HoldLease does not
// know, or of another Config's tables, is InvalidArgument before any I/O
// (a nil tx would fail the query otherwise).
func TestTxGuardKindsRefusedBeforeIO(t *testing.T) {
	e := newTKEnv(t, pgxDriver)
	other := e.cfg
	other.TableName += "_x"
	g2, err := txguard.New(e.db, &other)
	if err != nil {
		t.Fatal(err)
	}
	// A wrapper that unwraps is seen through: its lease is checked.
	wl, err := syncguard.Lock(e.ctx, unwrapper{e.b}, "tgk:wrapped", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer wl.Close()
	tx, _ := e.begin()
	if h, err := e.g.HoldLease(e.ctx, tx, wl); err != nil || h.Fence != wl.Fence() {
		t.Fatalf("HoldLease of a lease of a wrapper: %+v, %v", h, err)
	}
	for _, k := range tkKinds {
		l := e.lock(k, "tgk:other:"+k.name, time.Minute)
		_, err := g2.HoldLease(e.ctx, nil, l)
		var se *syncguard.Error
		if !errors.As(err, &se) || se.Code != syncguard.ErrInvalidArgument || errors.Is(err, syncguard.ErrLockLost) || !strings.Contains(se.Msg, "this Guard checks") {
			t.Errorf("%s: HoldLease through a Guard of other tables: %v, want InvalidArgument naming the tables", k.name, err)
		}
	}
}

// TestTxGuardMultiLockFunctionKey: the set's SQL function returns the
// fence of the key it is given, each key its own, and a key not in the
// set is an error of its own (22023), not a lost lease.
func TestTxGuardMultiLockFunctionKey(t *testing.T) {
	e := newTKEnv(t, pgxDriver)
	set, err := multilock.Lock(e.ctx, e.ml, []string{"tgk:fn:b", "tgk:fn:a"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	q := `SELECT ` + rules.QuoteIdent(e.cfg.TableName+"_ml_hold") + `($1, $2)`
	for _, kf := range set.Fences() {
		var got int64
		if err := e.db.QueryRowContext(e.ctx, q, set.LockID(), kf.Key).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if want, _ := kf.Fence.Int64(); got != want {
			t.Errorf("%s(%s) = %d, want %d", q, kf.Key, got, want)
		}
	}
	var got int64
	err = e.g.Classify(e.ctx, e.db.QueryRowContext(e.ctx, q, set.LockID(), "tgk:fn:c").Scan(&got))
	var se *syncguard.Error
	if !errors.As(err, &se) || se.SQLState != "22023" || errors.Is(err, syncguard.ErrLockLost) {
		t.Fatalf("%s with a key not in the set: %v, want 22023 and not a lost lease", q, err)
	}
}
