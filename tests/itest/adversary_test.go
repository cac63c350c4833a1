package itest_test

import (
	"context"
	"database/sql"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/syncguard/syncguard-go/internal/rules"
	"github.com/syncguard/syncguard-go/pgxstd"
	sgpq "github.com/syncguard/syncguard-go/pq"
	"github.com/syncguard/syncguard-go/syncguard"
)

// The adversary suite (issue 26): a role with nothing but CONNECT tries
// what any such role can do to the locks of another (advisory locks,
// pg_locks and pg_stat_activity, holding xmin back), while the lock
// tables' users run as a role with plain DML grants (not a superuser), on
// each adapter. Forged and replayed notifications are
// TestForgedNotificationsChangeNothing's; a full notification queue is
// syncguard's TestReleaseCommitsWhenTheNotificationQueueIsFull (filling
// PostgreSQL's 8 GB queue takes minutes).
func TestAdversary(t *testing.T) {
	srv := roleServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	admin := open(t, srv.DSN)
	cfg := &syncguard.Config{TableName: "adv_locks", FenceTableName: "adv_fences"}
	drop := `DROP TABLE IF EXISTS adv_locks, adv_fences, adv_locks_waiters, adv_locks_holders`
	mustExec(ctx, t, admin, drop)
	if err := syncguard.SetupSchema(ctx, admin, cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = admin.Exec(drop) })
	appDSN := roleWithoutCreate(ctx, t, srv, admin, "sg_adv_app", "sg-adv-app-pw")
	mustExec(ctx, t, admin, `GRANT SELECT, INSERT, UPDATE, DELETE ON adv_locks, adv_fences, adv_locks_waiters, adv_locks_holders TO sg_adv_app`)
	evilDSN := roleWithoutCreate(ctx, t, srv, admin, "sg_adv_evil", "sg-adv-evil-pw")
	evil := open(t, evilDSN)
	evil.SetMaxOpenConns(50)

	adapters := []struct {
		name string
		open func(t *testing.T) *sql.DB
	}{
		{"pgx", func(t *testing.T) *sql.DB { // as docs/failure-model.md recommends for short waits
			c, err := pgxstd.NewConnector(appDSN)
			if err != nil {
				t.Fatal(err)
			}
			db := sql.OpenDB(c)
			t.Cleanup(func() { db.Close() })
			return db
		}},
		{"pq", func(t *testing.T) *sql.DB {
			c, err := sgpq.NewConnector(appDSN)
			if err != nil {
				t.Fatal(err)
			}
			db := sql.OpenDB(c)
			t.Cleanup(func() { db.Close() })
			return db
		}},
	}
	for _, a := range adapters {
		t.Run(a.name, func(t *testing.T) {
			var lastDB *sql.DB
			backend := func() *syncguard.Backend {
				lastDB = a.open(t)
				b, err := syncguard.New(lastDB, cfg)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { b.Close() })
				return b
			}
			key := func(k string) string { return a.name + ":" + k }
			t.Run("AdvisoryLocksHeldByAnyRoleChangeNoAcquisition", func(t *testing.T) {
				advisoryLocksChangeNothing(ctx, t, admin, evil, backend, func() *sql.DB { return lastDB }, key)
			})
			t.Run("CrashedHolderReplacedWhileAdvisoryLocksAreHeld", func(t *testing.T) {
				crashedHolderReplaced(ctx, t, admin, evil, backend, key)
			})
			t.Run("KeysLearnedFromPgLocksAreHeldInVain", func(t *testing.T) {
				learnedFromPgLocks(ctx, t, evil, backend, key)
			})
			t.Run("WaitersWithShortTimeoutsDoNotStarveTheKey", func(t *testing.T) {
				shortTimeouts(ctx, t, admin, backend, key)
			})
			t.Run("PreparedTransactionsStallNothing", func(t *testing.T) {
				preparedTransactionsStallNothing(ctx, t, admin, evil, a.open(t), backend, key)
			})
			t.Run("HeldIdsSetNoPriceOnAcquire", func(t *testing.T) {
				heldIdsSetNoPrice(ctx, t, evil, backend, func() *sql.DB { return lastDB }, key)
			})
			t.Run("RolledBackWithTxLeavesOneExpiredRowPerKey", func(t *testing.T) {
				rolledBackWithTxRows(ctx, t, admin, evil, backend, func() *sql.DB { return lastDB }, key)
			})
			t.Run("XminHeldBackLosesNothing", func(t *testing.T) {
				xminHeldBack(ctx, t, evil, backend, key)
			})
		})
	}
}

