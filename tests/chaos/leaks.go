package chaos

import (
	"context"
	"database/sql"
	"fmt"
	"runtime"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/syncguard/syncguard-go/tests/pgtest/history"
)

func goroutineDump() string {
	var b strings.Builder
	_ = pprof.Lookup("goroutine").WriteTo(&b, 1)
	return b.String()
}

// checkLeaks waits for the pools to settle, compares client and server
// connection counts, closes everything (closeAll) and checks that the
// goroutines and server sessions return to the baseline.
func (r *runner) checkLeaks(ctx context.Context, baseGoroutines int, closeAll func()) string {
	count := func(apps []string) (int, error) {
		var n int
		err := r.admin.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = ANY($1)`, apps).Scan(&n)
		return n, err
	}
	var parts []string
	// A Backend whose callers waited holds one connection of its own, not
	// from its pool (the LISTEN connection that wakes waiters); Close ends
	// it, so that the pool's connections are all that is left.
	for _, a := range r.adapt {
		a.b.Close()
	}
	if r.adminB != nil {
		r.adminB.Close()
	}
	for _, a := range r.adapt {
		deadline := time.Now().Add(15 * time.Second)
		var st sql.DBStats
		var server int
		var err error
		for {
			st = a.db.Stats()
			server, err = count([]string{a.app})
			if err == nil && st.InUse == 0 && server == st.OpenConnections || time.Now().After(deadline) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		parts = append(parts, fmt.Sprintf("%s: open=%d inUse=%d idle=%d server sessions=%d waits=%d (%v)",
			a.name, st.OpenConnections, st.InUse, st.Idle, server, st.WaitCount, st.WaitDuration.Round(time.Millisecond)))
		if err != nil || st.InUse != 0 || server != st.OpenConnections || st.OpenConnections > r.opts.MaxOpenConns {
			r.violate(history.Violation{Rule: "after the load, every connection is back in the pool and matches a server session",
				Detail: fmt.Sprintf("%s: db.Stats %+v; pg_stat_activity sessions %d (%v)", a.name, st, server, err)})
		}
	}
	closeAll()
	deadline := time.Now().Add(15 * time.Second)
	var n, server int
	for {
		runtime.GC()
		n = runtime.NumGoroutine()
		server, _ = count(r.appNames())
		if n <= baseGoroutines+1 && server == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	parts = append(parts, fmt.Sprintf("after close: goroutines %d (baseline %d), server sessions %d", n, baseGoroutines, server))
	if n > baseGoroutines+1 {
		r.violate(history.Violation{Rule: "no goroutine outlives the pools (runtime.NumGoroutine returns to its baseline)",
			Detail: fmt.Sprintf("%d goroutines, baseline %d\n%s", n, baseGoroutines, goroutineDump())})
	}
	if server != 0 {
		r.violate(history.Violation{Rule: "no server session outlives the pools", Detail: fmt.Sprintf("%d sessions left", server)})
	}
	return strings.Join(parts, "; ")
}
