package sgbench

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/syncguard/syncguard-go/semaphore"
)

func ksemProbe(ctx context.Context, db *sql.DB, s *semaphore.Semaphore) {
	if os.Getenv("KSEM_PROBE") == "" {
		return
	}
	const n = 200
	tm := func(name string, f func() error) {
		var ds []time.Duration
		for range n {
			t0 := time.Now()
			if err := f(); err != nil {
				fmt.Fprintln(os.Stderr, name, err)
				return
			}
			ds = append(ds, time.Since(t0))
		}
		slices.Sort(ds)
		fmt.Fprintf(os.Stderr, "probe %-30s p10 %.2f p50 %.2f ms\n", name, msf(Percentile(ds, 0.1)), msf(Percentile(ds, 0.5)))
	}
	db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS ksem_probe (x int)`)
	tm("SELECT 1", func() error { return db.QueryRowContext(ctx, "SELECT 1").Scan(new(int)) })
	tm("SELECT $1", func() error { return db.QueryRowContext(ctx, "SELECT $1::int", 1).Scan(new(int)) })
	tm("INSERT commit (fsync)", func() error { _, err := db.ExecContext(ctx, "INSERT INTO ksem_probe VALUES ($1)", 1); return err })
	key := fmt.Sprintf("probe-%d", time.Now().UnixNano())
	tm("acquire+release (no waiters)", func() error {
		r, err := s.Acquire(ctx, key, time.Minute)
		if err != nil {
			return err
		}
		_, err = s.Release(ctx, r.LockID)
		return err
	})
	var ids []string
	for range 3 {
		r, _ := s.Acquire(ctx, key, time.Minute)
		ids = append(ids, r.LockID)
	}
	tm("acquire refused (plain)", func() error { _, err := s.Acquire(ctx, key, time.Minute); return err })
	for _, id := range ids {
		s.Release(ctx, id)
	}
}