// holdAdvisory takes, on a connection of its own of db, the session-level
// advisory lock an acquire of key tries (the spec's hashtext(storage
// key)), exclusive or shared, and holds it until the test ends.
func holdAdvisory(ctx context.Context, t *testing.T, db *sql.DB, key string, shared bool) {
	t.Helper()
	norm, err := rules.NormalizeKey(key)
	if err != nil {
		t.Fatal(err)
	}
	storage, _, _ := rules.StorageKeys(norm)
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	fn := map[bool]string{false: "pg_try_advisory_lock", true: "pg_try_advisory_lock_shared"}[shared]
	var ok bool
	if err := conn.QueryRowContext(ctx, `SELECT `+fn+`(hashtext($1))`, storage).Scan(&ok); err != nil || !ok {
		t.Fatalf("the attacker could not take the advisory lock of %q: %v, %v", key, ok, err)
	}
}

func advisoryLocksChangeNothing(ctx context.Context, t *testing.T, admin, evil *sql.DB, backend func() *syncguard.Backend, db func() *sql.DB, key func(string) string) {
	b := backend()
	never, cycled, shared, inTx, ref := key("never-taken"), key("cycled"), key("shared"), key("in-tx"), key("reference")
	for _, k := range []string{never, cycled, inTx, ref} {
		holdAdvisory(ctx, t, evil, k, false)
	}
	holdAdvisory(ctx, t, evil, shared, true)

	// A key never taken, a key taken and released again and again, a key
	// whose advisory lock is held shared: every single attempt succeeds.
	var last syncguard.Fence
	for i := range 20 {
		for _, k := range []string{never, cycled, shared} {
			if i > 0 && k == never {
				continue
			}
			r, err := b.Acquire(ctx, k, time.Minute)
			if err != nil || !r.OK {
				t.Fatalf("attempt %d on %q, a free key whose advisory lock another role holds: %+v, %v; want it taken (rule: no role without privileges can stall a key)", i, k, r, err)
			}
			if k == cycled {
				if r.Fence <= last {
					t.Fatalf("fence %s after %s: fences must increase", r.Fence, last)
				}
				last = r.Fence
			}
			if rr, err := b.Release(ctx, r.LockID); err != nil || !rr.OK {
				t.Fatalf("release: %+v, %v", rr, err)
			}
		}
	}

	// A waiting Lock too: a queued waiter answers its first such attempt
	// locked (the holder is usually a racing acquire) and writes the
	// placeholder at its second.
	queued := key("queued")
	holdAdvisory(ctx, t, evil, queued, false)
	if l, err := syncguard.Lock(ctx, b, queued, &syncguard.LockOptions{TTL: time.Minute, Acquisition: syncguard.AcquisitionOptions{Timeout: 30 * time.Second}}); err != nil {
		t.Fatalf("a waiting Lock of a free key whose advisory lock another role holds: %v; want it taken (rule: no role without privileges can stall a key)", err)
	} else if _, err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}

	// Inside the caller's transaction too.
	tx, err := db().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	r, err := b.WithTx(tx).Acquire(ctx, inTx, time.Minute)
	if err != nil || !r.OK {
		_ = tx.Rollback()
		t.Fatalf("acquire inside a transaction of a key whose advisory lock another role holds: %+v, %v", r, err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}

	// A session of a role that may write the lock tables holding the same
	// advisory lock in a transaction is what an acquire of the reference
	// implementation in flight looks like: that one still excludes ours.
	// (The attacker holds it too, shared by nobody: admin takes another
	// key's lock id here, so use a key the attacker does not hold.)
	refKey := key("reference-inflight")
	norm, _ := rules.NormalizeKey(refKey)
	storage, _, _ := rules.StorageKeys(norm)
	rtx, err := admin.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rtx.Rollback() //nolint:errcheck
	if _, err := rtx.ExecContext(ctx, `SELECT pg_advisory_xact_lock(hashtext($1))`, storage); err != nil {
		t.Fatal(err)
	}
	r, err = b.Acquire(ctx, refKey, time.Minute)
	if err != nil || r.OK {
		t.Fatalf("acquire while a privileged session holds the key's advisory lock (a reference acquire in flight): %+v, %v; want locked", r, err)
	}
	var rows int
	if err := admin.QueryRowContext(ctx, `SELECT count(*) FROM adv_locks WHERE key = $1`, storage).Scan(&rows); err != nil || rows != 0 {
		t.Fatalf("that attempt wrote %d rows (%v); want none", rows, err)
	}
	if err := rtx.Commit(); err != nil {
		t.Fatal(err)
	}
	if r, err = b.Acquire(ctx, refKey, time.Minute); err != nil || !r.OK {
		t.Fatalf("acquire once the privileged session committed: %+v, %v", r, err)
	}
}

