package itest_test

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/syncguard/syncguard-go/doctor"
	"github.com/syncguard/syncguard-go/internal/rules"
	"github.com/syncguard/syncguard-go/internal/waiting"
	"github.com/syncguard/syncguard-go/syncguard"
	"github.com/syncguard/syncguard-go/tests/pgtest"
)

// listeners counts the server's sessions whose last statement was a
// LISTEN: the sessions every notifying commit in a database wakes.
func listeners(ctx context.Context, t *testing.T, admin *sql.DB) int {
	var n int
	if err := admin.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'LISTEN %'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestOnlyWaitersNearTheHeadListen: eight waiters, each on a pool of its
// own, queue behind a holder. Only those within three of the head open a
// listening session (four), the rest wait without one; when the holder
// lets go they all get the key, the four near the head first and in
// arrival order, the later ones listening as the queue brings them near
// (a waiter far back that is asleep when its turn comes keeps its place,
// not its turn: design.md, "Waiting at scale").
func TestOnlyWaitersNearTheHeadListen(t *testing.T) {
	e := newWaitEnv(t, "near_head")
	holder := e.backend()
	first, err := holder.Acquire(e.ctx, "nh:key", time.Minute)
	if err != nil || !first.OK {
		t.Fatal(first, err)
	}
	base := listeners(e.ctx, t, e.admin)
	const n = 8
	fences := make([]syncguard.Fence, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		b := e.backend()
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := syncguard.Lock(e.ctx, b, "nh:key", &syncguard.LockOptions{TTL: 10 * time.Second, Acquisition: syncguard.AcquisitionOptions{Timeout: -1}})
			if err != nil {
				errs <- err
				return
			}
			fences[i] = l.Fence()
			time.Sleep(20 * time.Millisecond)
			l.Close()
		}()
		// The next waiter arrives once this one is queued (its row).
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(5 * time.Millisecond) {
			var q int
			if err := e.admin.QueryRowContext(e.ctx, `SELECT count(*) FROM near_head_locks_waiters`).Scan(&q); err != nil {
				t.Fatal(err)
			}
			if q > i || time.Now().After(deadline) {
				break
			}
		}
	}
	// Listening sessions settle at the four nearest the head, never more.
	most, last := 0, 0
	for range 40 {
		last = listeners(e.ctx, t, e.admin) - base
		most = max(most, last)
		time.Sleep(25 * time.Millisecond)
	}
	if most > 4 || last != 4 {
		t.Errorf("rule: only waiters within 3 of the head hold a listening session: %d listening now, at most %d seen; want 4", last, most)
	}
	if r, err := holder.Release(e.ctx, first.LockID); err != nil || !r.OK {
		t.Fatal(r, err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("rule: every waiter gets the key: %v", err)
	}
	if !slices.IsSorted(fences[:4]) || slices.Max(fences[:4]) > slices.Min(fences[4:]) {
		t.Fatalf("rule: the waiters near the head get the key first, in arrival order; fences in arrival order: %v", fences)
	}
}

// TestNotifyDBOnADatabaseOfItsOwn: with Config.NotifyDB on another
// database, a release hands the key to the waiter in its commit and wakes
// it through that database: a session LISTENing on the key's channel in
// the lock database (another program's, paying for every notifying commit
// there) hears nothing, one in the notification database hears the
// wake-up.
func TestNotifyDBOnADatabaseOfItsOwn(t *testing.T) {
	e := newWaitEnv(t, "notify_db")
	srv := pgtest.Require(t)
	notifyDSN, err := srv.CreateDatabase(e.ctx, "syncguard_notify_test")
	if err != nil {
		t.Fatal(err)
	}
	e.cfg.NotifyDB = open(t, notifyDSN)
	holder, waiter := e.backend(), e.backend()
	if st := waiter.NotificationStatus(e.ctx); !st.Active {
		t.Fatalf("setup: notifications through NotifyDB: %+v", st)
	}
	k, err := rules.DeriveKey("nd:key")
	if err != nil {
		t.Fatal(err)
	}
	channel := waiting.Channel(waiting.Prefix(e.cfg.TableName), k.Storage)
	listen := func(dsn string) *pgx.Conn {
		c, err := pgx.Connect(e.ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close(context.Background()) })
		if _, err := c.Exec(e.ctx, `LISTEN "`+channel+`"`); err != nil {
			t.Fatal(err)
		}
		return c
	}
	inLockDB, inNotifyDB := listen(e.dsn), listen(notifyDSN)

	if handed := e.handOff(holder, waiter, "nd:key", "notify_db_locks_waiters"); handed <= 0 {
		t.Errorf("rule: the release hands the key to the notified waiter in its commit (HandedOver %v)", handed)
	}
	wctx, cancel := context.WithTimeout(e.ctx, 10*time.Second)
	defer cancel()
	if n, err := inNotifyDB.WaitForNotification(wctx); err != nil || n.Channel != channel {
		t.Errorf("rule: the wake-up travels through NotifyDB's database: %v %v", n, err)
	}
	qctx, cancel2 := context.WithTimeout(e.ctx, 200*time.Millisecond)
	defer cancel2()
	if n, err := inLockDB.WaitForNotification(qctx); err == nil {
		t.Errorf("rule: with NotifyDB no notification is sent in the lock database (its listeners pay for each); got %+v", n)
	}
}

