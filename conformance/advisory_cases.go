package conformance

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/syncguard/syncguard-go/advisory"
	"github.com/syncguard/syncguard-go/internal/rules"
	"github.com/syncguard/syncguard-go/syncguard"
)

// advCancelBudget is the longest a cancelled lock wait may take to return
// on the reference machine (the suite's waits scale it by the slowdown).
const advCancelBudget = 500 * time.Millisecond

func init() {
	registerAdvisory("Advisory/TxLockExcludesAcrossPools", func(e *sqlEnv) {
		// The document's booking race: check-then-insert under
		// pg_advisory_xact_lock, from many goroutines on several pools.
		// Exactly one booking per tenant and date, and never two holders
		// inside the critical section.
		a := newAdvEnv(e)
		table := rules.QuoteIdent(suiteTable("bookings"))
		e.exec(`CREATE TABLE ` + table + ` (tenant text NOT NULL, day text NOT NULL, by_worker int NOT NULL)`)
		e.t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, _ = e.db.ExecContext(ctx, `DROP TABLE IF EXISTS `+table)
		})
		booking := a.reg.MustDeclare(advisory.Decl{Name: "booking.create", Kind: advisory.Transaction,
			Params: []string{"tenantId", "date"}, Purpose: "Booking creation race prevention"})
		const pools, workers = 4, 16
		lockers := []*advisory.Client{a.l, a.l2}
		dbs := []*sql.DB{e.db, e.db2}
		for len(dbs) < pools {
			db := e.h.Open(e.t)
			dbs, lockers = append(dbs, db), append(lockers, a.locker(db))
		}
		days := []string{"2025-01-15", "2025-01-16", "2025-01-17"}
		inside := make([]atomic.Int32, len(days))
		var wg sync.WaitGroup
		start := make(chan struct{})
		for w := 0; w < workers; w++ {
			for d, day := range days {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					i := (w + d) % pools
					if err := advBook(e.ctx, dbs[i], lockers[i], booking, table, day, w, &inside[d]); err != nil {
						e.t.Errorf("rule: a booking transaction under LockTx succeeds; worker %d day %s: %v", w, day, err)
					}
				}()
			}
		}
		close(start)
		wg.Wait()
		for d, day := range days {
			if n := inside[d].Load(); n < 0 {
				e.t.Errorf("rule: two transactions never hold the same advisory lock; day %s saw overlap", day)
			}
			var n int
			e.must(e.db.QueryRowContext(e.ctx, `SELECT count(*) FROM `+table+` WHERE tenant = 't1' AND day = $1`, day).Scan(&n), "count bookings")
			if n != 1 {
				e.t.Errorf("rule: under LockTx, check-then-insert creates exactly one booking per tenant and date; day %s has %d", day, n)
			}
		}
	})

	registerAdvisory("Advisory/TxLockReleasedOnCommitAndRollback", func(e *sqlEnv) {
		a := newAdvEnv(e)
		for _, end := range []string{"commit", "rollback"} {
			key := a.advKey("end-" + end)
			tx1 := a.begin(e.db)
			e.must(a.l.LockTx(e.ctx, tx1, key), "LockTx of a free key")
			tx2 := a.begin(e.db2)
			if got, err := a.l2.TryLockTx(e.ctx, tx2, key); err != nil || got {
				e.t.Errorf("rule: a transaction lock excludes other sessions; TryLockTx on the second pool = %v, %v", got, err)
			}
			if !e.h.NoSessionState {
				if _, ok, err := a.l2.TryLockSession(e.ctx, key); err != nil || ok {
					e.t.Errorf("rule: a transaction lock excludes session locks on the same key; TryLockSession = %v, %v", ok, err)
				}
			}
			if end == "commit" {
				e.must(tx1.Commit(), "Commit")
			} else {
				e.must(tx1.Rollback(), "Rollback")
			}
			if got, err := a.l2.TryLockTx(e.ctx, tx2, key); err != nil || !got {
				e.t.Errorf("rule: %s releases a transaction lock; TryLockTx afterwards = %v, %v", end, got, err)
			}
			// Re-entrant within the holding transaction.
			if got, err := a.l2.TryLockTx(e.ctx, tx2, key); err != nil || !got {
				e.t.Errorf("rule: the holding transaction may take its lock again; got %v, %v", got, err)
			}
			e.must(tx2.Rollback(), "Rollback")
		}
	})

	registerAdvisory("Advisory/SessionLockExcludesAcrossPools", func(e *sqlEnv) {
		e.needSessionState("session-level advisory locks")
		a := newAdvEnv(e)
		key := a.advKey("session")
		lock, err := a.l.LockSession(e.ctx, key)
		e.must(err, "LockSession of a free key")
		if _, ok, err := a.l2.TryLockSession(e.ctx, key); err != nil || ok {
			e.t.Errorf("rule: a session lock excludes other sessions; TryLockSession = %v, %v", ok, err)
		}
		c := a.advConn(e.db2)
		if _, ok, err := a.l2.TryLockConn(e.ctx, c, key); err != nil || ok {
			e.t.Errorf("rule: a session lock excludes other sessions; TryLockConn = %v, %v", ok, err)
		}
		// The holder's session keeps the lock across its own transactions.
		_, err = lock.Conn().ExecContext(e.ctx, `BEGIN; ROLLBACK`)
		e.must(err, "a transaction on the holding connection")
		if held, err := lock.Held(e.ctx); err != nil || !held {
			e.t.Errorf("rule: a session lock survives a rollback on its connection; Held = %v, %v", held, err)
		}
		e.must(lock.Close(), "Close")
		l2, ok, err := a.l2.TryLockConn(e.ctx, c, key)
		if err != nil || !ok {
			e.t.Fatalf("rule: Close releases a session lock; TryLockConn afterwards = %v, %v", ok, err)
		}
		e.must(l2.Close(), "Close")
	})

	registerAdvisory("Advisory/TryFormsNeverBlock", func(e *sqlEnv) {
		a := newAdvEnv(e)
		key := a.advKey("try")
		holder, _ := a.advHoldTx(key)
		tx := a.begin(e.db2)
		pids := []int{a.advPID(tx)}
		tries := map[string]func(ctx context.Context) (bool, error){
			"TryLockTx": func(ctx context.Context) (bool, error) { return a.l2.TryLockTx(ctx, tx, key) },
		}
		if !e.h.NoSessionState {
			conn := a.advConn(e.db2)
			pids = append(pids, a.advPID(conn))
			tries["TryLockConn"] = func(ctx context.Context) (bool, error) {
				_, ok, err := a.l2.TryLockConn(ctx, conn, key)
				return ok, err
			}
			tries["TryLockSession"] = func(ctx context.Context) (bool, error) {
				_, ok, err := a.l2.TryLockSession(ctx, key)
				return ok, err
			}
		}
		for name, try := range tries {
			ctx, cancel := context.WithTimeout(e.ctx, 5*time.Second)
			start := time.Now()
			ok, err := try(ctx)
			d := time.Since(start)
			cancel()
			if err != nil || ok || d > e.slow().scale(time.Second) {
				e.t.Errorf("rule: %s of a held key returns false at once (within 1 s × the slowdown); got %v, %v after %v (held by pid %d; %s)", name, ok, err, d, holder, e.slow())
			}
		}
		for _, pid := range pids {
			if a.advWaiting(key, pid) {
				e.t.Errorf("rule: a try form leaves no waiter behind; pid %d waits in pg_locks", pid)
			}
		}
	})

	registerAdvisory("Advisory/SessionLockNeverLeaksIntoPool", func(e *sqlEnv) {
		e.needSessionState("session-level advisory locks")
		// A pool of one connection: whatever Close returns to the pool is
		// what the next Conn gets, and it must hold nothing.
		a := newAdvEnv(e)
		db, l := a.onePool()
		key := a.advKey("leak")

		lock, err := l.LockSession(e.ctx, key)
		e.must(err, "LockSession")
		pid := a.advPID(lock.Conn())
		if n := a.advPIDHolds(pid); n != 1 {
			e.t.Errorf("setup: the session holds its lock; pg_locks has %d rows for pid %d", n, pid)
		}
		e.must(lock.Close(), "Close")
		next := a.advConn(db)
		if p := a.advPID(next); p == pid {
			if n := a.advPIDHolds(pid); n != 0 {
				e.t.Errorf("rule: a closed SessionLock returns its connection to the pool holding nothing; pid %d has %d advisory locks", pid, n)
			}
		} else if n := a.advPIDHolds(pid); n != 0 {
			e.t.Errorf("rule: a closed SessionLock leaves nothing held; old pid %d has %d advisory locks", pid, n)
		}

		// The same with a connection the caller pinned and returns itself.
		lock2, err := l.LockConn(e.ctx, next, key)
		e.must(err, "LockConn")
		e.must(lock2.Close(), "Close")
		pid2 := a.advPID(next)
		e.must(next.Close(), "Conn.Close")
		again := a.advConn(db)
		if p := a.advPID(again); a.advPIDHolds(p) != 0 || a.advPIDHolds(pid2) != 0 {
			e.t.Errorf("rule: after Close and Conn.Close, the pool's connection holds no advisory lock (pid %d)", p)
		}
		e.must(again.Close(), "Conn.Close")

		// A LockSession whose wait times out leaves its connection holding
		// nothing. (The pool has a connection to spare for the Locker's
		// server-side cancel; see advisory.Client.)
		db3 := e.h.Open(e.t)
		db3.SetMaxOpenConns(3)
		db3.SetMaxIdleConns(3)
		// Connections are opened before the deadline starts, so that on a
		// loaded machine the deadline ends the lock wait, not a connect.
		warm := make([]*sql.Conn, 0, 2)
		for range 2 {
			warm = append(warm, a.advConn(db3))
		}
		for _, c := range warm {
			e.must(c.Close(), "Conn.Close")
		}
		l3 := a.locker(db3)
		holder, release := a.advHold(key)
		ctx, cancel := context.WithTimeout(e.ctx, 3*time.Second)
		defer cancel()
		done := make(chan error, 1)
		go func() {
			_, err := l3.LockSession(ctx, key)
			done <- err
		}()
		var waiter int
		a.advWaitFor("LockSession to wait for the lock", func() bool {
			for _, r := range a.advRows(key) {
				if !r.Granted && r.PID != holder {
					waiter = r.PID
					return true
				}
			}
			return false
		})
		err = <-done
		if advCode(err) != syncguard.ErrAcquisitionTimeout {
			e.t.Errorf("rule: a LockSession whose deadline passes while the key is held fails with AcquisitionTimeout; got %v", err)
		}
		if n := a.advPIDHolds(waiter); n != 0 {
			e.t.Errorf("rule: a timed-out LockSession leaves its connection holding and awaiting nothing; pid %d has %d rows", waiter, n)
		}
		release()
	})

	registerAdvisory("Advisory/SessionUnlockOfNothingIsReported", func(e *sqlEnv) {
		e.needSessionState("session-level advisory locks")
		a := newAdvEnv(e)
		key := a.advKey("notheld")
		conn := a.advConn(e.db)
		err := a.l.UnlockConn(e.ctx, conn, key)
		if !errors.Is(err, advisory.ErrNotHeld) || advCode(err) != syncguard.ErrInternal {
			e.t.Errorf("rule: UnlockConn of a lock the session does not hold reports ErrNotHeld, as SessionLock.Unlock does; got %v", err)
		}
		lock, err := a.l.LockConn(e.ctx, conn, key)
		e.must(err, "LockConn")
		if err := a.l.UnlockConn(e.ctx, conn, key); err != nil {
			e.t.Errorf("rule: UnlockConn of a held lock succeeds; got %v", err)
		}
		err = lock.Close()
		if !errors.Is(err, advisory.ErrNotHeld) || advCode(err) != syncguard.ErrInternal {
			e.t.Errorf("rule: a SessionLock whose lock was unlocked behind its back reports ErrNotHeld on Close; got %v", err)
		}
		if err := conn.PingContext(e.ctx); err != nil {
			e.t.Errorf("rule: a not-held unlock leaves the connection usable; Ping = %v", err)
		}
		// Session locks stack: two locks need two unlocks.
		l1, err := a.l.LockConn(e.ctx, conn, key)
		e.must(err, "LockConn")
		l2, err := a.l.LockConn(e.ctx, conn, key)
		e.must(err, "LockConn again on the same session")
		e.must(l1.Close(), "first Close")
		if held, err := l2.Held(e.ctx); err != nil || !held {
			e.t.Errorf("rule: a session lock taken twice stays held after one unlock; Held = %v, %v", held, err)
		}
		e.must(l2.Close(), "second Close")
		if n := a.advPIDHolds(a.advPID(conn)); n != 0 {
			e.t.Errorf("rule: two unlocks release a lock taken twice; %d rows left", n)
		}
	})

	registerAdvisory("Advisory/CancelRacingTheWaitTx", func(e *sqlEnv) {
		// The context ends around the start of the wait: during the try,
		// while the blocking statement is on its way to the server, or as it
		// begins to wait. The server-side cancel (which only ends an
		// advisory-lock wait of the transaction's own session) must still
		// end the call with Aborted and leave the transaction usable for
		// rollback, and the holder undisturbed.
		a := newAdvEnv(e)
		key := a.advKey("cancel-race")
		holder, _ := a.advHoldTx(key)
		// A LockTx whose wait had not reached the server within advisory's
		// window for the server-side cancel (advCancelWindow) falls back to
		// the driver's cancel, which breaks the transaction, as documented:
		// on a slow machine some may; all of them is a broken cancel.
		var fellBack []string
		const tries = 24
		for i := range tries {
			tx := a.begin(e.db)
			a.advPID(tx)
			delay := time.Duration(i) * 250 * time.Microsecond
			ctx, cancel := context.WithCancel(e.ctx)
			timer := time.AfterFunc(delay, cancel)
			start := time.Now()
			err := a.l.LockTx(ctx, tx, key)
			took := time.Since(start)
			timer.Stop()
			cancel()
			if advCode(err) != syncguard.ErrAborted {
				e.t.Errorf("rule: a cancel %v after LockTx starts on a held key ends it with Aborted; got %v", delay, err)
			}
			if budget := e.slow().scale(advCancelBudget); took > delay+budget {
				e.t.Errorf("rule: a cancel %v after LockTx starts returns within %v (%v × the slowdown); took %v (%s)", delay, budget, advCancelBudget, took, e.slow())
			}
			if err := tx.Rollback(); err != nil {
				if took >= delay+advCancelWindow {
					fellBack = append(fellBack, fmt.Sprintf("cancelled after %v, returned after %v: Rollback = %v", delay, took, err))
					continue
				}
				e.t.Errorf("rule: the transaction of a LockTx cancelled %v after it started can be rolled back; Rollback = %v (LockTx returned after %v)", delay, err, took)
			}
		}
		if len(fellBack) > 0 {
			e.t.Logf("on this machine (%s) %d of %d LockTx calls outlasted the server-side cancel's %v and fell back to the driver's cancel: %s",
				e.slow(), len(fellBack), tries, advCancelWindow, strings.Join(fellBack, "; "))
		}
		if len(fellBack) == tries {
			e.t.Errorf("rule: a LockTx cancelled as its wait begins is cancelled on the server, keeping the transaction; all %d fell back to the driver's cancel (%s)", tries, e.slow())
		}
		if rows := a.advRows(key); len(rows) != 1 || rows[0].PID != holder || !rows[0].Granted {
			e.t.Errorf("rule: cancelling waiters does not disturb the holder; pg_locks rows %+v", rows)
		}
	})

	registerAdvisory("Advisory/CancelWhileWaitingSession", func(e *sqlEnv) {
		e.needSessionState("session-level advisory locks")
		a := newAdvEnv(e)
		key := a.advKey("cancel-session")
		a.advHold(key)
		// One try; a try whose server-side cancel missed advisory's window
		// (advCancelWindow) on a slow machine fell back to the driver's
		// cancel, which closes the connection, as documented: it is
		// repeated, up to three times.
		try := func(last bool) (retry bool) {
			conn := a.advConn(e.db)
			pid := a.advPID(conn)
			ctx, cancel := context.WithCancel(e.ctx)
			done := make(chan error, 1)
			go func() {
				_, err := a.l.LockConn(ctx, conn, key)
				done <- err
			}()
			a.advWaitFor("the connection to wait for the lock", func() bool { return a.advWaiting(key, pid) })
			fired := time.Now()
			cancel()
			err := <-done
			took := time.Since(fired)
			if budget := e.slow().scale(advCancelBudget); took > budget {
				e.t.Errorf("rule: a cancel while LockConn waits returns within %v (%v × the slowdown); took %v (%s)", budget, advCancelBudget, took, e.slow())
			}
			if advCode(err) != syncguard.ErrAborted {
				e.t.Errorf("rule: a cancel while LockConn waits ends it with Aborted; got %v", err)
			}
			if err := conn.PingContext(e.ctx); err != nil {
				if took >= advCancelWindow && !last {
					e.t.Logf("on this machine (%s) the cancel outlasted the server-side cancel's %v (%v) and fell back to the driver's, closing the connection: trying again", e.slow(), advCancelWindow, took)
					return true
				}
				e.t.Errorf("rule: a cancelled LockConn leaves the pinned connection usable; Ping = %v (returned after %v)", err, took)
				return false
			}
			if p := a.advPID(conn); p != pid || a.advPIDHolds(pid) != 0 {
				e.t.Errorf("rule: a cancelled LockConn keeps the same session (pid %d → %d) holding and awaiting nothing (%d rows)", pid, p, a.advPIDHolds(pid))
			}
			return false
		}
		for i := 1; try(i == 3); i++ {
		}
	})

	registerAdvisory("Advisory/MonitoringShowsHoldersAndWaiters", func(e *sqlEnv) {
		// Transaction locks only, so that the case runs behind a pooler in
		// transaction mode too; pg_locks shows session locks the same way.
		a := newAdvEnv(e)
		decl := a.reg.MustDeclare(advisory.Decl{Name: "jobs.nightly", Kind: advisory.Transaction,
			Params: []string{"tenant"}, Purpose: "monitoring case"})
		key := decl.MustKey("t1")
		holder, release := a.advHoldTx(key)
		tx := a.begin(e.db2)
		waiter := a.advPID(tx)
		done := make(chan error, 1)
		go func() { done <- a.l2.LockTx(e.ctx, tx, key) }()
		a.advWaitFor("the waiter to appear in pg_locks", func() bool { return a.advWaiting(key, waiter) })

		rows := a.advRows(key)
		var h, w *advisory.Entry
		for i := range rows {
			switch rows[i].PID {
			case holder:
				h = &rows[i]
			case waiter:
				w = &rows[i]
			}
		}
		if h == nil || !h.Granted || h.Name != "jobs.nightly" || h.Mode != "ExclusiveLock" || h.Key.Name() != "jobs.nightly" {
			e.t.Errorf("rule: Locks lists the holder (pid %d) as granted, with its registry name; got %+v", holder, rows)
		}
		if w == nil || w.Granted || !slices.Contains(w.BlockedBy, holder) || w.Name != "jobs.nightly" {
			e.t.Errorf("rule: Locks lists the waiter (pid %d) as not granted, blocked by the holder %d; got %+v", waiter, holder, rows)
		}
		if w != nil && (w.XactStart.IsZero() || w.QueryStart.IsZero()) {
			e.t.Errorf("rule: Locks reports the waiter's transaction and statement start; got %+v", *w)
		}
		waiting, err := a.l.Waiting(e.ctx)
		e.must(err, "Waiting")
		var sawWaiter bool
		for _, r := range waiting {
			if r.Granted {
				e.t.Errorf("rule: Waiting lists only waiting requests; got a granted row %+v", r)
			}
			if r.Key.Same(key) && r.PID == waiter {
				sawWaiter = true
			}
			if r.Key.Same(key) && r.PID == holder {
				e.t.Errorf("rule: Waiting does not list holders; got %+v", r)
			}
		}
		if !sawWaiter {
			e.t.Errorf("rule: Waiting lists the waiter pid %d", waiter)
		}
		// A raw pair key decodes as a pair, without a name.
		pair := advisory.Pair(int32(advID(key)>>32), -7)
		pairPID, releasePair := a.advHoldTx(pair)
		if r := a.advRows(pair); len(r) != 1 || r[0].PID != pairPID || r[0].Name != "" {
			e.t.Errorf("rule: Locks decodes two-int32 keys; got %+v for %v", r, pair)
		}
		releasePair()

		release()
		e.must(<-done, "the waiter gets the lock when the holder commits")
		if r := a.advRows(key); len(r) != 1 || r[0].PID != waiter || !r[0].Granted {
			e.t.Errorf("rule: after the holder commits, the waiter is listed as the holder; got %+v", r)
		}
		e.must(tx.Commit(), "Commit")
		if r := a.advRows(key); len(r) != 0 {
			e.t.Errorf("rule: nothing is listed once every holder has released; got %+v", r)
		}
	})

	registerAdvisory("Advisory/DeadlockIsRetryable", func(e *sqlEnv) {
		a := newAdvEnv(e)
		ka, kb := a.advKey("dead-a"), a.advKey("dead-b")
		tx1, tx2 := a.begin(e.db), a.begin(e.db2)
		e.must(a.l.LockTx(e.ctx, tx1, ka), "LockTx")
		e.must(a.l2.LockTx(e.ctx, tx2, kb), "LockTx")
		// Each side now asks for the other's key, then ends its transaction.
		errs := make(chan error, 2)
		var wg sync.WaitGroup
		for _, side := range []struct {
			l   *advisory.Client
			tx  *sql.Tx
			key advisory.Key
		}{{a.l, tx1, kb}, {a.l2, tx2, ka}} {
			wg.Go(func() {
				err := side.l.LockTx(e.ctx, side.tx, side.key)
				errs <- err
				if err != nil {
					_ = side.tx.Rollback()
				} else {
					_ = side.tx.Commit()
				}
			})
		}
		wg.Wait()
		close(errs)
		var failed, ok int
		for err := range errs {
			switch {
			case err == nil:
				ok++
			case advCode(err) == syncguard.ErrServiceUnavailable && err.(*syncguard.Error).SQLState == "40P01":
				failed++
				if !err.(*syncguard.Error).Retryable() {
					e.t.Errorf("rule: a deadlock is retryable; got %v", err)
				}
			default:
				e.t.Errorf("rule: a deadlock between LockTx calls fails one of them with ServiceUnavailable (40P01); got %v", err)
			}
		}
		if failed != 1 || ok != 1 {
			e.t.Errorf("rule: PostgreSQL breaks an advisory deadlock by failing one side; %d failed, %d succeeded", failed, ok)
		}
	})

	registerAdvisory("Advisory/IdsMatchServerAndLegacyCallers", func(e *sqlEnv) {
		a := newAdvEnv(e)
		// FromName's documented SQL gives the same id.
		name := "booking.create\x00tenant-1\x002025-01-15"
		k := a.advKey(name)
		var sqlID int64
		e.must(e.db.QueryRowContext(e.ctx, `SELECT ('x' || left(encode(sha256(convert_to($1, 'UTF8') || decode('00', 'hex') || convert_to($2, 'UTF8')), 'hex'), 16))::bit(64)::bigint`,
			a.ns, "booking.create").Scan(&sqlID), "the SQL derivation")
		want, _ := advisory.FromName(a.ns, "booking.create")
		if sqlID != advID(want) {
			e.t.Errorf("rule: FromName equals its documented SQL; Go %d, SQL %d", advID(want), sqlID)
		}
		_ = k
		// A legacy caller's pg_advisory_xact_lock(hashString(input)) and
		// FromLegacyFNV1a32(input) are the same lock (both signs).
		for _, input := range []string{"tenant-1:2025-01-15", "tenant_abc123:2025-12-03"} {
			input = a.ns + ":" + input // unique to the case
			tx := a.begin(e.db)
			h := advisory.LegacyFNV1a32(input)
			_, err := tx.ExecContext(e.ctx, fmt.Sprintf(`SELECT pg_advisory_xact_lock(%d)`, h))
			e.must(err, "the legacy caller's lock")
			tx2 := a.begin(e.db2)
			got, err := a.l2.TryLockTx(e.ctx, tx2, advisory.FromLegacyFNV1a32(input))
			if err != nil || got {
				e.t.Errorf("rule: FromLegacyFNV1a32 is the lock a legacy caller takes with pg_advisory_xact_lock(%d); TryLockTx = %v, %v", h, got, err)
			}
			_ = tx.Rollback()
			_ = tx2.Rollback()
		}
	})
}

// advID is the 64-bit id of a key of that form.
func advID(k advisory.Key) int64 {
	id, _ := k.Int64()
	return id
}

// advBook is the document's booking transaction: lock tenant+date, check,
// insert, commit. inside counts the transactions in the critical section;
// it is set negative on overlap.
func advBook(ctx context.Context, db *sql.DB, l *advisory.Client, booking *advisory.Declared, table, day string, worker int, inside *atomic.Int32) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	key, err := booking.Key("t1", day)
	if err != nil {
		return err
	}
	if err := l.LockTx(ctx, tx, key); err != nil {
		return err
	}
	if inside.Add(1) != 1 {
		inside.Store(-1000)
	}
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM `+table+` WHERE tenant = 't1' AND day = $1`, day).Scan(&n); err != nil {
		return err
	}
	if n == 0 {
		time.Sleep(2 * time.Millisecond) // widen the race window the lock closes
		if _, err := tx.ExecContext(ctx, `INSERT INTO `+table+` VALUES ('t1', $1, $2)`, day, worker); err != nil {
			return err
		}
	}
	inside.Add(-1)
	return tx.Commit()
}