func crashedHolderReplaced(ctx context.Context, t *testing.T, admin, evil *sql.DB, backend func() *syncguard.Backend, key func(string) string) {
	k := key("crash")
	holdAdvisory(ctx, t, evil, k, false)
	const ttl = 2 * time.Second
	crashed, err := backend().Acquire(ctx, k, ttl) // never extended nor released: a crash
	if err != nil || !crashed.OK {
		t.Fatalf("acquire: %+v, %v", crashed, err)
	}
	var firstAt int64
	if err := admin.QueryRowContext(ctx, `SELECT acquired_at_ms FROM adv_locks WHERE lock_id = $1`, crashed.LockID).Scan(&firstAt); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	takenAt := make(chan int64, 3)
	for range 3 {
		b := backend()
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := syncguard.WithLock(ctx, b, k, func(ctx context.Context, l *syncguard.Lease) error {
				var at int64
				err := admin.QueryRowContext(ctx, `SELECT acquired_at_ms FROM adv_locks WHERE lock_id = $1`, l.LockID()).Scan(&at)
				takenAt <- at
				return err
			}, &syncguard.LockOptions{TTL: time.Minute, Acquisition: syncguard.AcquisitionOptions{Timeout: time.Minute}})
			if err != nil {
				t.Errorf("waiter: %v; want the key once the crashed holder's lock expired", err)
			}
		}()
	}
	wg.Wait()
	close(takenAt)
	first := int64(1 << 62)
	for at := range takenAt {
		first = min(first, at)
	}
	gap := time.Duration(first-firstAt) * time.Millisecond
	t.Logf("crashed holder (TTL %v) replaced %v after it acquired, by the server's clock", ttl, gap)
	// A lock is live until expiry + 1 s (the spec's tolerance); a stalled
	// key would time the waiters out after a minute instead.
	if gap > ttl+2*time.Second+5*time.Second {
		t.Errorf("crashed holder replaced %v after it acquired; want within TTL + 2 s (load allowance 5 s)", gap)
	}
}

