package sgbench

import (
	"context"
	"fmt"
	"time"
)

// WALRow is the WAL written by n failed acquire attempts on a held key.
type WALRow struct {
	Variant         string  `json:"variant"`
	Attempts        int     `json:"attempts"`
	WALBytes        int64   `json:"wal_bytes"`
	BytesPerAttempt float64 `json:"wal_bytes_per_failed_attempt"`
}

// WALResult is the failed-attempt durability probe: one JSON line.
type WALResult = TableResult[WALRow]

// FailedAttemptWAL holds one key per locker and makes n sequential acquire
// attempts on it, which must all fail, measuring pg_current_wal_insert_lsn()
// before and after. WAL that is not written cannot be flushed: zero bytes
// means the failed attempts committed nothing durable and waited for no
// fsync. (The position is cluster-wide, so a few bytes of background
// activity, e.g. a running-xacts record, may be attributed to the probe.)
func (e *Env) FailedAttemptWAL(ctx context.Context, n int) (*WALResult, error) {
	res := &WALResult{Bench: "syncguard", Driver: e.Cfg.Driver, Workload: "w3_failed_attempt_wal",
		Method: "pg_current_wal_insert_lsn() delta over sequential failed acquires of a held key"}
	for _, v := range e.lockVariants() {
		key := fmt.Sprintf("%s:walprobe:%s", e.Cfg.RunID, v.Role)
		id, ok, err := v.L.Acquire(ctx, key, 10*time.Minute)
		if err != nil || !ok {
			return nil, fmt.Errorf("%s: holder: ok=%v err=%v", v.Name, ok, err)
		}
		// one unmeasured attempt: lets any page pruning or hint-bit work
		// triggered by the holder's insert happen outside the window.
		if _, _, err := v.L.Acquire(ctx, key, time.Minute); err != nil {
			return nil, err
		}
		before, err := e.LSN(ctx)
		if err != nil {
			return nil, err
		}
		for range n {
			_, ok, err := v.L.Acquire(ctx, key, time.Minute)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", v.Name, err)
			}
			if ok {
				return nil, fmt.Errorf("%s: acquired a held key", v.Name)
			}
		}
		after, err := e.LSN(ctx)
		if err != nil {
			return nil, err
		}
		if _, err := v.L.Release(ctx, id); err != nil {
			return nil, err
		}
		res.Rows = append(res.Rows, WALRow{Variant: v.Name, Attempts: n, WALBytes: after - before, BytesPerAttempt: float64(after-before) / float64(n)})
	}
	s := res.Rows[0]
	res.Targets = []Target{{Name: "WAL bytes per failed acquire attempt", Value: s.BytesPerAttempt, Goal: "~ 0 (< 1)", Met: s.BytesPerAttempt < 1}}
	return res, nil
}