// TestNotifyDBBehindATransactionPooler: the lock pool goes through
// PgBouncer in transaction mode, NotifyDB straight to PostgreSQL. Waiting
// is woken (not polling), doctor.Check says so, and a release hands the
// waiter the key.
func TestNotifyDBBehindATransactionPooler(t *testing.T) {
	srv := pgtest.Require(t)
	if srv.Kind == pgtest.KindEnv {
		t.Skip("PgBouncer is started in front of a local or docker server only")
	}
	e := newWaitEnv(t, "notify_pooler")
	bouncer := pgtest.RequirePgBouncer(t, srv, pgtest.PgBouncerOptions{PoolMode: "transaction", DefaultPoolSize: 4})
	e.dsn = bouncer.DSN + "&default_query_exec_mode=exec"
	e.cfg.DisablePrepare = true
	e.cfg.NotifyDB = open(t, srv.DSN)
	report, err := doctor.Check(e.ctx, open(t, e.dsn), e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range report.Findings {
		if f.Check == "notifications" && (f.Status != "ok" || !strings.Contains(f.Detail, "NotifyDB")) {
			t.Errorf("rule: behind a transaction pooler with NotifyDB direct, the notifications check passes and names NotifyDB; got %+v", f)
		}
	}
	holder, waiter := e.backend(), e.backend()
	if handed := e.handOff(holder, waiter, "np:key", "notify_pooler_locks_waiters"); handed <= 0 {
		t.Errorf("rule: behind the pooler, the release hands the key to the waiter its NotifyDB listener made notified (HandedOver %v)", handed)
	}
}

// TestWaiterQueuedWhileAReleaseWasInFlight: a release whose statement took
// its snapshot before a waiter queued does not see the waiter's row, and
// leaves the key free without a hint. The waiter, queued behind what was
// a live lock, keeps its scheduled retries for its first 2 s and takes the
// key then, not at its renewal 10 s later. The release is held in flight
// by a row lock on the lock row, taken before the waiter queues.
func TestWaiterQueuedWhileAReleaseWasInFlight(t *testing.T) {
	e := newWaitEnv(t, "inflight")
	holder, waiter := e.backend(), e.backend()
	// The key's channel is listened on before the waiter's first attempt
	// (a watcher): no signal that its LISTEN took effect comes after it.
	watched, err := waiter.WatchKey(e.ctx, "if:key")
	if err != nil {
		t.Fatal(err)
	}
	<-watched
	held, err := holder.Acquire(e.ctx, "if:key", time.Minute)
	if err != nil || !held.OK {
		t.Fatal(held, err)
	}
	k, err := rules.DeriveKey("if:key")
	if err != nil {
		t.Fatal(err)
	}
	tx, err := e.admin.BeginTx(e.ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(e.ctx, `SELECT 1 FROM inflight_locks WHERE key = $1 FOR UPDATE`, k.Storage); err != nil {
		t.Fatal(err)
	}
	released := make(chan error, 1)
	go func() {
		r, err := holder.Release(e.ctx, held.LockID)
		if err == nil && !r.OK {
			err = fmt.Errorf("release: %+v", r)
		}
		released <- err
	}()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(5 * time.Millisecond) {
		var n int
		_ = e.admin.QueryRowContext(e.ctx, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%DELETE FROM%'`).Scan(&n)
		if n > 0 || time.Now().After(deadline) {
			break
		}
	}
	queued := make(chan struct{})
	var once sync.Once
	got := make(chan time.Time, 1)
	go func() {
		l, err := syncguard.Lock(e.ctx, waiter, "if:key", &syncguard.LockOptions{Acquisition: syncguard.AcquisitionOptions{Timeout: time.Minute},
			OnAttempt: func(r syncguard.AcquireResult, err error) {
				if err == nil && !r.OK {
					once.Do(func() { close(queued) })
				}
			}})
		if err != nil {
			t.Error(err)
			got <- time.Time{}
			return
		}
		at := time.Now()
		l.Close()
		got <- at
	}()
	<-queued
	freed := time.Now()
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := <-released; err != nil {
		t.Fatal(err)
	}
	if at := <-got; at.IsZero() || at.Sub(freed) > 8*time.Second {
		t.Errorf("rule: a waiter that queued while a release was in flight takes the freed key on its retries (within its first 2 s), not at its renewal (10 s); took %v", at.Sub(freed))
	}
}

// handOff: holder takes key, waiter waits for it with Lock, and once the
// waiter's row in the waiters table says it is notified,
// holder releases; it returns the HandedOver of the waiter's successful
// attempt (0: it took the key itself rather than being handed it).
func (e *waitEnv) handOff(holder, waiter *syncguard.Backend, key, waiters string) time.Duration {
	t := e.t
	held, err := holder.Acquire(e.ctx, key, time.Minute)
	if err != nil || !held.OK {
		t.Fatal(held, err)
	}
	var handed time.Duration
	got := make(chan error, 1)
	go func() {
		l, err := syncguard.Lock(e.ctx, waiter, key, &syncguard.LockOptions{Acquisition: syncguard.AcquisitionOptions{Timeout: -1},
			OnAttempt: func(r syncguard.AcquireResult, _ error) { handed = r.HandedOver }})
		if err == nil {
			l.Close()
		}
		got <- err
	}()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(5 * time.Millisecond) {
		var notified bool
		_ = e.admin.QueryRowContext(e.ctx, `SELECT bool_or(notified) FROM `+waiters).Scan(&notified)
		if notified || time.Now().After(deadline) {
			break
		}
	}
	if r, err := holder.Release(e.ctx, held.LockID); err != nil || !r.OK {
		t.Fatal(r, err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	return handed
}
