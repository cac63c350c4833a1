package conformance

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/syncguard/syncguard-go/syncguard"
)

// advCancelWindow is how long the Locker tries to cancel a wait on the
// server, keeping the transaction, before the driver cancels it
// (advisory's cancelTimeout): a LockTx that returned sooner did not fall
// back to the driver.
const advCancelWindow = 250 * time.Millisecond

func init() {
	registerAdvisory("Advisory/CancelWhileWaitingTx", func(e *sqlEnv) {
		a := newAdvEnv(e)
		key := a.advKey("cancel-tx")
		holder, _ := a.advHoldTx(key)
		// One try of mode; retry says that the server-side cancel missed
		// advisory's window for it (advCancelWindow) on a slow machine, so
		// that the Locker fell back to the driver's cancel, which breaks
		// the transaction, as documented: the try is repeated.
		try := func(mode string, last bool) (retry bool) {
			var fails []string
			tx := a.begin(e.db)
			pid := a.advPID(tx)
			ctx, cancel := context.WithCancel(e.ctx)
			want := syncguard.ErrAborted
			if mode == "deadline" {
				ctx, cancel = context.WithTimeout(e.ctx, e.slow().scale(300*time.Millisecond))
				want = syncguard.ErrAcquisitionTimeout
			}
			done := make(chan error, 1)
			go func() { done <- a.l.LockTx(ctx, tx, key) }()
			a.advWaitFor("the transaction to wait for the lock", func() bool { return a.advWaiting(key, pid) })
			var fired time.Time
			if mode == "cancel" {
				fired = time.Now()
				cancel()
			} else {
				dl, _ := ctx.Deadline()
				fired = dl
			}
			err := <-done
			took := time.Since(fired)
			cancel()
			if advCode(err) != want {
				fails = append(fails, fmt.Sprintf("rule: %s while LockTx waits ends it with %s; got %v", mode, want, err))
			}
			if budget := e.slow().scale(advCancelBudget); took > budget {
				fails = append(fails, fmt.Sprintf("rule: %s while LockTx waits returns within %v (%v × the slowdown); took %v (%s)", mode, budget, advCancelBudget, took, e.slow()))
			}
			if a.advWaiting(key, pid) {
				fails = append(fails, fmt.Sprintf("rule: a cancelled LockTx leaves no waiter in pg_locks; pid %d still waits", pid))
			}
			var one int
			err = tx.QueryRowContext(e.ctx, `SELECT 1`).Scan(&one)
			e.t.Logf("%s: next statement in the transaction: %v", mode, err)
			if err := tx.Rollback(); err != nil {
				if took >= advCancelWindow && !last {
					e.t.Logf("%s: the server-side cancel took longer than advisory's %v on this machine (%v; %s), the driver cancelled: retried (%s)",
						mode, advCancelWindow, took, e.slow(), strings.Join(append(fails, "Rollback = "+err.Error()), "; "))
					return true
				}
				fails = append(fails, fmt.Sprintf("rule: the transaction of a cancelled LockTx can be rolled back; Rollback = %v (LockTx returned %v after the context ended)", err, took))
			}
			for _, f := range fails {
				e.t.Error(f)
			}
			return false
		}
		for _, mode := range []string{"cancel", "deadline"} {
			for i := 0; try(mode, i == 2); i++ {
			}
		}
		if rows := a.advRows(key); len(rows) != 1 || rows[0].PID != holder || !rows[0].Granted {
			e.t.Errorf("rule: cancelling a waiter does not disturb the holder; pg_locks rows %+v", rows)
		}
	})
}
