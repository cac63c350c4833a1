package sgbench

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/syncguard/syncguard-go/internal/rules"
	"github.com/syncguard/syncguard-go/syncguard"
)

// CrashedHolder runs W6d: keys holders acquire with TTL ttl and never
// release; a waiter per key (a process of its own) calls Lock at once. The
// delay is the waiter's acquired_at_ms minus the holder's expires_at_ms +
// 1000 (the tolerance), in server time, so it excludes the final
// response's way back (well under a millisecond here).
func (w *WaitEnv) CrashedHolder(ctx context.Context, variants []string, keys, rounds int, ttl time.Duration) (*WaitResult, error) {
	res := &WaitResult{Bench: "syncguard", Driver: w.Driver, Workload: "w6d",
		Title:   fmt.Sprintf("a crashed holder (TTL %v, never released): from its expiry + 1 s to the waiter's acquire", ttl),
		Measure: "server time from expires_at_ms + 1000 to the waiter's acquired_at_ms",
		Params:  map[string]any{"keys": keys, "rounds": rounds, "ttl_ms": msf(ttl)}}
	for _, name := range variants {
		if name == VarNotifyOne {
			continue
		}
		row := WaitRow{Variant: name}
		var delays []time.Duration
		holderProc, err := w.OpenProc(ctx, name, 2)
		if err != nil {
			return nil, err
		}
		var waiters []*proc
		for range keys {
			pr, err := w.OpenProc(ctx, name, 2)
			if err != nil {
				return nil, err
			}
			waiters = append(waiters, pr)
		}
		for r := range rounds {
			var mu sync.Mutex
			var wg sync.WaitGroup
			for i, wp := range waiters {
				key := fmt.Sprintf("%s:w6d:%d:%d:%d", w.RunID, slices.Index(WaitVariants, name), r, i)
				hr, err := holderProc.locker.Acquire(ctx, key, ttl)
				if err != nil || !hr.OK {
					return nil, fmt.Errorf("w6d: holder acquire: %v %v", hr, err)
				}
				expires, err := readMs(ctx, holderProc.db, holderProc.table, "expires_at_ms", hr.LockID)
				if err != nil {
					return nil, err
				}
				wg.Go(func() {
					l, err := syncguard.Lock(ctx, wp.locker, key, &syncguard.LockOptions{TTL: 30 * time.Second,
						Acquisition: syncguard.AcquisitionOptions{Timeout: ttl + 10*time.Second, MaxRetries: 1000}})
					var acquired int64
					if err == nil {
						acquired, err = readMs(ctx, wp.db, wp.table, "acquired_at_ms", l.LockID())
						l.Close()
					}
					mu.Lock()
					defer mu.Unlock()
					switch {
					case err == nil:
						delays = append(delays, time.Duration(acquired-(expires+1000))*time.Millisecond)
						row.Acquired++
					case errors.Is(err, syncguard.ErrAcquisitionTimeout):
						row.Timeouts++
					default:
						row.Errors++
						if row.FirstError == "" {
							row.FirstError = err.Error()
						}
					}
				})
			}
			wg.Wait()
		}
		holderProc.close()
		for _, wp := range waiters {
			wp.close()
		}
		row.P50, row.P99, row.Max = summarizeMs(delays)
		res.Rows = append(res.Rows, row)
		if name == VarNotify {
			res.Targets = append(res.Targets, Target{Name: "w6d delay after expiry + 1 s, p50 ms", Value: row.P50, Goal: "<= 50", Met: row.P50 <= 50 && row.Acquired > 0})
		}
	}
	return res, nil
}

func readMs(ctx context.Context, db *sql.DB, table, col, lockID string) (int64, error) {
	var v int64
	err := db.QueryRowContext(ctx, `SELECT `+col+` FROM `+rules.QuoteIdent(table)+` WHERE lock_id = $1`, lockID).Scan(&v)
	if err != nil {
		return 0, fmt.Errorf("reading %s: %w", col, err)
	}
	return v, nil
}
