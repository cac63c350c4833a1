package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"
)

// Fault kinds.
const (
	FaultCut       = "cut"       // reset N (0: all) proxied connections
	FaultDelay     = "delay"     // add N ms per chunk for For
	FaultBlackhole = "blackhole" // drop all traffic for For, then reset
	FaultTerminate = "terminate" // pg_terminate_backend of N pool connections
	FaultLockStorm = "lockstorm" // ACCESS EXCLUSIVE on the lock table for For: lock_timeout / statement_timeout fire
	FaultRestart   = "restart"   // immediate-mode server restart (a crash)
)

// Fault is one scheduled fault.
type Fault struct {
	Kind string
	At   time.Duration // from the start of the load
	For  time.Duration // how long it lasts (delay, blackhole, lockstorm)
	N    int
}

func (f Fault) String() string {
	switch f.Kind {
	case FaultCut:
		if f.N <= 0 {
			return "cut(all)"
		}
		return fmt.Sprintf("cut(%d)", f.N)
	case FaultDelay:
		return fmt.Sprintf("delay(%dms,%v)", f.N, f.For)
	case FaultTerminate:
		return fmt.Sprintf("terminate(%d)", f.N)
	case FaultBlackhole, FaultLockStorm:
		return fmt.Sprintf("%s(%v)", f.Kind, f.For)
	}
	return f.Kind
}

// ShortSchedule is the CI plan for a 20 s load: every fault once, the
// restart last, then 4 s of quiet to show recovery.
func ShortSchedule() []Fault {
	return []Fault{
		{Kind: FaultCut, At: 2 * time.Second},
		{Kind: FaultDelay, At: 3500 * time.Millisecond, For: 2 * time.Second, N: 250},
		{Kind: FaultTerminate, At: 6 * time.Second, N: 3},
		{Kind: FaultTerminate, At: 6500 * time.Millisecond, N: 3},
		{Kind: FaultBlackhole, At: 7500 * time.Millisecond, For: 4500 * time.Millisecond},
		{Kind: FaultLockStorm, At: 12500 * time.Millisecond, For: 1500 * time.Millisecond},
		{Kind: FaultRestart, At: 15 * time.Second},
	}
}

// RandomSchedule is the long plan: random faults with random gaps until d
// minus 8 s of final quiet, with a restart about every 50 s.
func RandomSchedule(r *rand.Rand, d time.Duration) []Fault {
	var out []Fault
	at := 2 * time.Second
	nextRestart := 30 * time.Second
	kinds := []string{FaultCut, FaultDelay, FaultBlackhole, FaultTerminate, FaultLockStorm}
	for at < d-8*time.Second {
		f := Fault{At: at}
		if at >= nextRestart {
			f.Kind = FaultRestart
			nextRestart = at + 40*time.Second + time.Duration(r.IntN(20))*time.Second
		} else {
			f.Kind = kinds[r.IntN(len(kinds))]
		}
		switch f.Kind {
		case FaultCut:
			f.N = r.IntN(4) // 0: all
		case FaultDelay:
			f.N = 50 + r.IntN(400)
			f.For = time.Duration(1000+r.IntN(5000)) * time.Millisecond
		case FaultBlackhole:
			f.For = time.Duration(2000+r.IntN(6000)) * time.Millisecond
		case FaultTerminate:
			f.N = 1 + r.IntN(4)
		case FaultLockStorm:
			f.For = time.Duration(300+r.IntN(2700)) * time.Millisecond
		}
		out = append(out, f)
		at += f.For + time.Duration(1500+r.IntN(3500))*time.Millisecond
		if f.Kind == FaultRestart {
			at += 2 * time.Second
		}
	}
	return out
}

// runSchedule injects the faults in order; it returns after the last one.
func (r *runner) runSchedule(ctx context.Context, start time.Time) {
	for _, f := range r.opts.Schedule {
		if f.At >= r.opts.Duration {
			break
		}
		select {
		case <-time.After(time.Until(start.Add(f.At))):
		case <-ctx.Done():
			return
		}
		rec := FaultRecord{Fault: f, Start: time.Now()}
		rec.Detail = r.inject(ctx, f)
		rec.End = time.Now()
		r.opts.Logf("chaos: %6.1fs %s: %s", rec.Start.Sub(start).Seconds(), f, rec.Detail)
		r.mu.Lock()
		r.faults = append(r.faults, rec)
		r.mu.Unlock()
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-time.After(d):
	case <-ctx.Done():
	}
}

func (r *runner) inject(ctx context.Context, f Fault) string {
	switch f.Kind {
	case FaultCut:
		return fmt.Sprintf("reset %d connections", r.proxy.Cut(f.N))
	case FaultDelay:
		r.proxy.SetDelay(time.Duration(f.N) * time.Millisecond)
		sleepCtx(ctx, f.For)
		r.proxy.SetDelay(0)
		return fmt.Sprintf("+%d ms per chunk each way", f.N)
	case FaultBlackhole:
		n := r.proxy.Blackhole()
		sleepCtx(ctx, f.For)
		r.proxy.Heal()
		return fmt.Sprintf("%d connections caught; all traffic dropped", n)
	case FaultTerminate:
		return r.terminate(ctx, f.N)
	case FaultLockStorm:
		return r.lockStorm(ctx, f.For)
	case FaultRestart:
		return r.restart(ctx)
	}
	return "unknown fault"
}

func (r *runner) appNames() []string {
	var s []string
	for _, a := range r.adapt {
		s = append(s, a.app)
	}
	return s
}

func (r *runner) terminate(ctx context.Context, n int) string {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	rows, err := r.admin.QueryContext(cctx, `SELECT pid FROM pg_stat_activity WHERE application_name = ANY($1) ORDER BY random() LIMIT $2`,
		r.appNames(), n)
	if err != nil {
		return "listing backends failed: " + err.Error()
	}
	var pids []int
	for rows.Next() {
		var pid int
		if rows.Scan(&pid) == nil {
			pids = append(pids, pid)
		}
	}
	rows.Close()
	done := 0
	for _, pid := range pids {
		var ok bool
		if r.admin.QueryRowContext(cctx, `SELECT pg_terminate_backend($1)`, pid).Scan(&ok) == nil && ok {
			done++
		}
	}
	return fmt.Sprintf("terminated %d backends", done)
}

func (r *runner) lockStorm(ctx context.Context, d time.Duration) string {
	cctx, cancel := context.WithTimeout(ctx, d+10*time.Second)
	defer cancel()
	tx, err := r.admin.BeginTx(cctx, nil)
	if err != nil {
		return "begin failed: " + err.Error()
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(cctx, `LOCK TABLE "`+r.cfg.TableName+`" IN ACCESS EXCLUSIVE MODE`); err != nil {
		return "lock table failed: " + err.Error()
	}
	sleepCtx(ctx, d)
	return "lock table held ACCESS EXCLUSIVE (pq pool: lock_timeout=300ms, pgx pool: statement_timeout=600ms)"
}