// learnedFromPgLocks: the attacker polls pg_locks for advisory locks taken
// by others (the ids of the keys in use) and takes each one it sees, for
// good, while three processes take turns on a key.
func learnedFromPgLocks(ctx context.Context, t *testing.T, evil *sql.DB, backend func() *syncguard.Backend, key func(string) string) {
	k := key("learned")
	attack, stop := context.WithCancel(ctx)
	var grabbed atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		conn, err := evil.Conn(attack)
		if err != nil {
			return
		}
		defer conn.Close()
		for attack.Err() == nil {
			var n int64
			// Ids held by others (not by this session), taken when free.
			err := conn.QueryRowContext(attack, `SELECT count(*) FROM (
  SELECT pg_try_advisory_lock(((l.classid::bigint << 32) | l.objid::bigint)) AS ok
  FROM (SELECT DISTINCT classid, objid FROM pg_locks
        WHERE locktype = 'advisory' AND objsubid = 1 AND pid <> pg_backend_pid()) AS l) AS x WHERE x.ok`).Scan(&n)
			if err == nil {
				grabbed.Add(n)
			}
		}
	}()
	defer func() { stop(); wg.Wait() }()
	var holds atomic.Int64
	var work sync.WaitGroup
	for range 3 {
		b := backend()
		work.Add(1)
		go func() {
			defer work.Done()
			for range 15 {
				err := syncguard.WithLock(ctx, b, k, func(context.Context, *syncguard.Lease) error {
					holds.Add(1)
					time.Sleep(5 * time.Millisecond)
					return nil
				}, &syncguard.LockOptions{TTL: 10 * time.Second, Acquisition: syncguard.AcquisitionOptions{Timeout: time.Minute}})
				if err != nil {
					t.Errorf("a worker's turn: %v (rule: ids learned from pg_locks stall nothing)", err)
					return
				}
			}
		}()
	}
	work.Wait()
	t.Logf("%d holds while the attacker took %d advisory locks it saw in pg_locks", holds.Load(), grabbed.Load())
	if holds.Load() != 45 {
		t.Errorf("%d holds of 45", holds.Load())
	}
}

// shortTimeouts: six workers loop Lock with timeouts of 1 to 31 ms (in
// units of one worker's uncontended cycle when that is longer). Each
// one that gives up passes its turn on, so the key is taken, not left free
// behind queue rows of waiters that left; compared with one worker alone
// over the same time on the same machine.
func shortTimeouts(ctx context.Context, t *testing.T, admin *sql.DB, backend func() *syncguard.Backend, key func(string) string) {
	var gapMu sync.Mutex
	var last time.Time
	var maxGap time.Duration // the longest time without a hold starting, in the six-worker run
	unit := time.Millisecond // the timeouts are 1 to 31 units
	run := func(k string, workers int, d time.Duration) (holds, timeouts int64) {
		var h, to atomic.Int64
		start := time.Now()
		end := start.Add(d)
		last = start
		var wg sync.WaitGroup
		for w := range workers {
			b := backend()
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := rand.New(rand.NewPCG(uint64(w), 7))
				for time.Now().Before(end) {
					lease, err := syncguard.Lock(ctx, b, k, &syncguard.LockOptions{TTL: 10 * time.Second,
						Acquisition: syncguard.AcquisitionOptions{Timeout: time.Duration(1+r.IntN(31)) * unit}})
					switch {
					case errors.Is(err, syncguard.ErrAcquisitionTimeout), errors.Is(err, syncguard.ErrNetworkTimeout):
						// (NetworkTimeout: the wait ended while an attempt's
						// statement was out, its answer unknown.)
						to.Add(1)
					case err != nil:
						t.Errorf("Lock: %v", err)
						return
					default:
						h.Add(1)
						gapMu.Lock()
						maxGap, last = max(maxGap, time.Since(last)), time.Now()
						gapMu.Unlock()
						lease.Close()
					}
				}
			}()
		}
		wg.Wait()
		return h.Load(), to.Load()
	}
	const d = 4 * time.Second
	// One worker's Lock-and-Close cycle: about 1 ms on a quiet machine
	// without -race, where the timeouts are the 1 to 31 ms; a
	// slower machine (or -race) stretches the unit by as much, so that a
	// timeout is as many round trips as there. The load of a shared
	// machine can change between the two runs (at load 30 a statement
	// took longer than every timeout, and no wait ended with the key): a
	// pair that falls under the bound below is measured again, up to
	// three times; the starvation it guards against fails all three.
	var alone, holds, timeouts int64
	var s0, s1 int64 // connections opened (pgx closes a connection whose statement a deadline cuts; see pgxstd.NewConnector)
	sessions := `SELECT sessions FROM pg_stat_database WHERE datname = current_database()`
	for try := 1; ; try++ {
		unit = time.Millisecond
		alone, _ = run(key("short-alone"), 1, d)
		maxGap = 0
		unit = max(time.Millisecond, d/time.Duration(max(alone, 1)))
		_ = admin.QueryRowContext(ctx, sessions).Scan(&s0)
		holds, timeouts = run(key("short-six"), 6, d)
		_ = admin.QueryRowContext(ctx, sessions).Scan(&s1)
		if holds*100 >= alone || try == 3 {
			break
		}
		t.Logf("try %d: six workers got %d holds, one worker alone %d: measuring again", try, holds, alone)
	}
	t.Logf("%d connections opened during the six-worker run", s1-s0)
	// Every waiter that gave up left the queue: no live row of one stands
	// before later waiters (an attempt still in flight when its waiter
	// withdrew finds a tombstone and queues nothing).
	// A wait whose last attempt got no answer leaves in the background
	// (Lock returns at its Timeout): the rows go within the release
	// timeout (5 s), a bound only a waiter that never leaves exceeds.
	var live int
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if err := admin.QueryRowContext(ctx, `SELECT count(*) FROM adv_locks_waiters
		WHERE user_key = $1 AND deadline_ms > (extract(epoch FROM clock_timestamp()) * 1000)::bigint`, key("short-six")).Scan(&live); err != nil {
			t.Fatal(err)
		}
		if live == 0 || time.Now().After(end) {
			break
		}
	}
	if live != 0 {
		t.Errorf("%d live queue rows after every waiter gave up; want 0 (rule: a waiter that leaves passes the turn on)", live)
	}
	t.Logf("one worker: %d holds; six workers with timeouts of 1 to 31 x %v: %d holds, %d timeouts (%.2fx), longest time without a hold %v",
		alone, unit.Round(10*time.Microsecond), holds, timeouts, float64(holds)/float64(max(alone, 1)), maxGap.Round(time.Millisecond))
	// The starvation this guards against gave 0 holds (0 of 2,813). The
	// ratio itself is a speed, measured, not asserted (docs/failure-model.md:
	// 0.06x to 0.38x, 0.08x with both cores kept busy by a build loop): a
	// hundredth is a bound only that bug falls under, however busy the
	// machine.
	if holds*100 < alone {
		t.Errorf("six workers with short timeouts got %d holds, one worker alone %d: waiters that give up must pass the turn on", holds, alone)
	}
}

// xminHeldBack: the attacker keeps a snapshot open (REPEATABLE READ, idle
// in transaction), which keeps every dead row of the lock tables from
// being vacuumed; hand-offs go on, nothing is lost, fences increase.
func xminHeldBack(ctx context.Context, t *testing.T, evil *sql.DB, backend func() *syncguard.Backend, key func(string) string) {
	tx, err := evil.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback() //nolint:errcheck
	if _, err := tx.ExecContext(ctx, `SELECT count(*) FROM pg_class`); err != nil {
		t.Fatal(err)
	}
	k := key("xmin")
	var mu sync.Mutex
	var fences []syncguard.Fence
	var wg sync.WaitGroup
	for range 2 {
		b := backend()
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				err := syncguard.WithLock(ctx, b, k, func(_ context.Context, l *syncguard.Lease) error {
					mu.Lock()
					defer mu.Unlock()
					fences = append(fences, l.Fence())
					return nil
				}, &syncguard.LockOptions{TTL: 10 * time.Second, Acquisition: syncguard.AcquisitionOptions{Timeout: time.Minute}})
				if err != nil {
					t.Errorf("hand-off with xmin held back: %v", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if len(fences) != 200 {
		t.Fatalf("%d holds of 200", len(fences))
	}
	for i := 1; i < len(fences); i++ {
		if fences[i] <= fences[i-1] {
			t.Fatalf("fence %s after %s (rule: fences strictly increase)", fences[i], fences[i-1])
		}
	}
}
